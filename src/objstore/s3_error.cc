#include "objstore/s3_error.h"

namespace sovai::objstore {

std::string_view S3CodeName(S3Code code) {
  switch (code) {
#define SOVAI_S3_NAME(name, status) \
  case S3Code::k##name:             \
    return #name;
    SOVAI_S3_ERROR_CODES(SOVAI_S3_NAME)
#undef SOVAI_S3_NAME
  }
  return "InternalError";
}

int S3HttpStatus(S3Code code) {
  switch (code) {
#define SOVAI_S3_STATUS(name, status) \
  case S3Code::k##name:               \
    return status;
    SOVAI_S3_ERROR_CODES(SOVAI_S3_STATUS)
#undef SOVAI_S3_STATUS
  }
  return 500;
}

std::string S3Error::ToString() const { return std::string(name()) + ": " + message; }

S3Error S3ErrorFromStatus(const base::Status& status) {
  return S3Error(S3Code::kInternalError,
                 "We encountered an internal error. Please try again. (" + status.message() + ")");
}

}  // namespace sovai::objstore
