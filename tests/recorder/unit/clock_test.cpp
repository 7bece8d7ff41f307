// The recorder's tick clock (recorder/clock.hpp): the tick-to-nanosecond line, and, where the
// kernel keeps CLOCK_MONOTONIC on the CPU's counter, that converted ticks agree with the monotonic
// clock — on one core, and on another core after the thread has been moved there.
#include <doctest/doctest.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "clock.hpp"
#include "settings.hpp"

using namespace ferrum_replay::recorder;

TEST_CASE("tick scale: identity by default, a straight line otherwise") {
  const TickScale id;
  CHECK(id.identity());
  CHECK(id.to_ns(123456789) == 123456789);
  CHECK(id.span_ns(10, 25) == 15);
  CHECK(id.span_ns(25, 10) == 0);

  TickScale s;  // 3 ticks per ns, tick 3000 is 1,000,000 ns
  s.ticks0 = 3000;
  s.ns0 = 1000000;
  s.dticks = 3000000;
  s.dns = 1000000;
  CHECK(s.to_ns(3000) == 1000000);
  CHECK(s.to_ns(6000) == 1001000);
  CHECK(s.to_ns(0) == 999000);  // before the first pair: extrapolated backwards
  CHECK(s.span_ns(3000, 3003) == 1);
  // Hours of a 4 GHz counter do not overflow.
  s.dticks = 4;
  s.dns = 1;
  const uint64_t ten_hours = 4ull * 1000000000ull * 3600 * 10;
  CHECK(s.to_ns(3000 + ten_hours) == 1000000 + 36000000000000ull);
  CHECK(s.span_ns(0, ten_hours) == 36000000000000ull);
}

TEST_CASE("tick scale: the 64-bit shortcut gives the 128-bit line's value at every edge") {
  // to_ns computes in 64 bits where nothing overflows (the exit report converts every event):
  // the result must be the one the 128-bit formula gives, on both sides of each overflow edge.
  const auto reference = [](const TickScale &s, uint64_t ticks) {
    const __int128 delta = static_cast<__int128>(ticks) - static_cast<__int128>(s.ticks0);
    const __int128 ns = static_cast<__int128>(s.ns0) + delta * s.dns / s.dticks;
    return ns < 0 ? uint64_t{0} : static_cast<uint64_t>(ns);
  };
  const uint64_t max = UINT64_MAX;
  for (const auto &[ticks0, ns0, dticks, dns] :
       std::vector<std::array<uint64_t, 4>>{{0, 0, 1, 1},
                                            {3000, 1000000, 3000000, 1000000},
                                            {5, 7, 3, 7},
                                            {1000, max - 100, 1, 1},
                                            {max / 2, 1, 2999, 1000},
                                            {0, 0, 1, uint64_t{1} << 40},
                                            {0, 0, max, 3}}) {
    TickScale s;
    s.ticks0 = ticks0;
    s.ns0 = ns0;
    s.dticks = dticks;
    s.dns = dns;
    std::vector<uint64_t> ticks{0, 1, max, max - 1, ticks0, ticks0 - 1, ticks0 + 1};
    const uint64_t product_edge = ticks0 + max / dns;  // delta * dns just fits in 64 bits
    const uint64_t sum_edge = ticks0 + (max - ns0) / dns * dticks;  // about where ns0 + ... wraps
    for (uint64_t edge : {product_edge, sum_edge})
      for (uint64_t d = 0; d < 4; ++d) ticks.insert(ticks.end(), {edge - d, edge + d});
    for (uint64_t t : ticks) {
      CAPTURE(ticks0);
      CAPTURE(dns);
      CAPTURE(t);
      CHECK(s.to_ns(t) == reference(s, t));
    }
  }
}

TEST_CASE("tick scale: a range nested in another ends within it in nanoseconds too") {
  // 3 ticks per ns. Scaled on their own, the span 2..4 (0 ns from 0 ns) and the span 3..4 inside
  // it (0 ns from 1 ns) would put the inner range's end 1 ns past the outer one's: the trace's
  // nesting check caught that with the CPU's counter as the clock.
  TickScale s;
  s.dticks = 3;
  s.dns = 1;
  const auto end_ns = [&](uint64_t from, uint64_t to) {
    return s.to_ns(from) + s.span_ns(from, to);
  };
  CHECK(end_ns(3, 4) <= end_ns(2, 4));
  for (uint64_t from = 0; from < 30; ++from)
    for (uint64_t to = from; to < 30; ++to) CHECK(end_ns(from, to) == s.to_ns(to));
}

TEST_CASE("FERRUM_RECORD_CLOCK=monotonic reads CLOCK_MONOTONIC itself") {
  const TickClock clock(false);
  CHECK_FALSE(clock.uses_cpu_counter());
  CHECK(std::string(clock.source_name()) == "monotonic");
  CHECK(clock.scale().identity());
  const uint64_t before = monotonic_ns();
  const uint64_t t = clock.now();
  CHECK(t >= before);
  CHECK(t <= monotonic_ns());
}

namespace {
bool move_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0 && sched_getcpu() == cpu;
}

// A tick read between two monotonic reads converts to a time between them, give or take the
// pairing error of the scale (a few hundred ns on a quiet machine; 5 us allows for a loaded one).
void check_bracketed(const TickClock &clock, std::vector<uint64_t> *ticks,
                     std::vector<std::pair<uint64_t, uint64_t>> *brackets) {
  const uint64_t before = monotonic_ns();
  ticks->push_back(clock.now());
  brackets->push_back({before, monotonic_ns()});
}
}  // namespace

TEST_CASE("the CPU's counter agrees with CLOCK_MONOTONIC, also after a migration") {
  const TickClock clock(true);
  if (!clock.uses_cpu_counter()) {
    MESSAGE("this kernel does not keep CLOCK_MONOTONIC on the CPU's counter: nothing to compare");
    CHECK(std::string(clock.source_name()) == "monotonic");
    return;
  }
  cpu_set_t original;
  REQUIRE(sched_getaffinity(0, sizeof original, &original) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 4; ++c)
    if (CPU_ISSET(c, &original)) cpus.push_back(c);

  std::vector<uint64_t> ticks;
  std::vector<std::pair<uint64_t, uint64_t>> brackets;
  // Alternate between cores for a while (the scale is better the longer the interval).
  for (int round = 0; round < 40; ++round) {
    const int cpu = cpus[round % cpus.size()];
    if (cpus.size() > 1) CHECK(move_to_cpu(cpu));
    check_bracketed(clock, &ticks, &brackets);
    const timespec pause{0, 2 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  sched_setaffinity(0, sizeof original, &original);
  if (cpus.size() < 2) MESSAGE("one CPU only: the migration part was not exercised");

  const TickScale scale = clock.scale();
  uint64_t previous = 0;
  for (size_t i = 0; i < ticks.size(); ++i) {
    const uint64_t ns = scale.to_ns(ticks[i]);
    INFO("read " << i << " on cpu " << cpus[i % cpus.size()]);
    CHECK(ns + 5000 >= brackets[i].first);
    CHECK(ns <= brackets[i].second + 5000);
    CHECK(ticks[i] >= previous);  // never backwards across cores
    previous = ticks[i];
  }
  // 80 ms of sleeps: the converted span agrees with the monotonic one to within 10 us.
  const uint64_t span = scale.span_ns(ticks.front(), ticks.back());
  const uint64_t mono = brackets.back().first - brackets.front().second;
  CHECK(span + 10000 >= mono);
  CHECK(span <= brackets.back().second - brackets.front().first + 10000);
}

TEST_CASE("FERRUM_RECORD_CLOCK values") {
  std::map<std::string, std::string> env;
  auto lookup = [](const char *name, void *context) -> const char * {
    auto &e = *static_cast<std::map<std::string, std::string> *>(context);
    auto it = e.find(name);
    return it == e.end() ? nullptr : it->second.c_str();
  };
  std::vector<std::string> w;
  CHECK(parse_settings(lookup, &env, &w).cpu_counter);
  env["FERRUM_RECORD_CLOCK"] = "monotonic";
  CHECK_FALSE(parse_settings(lookup, &env, &w).cpu_counter);
  env["FERRUM_RECORD_CLOCK"] = "AUTO";
  CHECK(parse_settings(lookup, &env, &w).cpu_counter);
  CHECK(w.empty());
  env["FERRUM_RECORD_CLOCK"] = "rdtsc\x1b[2J";
  CHECK(parse_settings(lookup, &env, &w).cpu_counter);
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("FERRUM_RECORD_CLOCK='rdtsc") != std::string::npos);
  CHECK(w[0].find('\x1b') == std::string::npos);
  CHECK(w[0].back() == '\n');
}
