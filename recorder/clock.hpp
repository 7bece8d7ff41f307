// Timestamps for ranges. CLOCK_MONOTONIC is what Nsight Systems and most tracers use on Linux, is
// served from the vDSO (no system call on the hot path), and never jumps backwards with NTP.
#pragma once

#include <cstdint>
#include <ctime>

namespace ferrum_replay::recorder {

inline uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Wall-clock time, read once at the recorder's start so that traces of several processes (or
// hosts) can be put on one time line (scripts/ferrum-replay merge).
inline uint64_t realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace ferrum_replay::recorder
