// The human summary printed on stderr at exit: one row per (domain, range name), so that a user
// sees at a glance which graphs ran, how often and for how long, without opening the trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot.hpp"

namespace ferrum_replay::recorder {

struct RangeStats {
  std::string domain;
  std::string name;
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
};

// One entry per (domain display name, range name), sorted by domain then name.
std::vector<RangeStats> aggregate(const Snapshot &snap);

// The whole stderr text, every line ending in '\n':
//   ferrum-replay recorder: N ranges on T threads, trace: PATH   (or ", trace not written")
//   domain  range  count  total ms  mean us  min us  max us      (only if there are rows)
//   ...one row per RangeStats...
//   ... and R more range names (N ranges, total X ms); the trace has every range
//   protocol errors: none | 2 pop without push, 1 popped in wrong domain, 3 open at exit
//   rejected pushes: N                                           (only if N > 0)
// N on the first line is the sum of the rows' counts. With more than `max_rows` rows (0: no
// limit) only the `max_rows` busiest by total time are listed, busiest first, and the "... and"
// line sums up the others. `trace_path` empty means the trace could not be written.
inline constexpr size_t kSummaryRows = 50;
std::string format_summary(const Snapshot &snap, const std::vector<RangeStats> &rows,
                           const std::string &trace_path, size_t max_rows = kSummaryRows);

}  // namespace ferrum_replay::recorder
