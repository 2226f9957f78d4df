// The data file format of docs/formats/objstore.md: content, a CRC-32C per 64 KiB block, a footer.
// The writer appends and seals (fsync); the reader verifies every block it returns. Both go
// through a base::Env, so tests can fail any write, sync or open (FaultInjectionEnv).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::objstore {

constexpr uint32_t kDataBlockBytes = 64 * 1024;
constexpr size_t kDataFooterBytes = 32;
constexpr std::string_view kDataFileMagic = "SOVOBJ01";

class DataFileWriter {
 public:
  // Creates `path` (which must not exist). The file streams its writes to the disk as they
  // arrive (WritableFile::StreamToDisk): an object of many GB does not fill the page cache with
  // dirty pages.
  static base::Result<std::unique_ptr<DataFileWriter>> Create(base::Env& env,
                                                              const std::string& path);
  ~DataFileWriter();

  // After an error the file is incomplete: the caller deletes it.
  base::Status Append(std::string_view data);
  // Writes the block table and the footer, then syncs and closes. The file is complete afterwards.
  base::Status Seal();
  uint64_t size() const { return size_; }

 private:
  explicit DataFileWriter(std::unique_ptr<base::WritableFile> file) : file_(std::move(file)) {}
  base::Status Flush();

  std::unique_ptr<base::WritableFile> file_;
  std::string buffer_;  // pending bytes, written in large pieces
  std::vector<uint32_t> block_crcs_;
  uint32_t current_crc_ = 0;
  uint32_t current_fill_ = 0;  // bytes in the block being checksummed
  uint64_t size_ = 0;
};

class DataFileReader {
 public:
  // Opens and checks the footer and block table. DataLoss when they are inconsistent; NotFound
  // when the file does not exist.
  static base::Result<std::unique_ptr<DataFileReader>> Open(base::Env& env,
                                                            const std::string& path);

  uint64_t size() const { return size_; }
  // Reads up to n bytes at `offset` (< size()), verifying the blocks they come from. DataLoss on a
  // checksum mismatch (the message names the file and the block).
  base::Result<size_t> ReadAt(uint64_t offset, char* buf, size_t n);

 private:
  DataFileReader() = default;
  std::unique_ptr<base::RandomAccessFile> file_;
  std::string path_;
  uint64_t size_ = 0;
  std::vector<uint32_t> block_crcs_;
  std::string scratch_;  // whole blocks read for verification
};

}  // namespace sovai::objstore
