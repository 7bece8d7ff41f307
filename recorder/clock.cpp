#include "clock.hpp"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "own_descriptor.hpp"

namespace ferrum_replay::recorder {

bool cpu_counter_backs_monotonic() {
#if defined(__x86_64__)
  const char *expected = "tsc";
#elif defined(__aarch64__)
  const char *expected = "arch_sys_counter";
#else
  return false;
#endif
  static constexpr char kSource[] =
      "/sys/devices/system/clocksource/clocksource0/current_clocksource";
  common::OwnDescriptor source(open(kSource, O_RDONLY | O_CLOEXEC), kSource, /*follow=*/true);
  char line[64] = {};
  const ssize_t n = source.ours() ? pread(source.get(), line, sizeof line - 1, 0) : -1;
  if (source.close() == EBADF) return false;  // not ours: what was read is not the clock's
  if (n <= 0) return false;
  const size_t len = strcspn(line, "\n");
  return len == strlen(expected) && memcmp(line, expected, len) == 0;
}

namespace {

// One (counter, monotonic) pair: the monotonic read bracketed by two counter reads, the tightest
// of a few tries, with the counter taken at the middle of its bracket. An interrupt between the
// reads widens the bracket; the retries make that unlikely to matter.
void read_pair(uint64_t *ticks, uint64_t *ns) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const uint64_t before = read_cpu_counter();
    const uint64_t mono = monotonic_ns();
    const uint64_t after = read_cpu_counter();
    if (after >= before && after - before < best) {
      best = after - before;
      *ticks = before + (after - before) / 2;
      *ns = mono;
    }
  }
  if (best == UINT64_MAX) *ticks = read_cpu_counter(), *ns = monotonic_ns();
}

}  // namespace

uint64_t TickScale::to_ns(uint64_t ticks) const noexcept {
  // The common case in 64 bits (the exit report converts every event's ends): the value below,
  // its conversion to 64 bits included, without a 128-bit division per call.
  uint64_t product;
  if (ticks >= ticks0 && !__builtin_mul_overflow(ticks - ticks0, dns, &product))
    return ns0 + product / dticks;
  // Signed 128-bit arithmetic: ticks may precede ticks0 (a range that began before the pair was
  // read), and hours of ticks times a nanosecond span overflow 64 bits.
  const __int128 delta = static_cast<__int128>(ticks) - static_cast<__int128>(ticks0);
  const __int128 ns = static_cast<__int128>(ns0) + delta * dns / dticks;
  return ns < 0 ? 0 : static_cast<uint64_t>(ns);
}

uint64_t TickScale::span_ns(uint64_t from, uint64_t to) const noexcept {
  if (to <= from) return 0;
  // The distance between the two instants as to_ns places them, not the span scaled on its own:
  // the two round apart, and a range inside another must end inside it in nanoseconds too (a
  // start and a duration each rounded down could put it 1 ns past its parent's end).
  return to_ns(to) - to_ns(from);
}

TickClock::TickClock(bool use_cpu_counter)
    : cpu_counter_(use_cpu_counter && cpu_counter_backs_monotonic()) {
  if (cpu_counter_) read_pair(&ticks0_, &ns0_);
}

const char *TickClock::source_name() const {
  if (!cpu_counter_) return "monotonic";
#if defined(__x86_64__)
  return "tsc";
#else
  return "cntvct";
#endif
}

TickScale TickClock::scale() const {
  TickScale s;
  if (!cpu_counter_) return s;
  uint64_t ticks1 = 0, ns1 = 0;
  read_pair(&ticks1, &ns1);
  s.ticks0 = ticks0_;
  s.ns0 = ns0_;
  if (ticks1 > ticks0_ && ns1 > ns0_) {
    s.dticks = ticks1 - ticks0_;
    s.dns = ns1 - ns0_;
  } else {
    // No time has passed between the two pairs (or a counter went backwards): the offset still
    // holds, the rate cannot be known; one tick per nanosecond is the least wrong guess.
    s.dticks = s.dns = 1;
  }
  return s;
}

}  // namespace ferrum_replay::recorder
