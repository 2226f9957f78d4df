#include "net/internal/file_stream.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace sovai::net::internal {

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

base::Status StreamFileRange(int fd, uint64_t offset, uint64_t length, BodyWriter& out) {
  auto buf = std::make_unique<char[]>(kStreamChunkBytes);
  uint64_t done = 0;
  while (done < length) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kStreamChunkBytes, length - done));
    ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return base::ErrnoToStatus(errno, "pread");
    }
    if (n == 0) {
      return base::DataLossError("file shrank while being sent: got " + std::to_string(done) +
                                 " of " + std::to_string(length) + " bytes");
    }
    SOVAI_RETURN_IF_ERROR(out.Write(std::string_view(buf.get(), static_cast<size_t>(n))));
    done += static_cast<uint64_t>(n);
  }
  return base::Status();
}

}  // namespace sovai::net::internal
