// SOVAI_CHECK: assertions on invariants. A failed check is a bug: it logs the condition, the
// location and the streamed message to stderr, then aborts. Never use it for user input — that is
// what Status is for. Checks stay on in release builds.
#pragma once

#include <sstream>

namespace sovai::base::internal {

// Collects a streamed message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* condition, const char* file, int line);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `SOVAI_CHECK(x) << ...` be an expression of type void on both branches.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace sovai::base::internal

#define SOVAI_CHECK(condition)                       \
  (condition) ? (void)0                              \
              : ::sovai::base::internal::Voidify() & \
                    ::sovai::base::internal::CheckFailure(#condition, __FILE__, __LINE__).stream()

#define SOVAI_CHECK_EQ(a, b) SOVAI_CHECK((a) == (b)) << #a " == " #b " "
#define SOVAI_CHECK_NE(a, b) SOVAI_CHECK((a) != (b)) << #a " != " #b " "
#define SOVAI_CHECK_LT(a, b) SOVAI_CHECK((a) < (b)) << #a " < " #b " "
#define SOVAI_CHECK_LE(a, b) SOVAI_CHECK((a) <= (b)) << #a " <= " #b " "
#define SOVAI_CHECK_GT(a, b) SOVAI_CHECK((a) > (b)) << #a " > " #b " "
#define SOVAI_CHECK_GE(a, b) SOVAI_CHECK((a) >= (b)) << #a " >= " #b " "
