#include "gateway/rate_limiter.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"
#include "base/strings.h"

namespace sovai::gateway {
namespace {

constexpr int64_t kSecondMs = 1'000;
constexpr int64_t kMinuteMs = 60 * kSecondMs;
constexpr int64_t kHourMs = 60 * kMinuteMs;

base::Status BadLimit(std::string_view text, std::string_view why) {
  return base::InvalidArgumentError("invalid rate limit \"" + std::string(text) +
                                    "\": " + std::string(why) +
                                    "; expected N/s, N/min or N/h such as \"400/min\"");
}

}  // namespace

base::Result<RateLimit> ParseRateLimit(std::string_view text) {
  size_t slash = text.find('/');
  if (slash == std::string_view::npos) return BadLimit(text, "no '/'");
  auto requests = base::ParseUint64(text.substr(0, slash));
  if (!requests.ok()) return BadLimit(text, "the count is not a whole number");
  if (*requests < 1 || *requests > static_cast<uint64_t>(kMaxRateLimitRequests)) {
    return BadLimit(text, "the count must be 1.." + std::to_string(kMaxRateLimitRequests));
  }
  std::string_view period = text.substr(slash + 1);
  size_t digits = 0;
  while (digits < period.size() && period[digits] >= '0' && period[digits] <= '9') ++digits;
  uint64_t count = 1;
  if (digits > 0) {
    auto parsed = base::ParseUint64(period.substr(0, digits));
    if (!parsed.ok() || *parsed < 1 || *parsed > static_cast<uint64_t>(kMaxRateLimitPeriodMs)) {
      return BadLimit(text, "the period's count must be a whole number >= 1");
    }
    count = *parsed;
  }
  std::string_view unit = period.substr(digits);
  int64_t unit_ms = 0;
  if (unit == "s") {
    unit_ms = kSecondMs;
  } else if (unit == "min") {
    unit_ms = kMinuteMs;
  } else if (unit == "h") {
    unit_ms = kHourMs;
  } else {
    return BadLimit(text, "unknown unit \"" + std::string(unit) + "\"");
  }
  // count <= kMaxRateLimitPeriodMs and unit_ms <= 3.6e6: the product fits in int64.
  int64_t per_ms = static_cast<int64_t>(count) * unit_ms;
  if (per_ms > kMaxRateLimitPeriodMs) {
    return BadLimit(text, "the period must be at most " +
                              std::to_string(kMaxRateLimitPeriodMs / kHourMs) + " h");
  }
  return RateLimit{.requests = static_cast<int64_t>(*requests), .per_ms = per_ms};
}

std::string FormatRateLimit(const RateLimit& limit) {
  std::string out = std::to_string(limit.requests) + "/";
  auto with_unit = [&](int64_t unit_ms, const char* unit) {
    int64_t count = limit.per_ms / unit_ms;
    return out + (count == 1 ? "" : std::to_string(count)) + unit;
  };
  if (limit.per_ms > 0 && limit.per_ms % kHourMs == 0) return with_unit(kHourMs, "h");
  if (limit.per_ms > 0 && limit.per_ms % kMinuteMs == 0) return with_unit(kMinuteMs, "min");
  if (limit.per_ms > 0 && limit.per_ms % kSecondMs == 0) return with_unit(kSecondMs, "s");
  return out + std::to_string(limit.per_ms) + "ms";  // not from ParseRateLimit
}

RateLimiter::RateLimiter(size_t max_keys) : max_keys_(max_keys) {
  SOVAI_CHECK(max_keys >= 1) << "a RateLimiter tracks at least one key";
}

void RateLimiter::Refill(Bucket& b, int64_t now_ms) {
  if (now_ms <= b.updated_ms) return;
  // After per_ms the bucket is full whatever it held; capping keeps the product in range.
  int64_t elapsed_ms = std::min(now_ms - b.updated_ms, b.limit.per_ms);
  int64_t capacity = b.limit.requests * b.limit.per_ms;
  b.scaled_tokens = std::min(capacity, b.scaled_tokens + elapsed_ms * b.limit.requests);
  b.updated_ms = now_ms;
}

void RateLimiter::EvictOne(int64_t now_ms) {
  SOVAI_CHECK(!lru_.empty());
  auto victim = std::prev(lru_.end());
  auto it = victim;
  for (size_t scanned = 0; scanned < kRateLimitEvictionScan; ++scanned) {
    Refill(*it, now_ms);
    if (it->scaled_tokens == it->limit.requests * it->limit.per_ms) {
      victim = it;
      break;
    }
    if (it == lru_.begin()) break;
    --it;
  }
  index_.erase(victim->key);
  lru_.erase(victim);
  ++evictions_;
}

Admission RateLimiter::Acquire(std::string_view key, const RateLimit& limit, int64_t now_ms) {
  SOVAI_CHECK(limit.requests >= 1 && limit.requests <= kMaxRateLimitRequests && limit.per_ms >= 1 &&
              limit.per_ms <= kMaxRateLimitPeriodMs)
      << "invalid rate limit " << limit.requests << "/" << limit.per_ms << "ms";
  std::lock_guard<std::mutex> lock(mu_);
  Bucket* b;
  if (auto found = index_.find(key); found != index_.end()) {
    lru_.splice(lru_.begin(), lru_, found->second);
    b = &lru_.front();
    Refill(*b, now_ms);
    if (b->limit != limit) {
      int64_t whole = b->scaled_tokens / b->limit.per_ms;
      b->limit = limit;
      b->scaled_tokens = std::min(whole, limit.requests) * limit.per_ms;
    }
  } else {
    if (lru_.size() >= max_keys_) EvictOne(now_ms);
    lru_.push_front({.key = std::string(key),
                     .limit = limit,
                     .scaled_tokens = limit.requests * limit.per_ms,
                     .updated_ms = now_ms});
    index_.emplace(lru_.front().key, lru_.begin());
    b = &lru_.front();
  }

  if (b->scaled_tokens >= limit.per_ms) {
    b->scaled_tokens -= limit.per_ms;
    return {.allowed = true, .retry_after_ms = 0, .remaining = b->scaled_tokens / limit.per_ms};
  }
  int64_t missing = limit.per_ms - b->scaled_tokens;
  return {.allowed = false,
          .retry_after_ms = (missing + limit.requests - 1) / limit.requests,
          .remaining = 0};
}

size_t RateLimiter::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

uint64_t RateLimiter::evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evictions_;
}

}  // namespace sovai::gateway
