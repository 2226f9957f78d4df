#include "objstore/data_file.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "base/crc.h"

namespace sovai::objstore {

using base::Result;
using base::Status;

namespace {

constexpr size_t kWriteChunkBytes = 1 << 20;
// Reads of up to this many blocks at a time when verifying.
constexpr size_t kReadBlocks = 16;

void PutLe32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutLe64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

Status ReadFully(const base::RandomAccessFile& file, uint64_t offset, char* buf, size_t n,
                 const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(size_t got, file.ReadAt(offset, std::span<char>(buf, n)));
  if (got < n) return base::DataLossError("'" + path + "' is shorter than its footer says");
  return Status();
}

}  // namespace

Result<std::unique_ptr<DataFileWriter>> DataFileWriter::Create(base::Env& env,
                                                               const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<base::WritableFile> file,
                         env.NewWritableFile(path, base::WriteMode::kCreateExclusive));
  file->StreamToDisk();
  return std::unique_ptr<DataFileWriter>(new DataFileWriter(std::move(file)));
}

DataFileWriter::~DataFileWriter() = default;

Status DataFileWriter::Append(std::string_view data) {
  size_ += data.size();
  while (!data.empty()) {
    size_t take = std::min<size_t>(data.size(), kDataBlockBytes - current_fill_);
    current_crc_ = base::Crc32c(data.substr(0, take), current_crc_);
    current_fill_ += static_cast<uint32_t>(take);
    if (current_fill_ == kDataBlockBytes) {
      block_crcs_.push_back(current_crc_);
      current_crc_ = 0;
      current_fill_ = 0;
    }
    if (buffer_.empty() && take >= kWriteChunkBytes) {
      SOVAI_RETURN_IF_ERROR(file_->Append(data.substr(0, take)));
    } else {
      buffer_.append(data.data(), take);
      if (buffer_.size() >= kWriteChunkBytes) SOVAI_RETURN_IF_ERROR(Flush());
    }
    data.remove_prefix(take);
  }
  return Status();
}

Status DataFileWriter::Flush() {
  if (buffer_.empty()) return Status();
  Status st = file_->Append(buffer_);
  buffer_.clear();
  return st;
}

Status DataFileWriter::Seal() {
  if (current_fill_ > 0) {
    block_crcs_.push_back(current_crc_);
    current_crc_ = 0;
    current_fill_ = 0;
  }
  std::string table;
  table.reserve(block_crcs_.size() * 4);
  for (uint32_t crc : block_crcs_) PutLe32(table, crc);
  buffer_ += table;
  buffer_ += kDataFileMagic;
  PutLe64(buffer_, size_);
  PutLe32(buffer_, kDataBlockBytes);
  PutLe32(buffer_, static_cast<uint32_t>(block_crcs_.size()));
  PutLe32(buffer_, base::Crc32c(table));
  PutLe32(buffer_, 0);
  SOVAI_RETURN_IF_ERROR(Flush());
  SOVAI_RETURN_IF_ERROR(file_->Sync());
  return file_->Close();
}

Result<std::unique_ptr<DataFileReader>> DataFileReader::Open(base::Env& env,
                                                             const std::string& path) {
  std::unique_ptr<DataFileReader> r(new DataFileReader());
  SOVAI_ASSIGN_OR_RETURN(r->file_, env.NewRandomAccessFile(path));
  r->path_ = path;
  const base::RandomAccessFile& file = *r->file_;
  const uint64_t file_size = file.size_bytes();
  if (file_size < kDataFooterBytes) {
    return base::DataLossError("data file '" + path + "' is too short for its footer");
  }
  char footer[kDataFooterBytes];
  SOVAI_RETURN_IF_ERROR(
      ReadFully(file, file_size - kDataFooterBytes, footer, kDataFooterBytes, path));
  if (std::string_view(footer, 8) != kDataFileMagic) {
    return base::DataLossError("data file '" + path + "' has no valid footer");
  }
  uint64_t size = GetLe64(footer + 8);
  uint32_t block = GetLe32(footer + 16);
  uint32_t blocks = GetLe32(footer + 20);
  uint32_t table_crc = GetLe32(footer + 24);
  uint64_t expect_blocks = (size + kDataBlockBytes - 1) / kDataBlockBytes;
  if (block != kDataBlockBytes || blocks != expect_blocks ||
      size + uint64_t{blocks} * 4 + kDataFooterBytes != file_size) {
    return base::DataLossError("data file '" + path + "': footer does not match the file length");
  }
  std::string table(size_t{blocks} * 4, '\0');
  SOVAI_RETURN_IF_ERROR(ReadFully(file, size, table.data(), table.size(), path));
  if (base::Crc32c(table) != table_crc) {
    return base::DataLossError("data file '" + path + "': block checksum table is corrupt");
  }
  r->block_crcs_.resize(blocks);
  for (uint32_t i = 0; i < blocks; ++i) r->block_crcs_[i] = GetLe32(table.data() + 4 * i);
  r->size_ = size;
  return r;
}

Result<size_t> DataFileReader::ReadAt(uint64_t offset, char* buf, size_t n) {
  if (offset >= size_ || n == 0) return size_t{0};
  uint64_t first_block = offset / kDataBlockBytes;
  uint64_t end = std::min<uint64_t>(size_, offset + n);
  uint64_t last_block =
      std::min<uint64_t>((end - 1) / kDataBlockBytes, first_block + kReadBlocks - 1);
  uint64_t read_start = first_block * kDataBlockBytes;
  uint64_t read_end = std::min<uint64_t>(size_, (last_block + 1) * kDataBlockBytes);
  scratch_.resize(read_end - read_start);
  SOVAI_RETURN_IF_ERROR(ReadFully(*file_, read_start, scratch_.data(), scratch_.size(), path_));
  for (uint64_t b = first_block; b <= last_block; ++b) {
    uint64_t from = (b - first_block) * kDataBlockBytes;
    uint64_t len = std::min<uint64_t>(kDataBlockBytes, scratch_.size() - from);
    if (base::Crc32c(std::string_view(scratch_).substr(from, len)) != block_crcs_[b]) {
      return base::DataLossError("data file '" + path_ + "': block " + std::to_string(b) +
                                 " fails its checksum");
    }
  }
  uint64_t copy_end = std::min<uint64_t>(end, read_end);
  size_t copied = static_cast<size_t>(copy_end - offset);
  std::memcpy(buf, scratch_.data() + (offset - read_start), copied);
  return copied;
}

}  // namespace sovai::objstore
