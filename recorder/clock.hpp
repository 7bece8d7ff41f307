// Timestamps for ranges. The trace's time line is CLOCK_MONOTONIC, what Nsight Systems and most
// tracers use on Linux: served from the vDSO and never jumping with NTP. Reading it still costs
// 20-45 ns (the vDSO's sequence lock and counter fencing), and a range needs two reads: a third
// of what recording a graph launch costs (docs/performance.md).
//
// So where the kernel itself keeps CLOCK_MONOTONIC on the CPU's own counter (current clock source
// "tsc" on x86-64, "arch_sys_counter" on aarch64) the hot path reads that counter directly
// (rdtsc, or cntvct_el0) and stores raw ticks. The kernel only selects these sources after
// checking that the counter runs at a constant rate and agrees across cores, which is what makes
// a tick read on one core comparable with one read on another after a migration. Ticks become
// CLOCK_MONOTONIC nanoseconds only when the trace and the table are written: a straight line
// through two (counter, monotonic) pairs, one read when the recorder starts and one when the
// report is taken (TickScale). Everywhere else, and with FERRUM_RECORD_CLOCK=monotonic, ticks are
// monotonic nanoseconds and the scale is the identity.
#pragma once

#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "monotonic_clock.hpp"

namespace ferrum_replay::recorder {

using common::monotonic_ns;  // common/monotonic_clock.hpp

// Wall-clock time, read once at the recorder's start so that traces of several processes (or
// hosts) can be put on one time line (scripts/ferrum-replay merge).
inline uint64_t realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// The CPU's counter, or 0 on an architecture without one we read.
inline uint64_t read_cpu_counter() noexcept {
#if defined(__x86_64__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return 0;
#endif
}

// Whether the kernel keeps CLOCK_MONOTONIC on the counter read_cpu_counter() reads (see above).
// Reads one sysfs line; false when it cannot be read.
bool cpu_counter_backs_monotonic();

// Ticks to CLOCK_MONOTONIC nanoseconds: ns = ns0 + (ticks - ticks0) * dns / dticks.
struct TickScale {
  uint64_t ticks0 = 0, ns0 = 0;
  uint64_t dticks = 1, dns = 1;  // identity by default

  uint64_t to_ns(uint64_t ticks) const noexcept;
  // The duration between two ticks, in nanoseconds: to_ns(to) - to_ns(from) (0 if `to` is before
  // `from`), so that durations and instants round alike.
  uint64_t span_ns(uint64_t from, uint64_t to) const noexcept;
  bool identity() const { return ticks0 == ns0 && dticks == dns; }
};

class TickClock {
 public:
  // `use_cpu_counter`: read the CPU's counter if cpu_counter_backs_monotonic() says it may.
  explicit TickClock(bool use_cpu_counter);

  uint64_t now() const noexcept { return cpu_counter_ ? read_cpu_counter() : monotonic_ns(); }
  bool uses_cpu_counter() const { return cpu_counter_; }
  // "tsc", "cntvct" or "monotonic": recorded in the trace's metadata.
  const char *source_name() const;
  // The scale that turns ticks read so far (and a little later) into monotonic nanoseconds.
  // Reads a second (counter, monotonic) pair; cheap (a few hundred ns).
  TickScale scale() const;

 private:
  bool cpu_counter_;
  uint64_t ticks0_ = 0, ns0_ = 0;
};

}  // namespace ferrum_replay::recorder
