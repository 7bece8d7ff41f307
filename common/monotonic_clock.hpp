// The one clock of every bound, deadline and duration the shim and the recorder measure:
// CLOCK_MONOTONIC. A wall clock set back (NTP, `date -s`, a VM restored) would stretch a bounded
// wait without end or cut it to nothing; CLOCK_MONOTONIC is also the time line of the recorder's
// traces and of Nsight Systems. Header-only: the recorder reads it on its hot path.
#pragma once

#include <stdint.h>
#include <time.h>

namespace ferrum_replay::common {

inline uint64_t monotonic_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

inline uint64_t monotonic_ms() noexcept {
  return monotonic_ns() / 1000000u;
}

// The CLOCK_MONOTONIC time `ms` milliseconds from now, as pthread_cond_timedwait wants it for a
// condition variable made with pthread_condattr_setclock(CLOCK_MONOTONIC).
inline timespec monotonic_after_ms(long ms) noexcept {
  const uint64_t at = monotonic_ns() + static_cast<uint64_t>(ms > 0 ? ms : 0) * 1000000u;
  timespec until{};
  until.tv_sec = static_cast<time_t>(at / 1000000000u);
  until.tv_nsec = static_cast<long>(at % 1000000000u);
  return until;
}

// A bound of `ms` milliseconds from its making, for a wait that polls (a try-lock loop, a flag
// set by another thread): passed() once the time is up.
class MonotonicBound {
 public:
  explicit MonotonicBound(long ms) noexcept
      : end_ns_(monotonic_ns() + static_cast<uint64_t>(ms > 0 ? ms : 0) * 1000000u) {}
  bool passed() const noexcept { return monotonic_ns() >= end_ns_; }

 private:
  uint64_t end_ns_;
};

}  // namespace ferrum_replay::common
