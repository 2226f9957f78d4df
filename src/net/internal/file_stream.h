// Private: RAII file descriptor and streaming a file range into a BodyWriter.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "net/http.h"

namespace sovai::net::internal {

// Owns a file descriptor; closes it on destruction.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Writes bytes [offset, offset + length) of `fd` to `out` in kStreamChunkBytes pieces (pread, so
// the file offset is untouched and concurrent ranges of one fd are fine). DataLoss if the file
// shrank meanwhile.
base::Status StreamFileRange(int fd, uint64_t offset, uint64_t length, BodyWriter& out);

}  // namespace sovai::net::internal
