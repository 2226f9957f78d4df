// A one-shot event many threads can wait on: Notify() once, and every WaitFor() returns true from
// then on. For handing "this happened" between threads (tests that hold a server handler until
// the client has seen something, shutdown signals).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace sovai::base {

class Notification {
 public:
  void Notify() {
    std::lock_guard lock(mu_);
    notified_ = true;
    cv_.notify_all();
  }
  // True once Notify() was called; false when `timeout` passed first.
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return notified_; });
  }
  bool HasBeenNotified() {
    std::lock_guard lock(mu_);
    return notified_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool notified_ = false;
};

}  // namespace sovai::base
