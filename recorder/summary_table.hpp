// The human summary printed on stderr at exit: one row per (domain, range name), so that a user
// sees at a glance which graphs ran, how often and for how long, without opening the trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot.hpp"

namespace ferrum_replay::recorder {

// Durations for p50/p99 in bounded memory: log buckets, 16 per power of two (exact below 32 ns).
// A percentile is the middle of the bucket that holds the nearest-rank sample, clamped to
// [min, max]: within 3.2% of the exact value. Stored sparsely (the buckets in use, a few per
// graph), so memory grows with the spread of a name's durations, never with its count.
// scripts/ferrum_replay_traces.py (DurationHistogram) computes exactly the same buckets.
class DurationHistogram {
 public:
  void add(uint64_t ns, uint64_t n = 1);
  void merge(const DurationHistogram &other);
  // The nearest-rank `percent` percentile (0 < percent <= 100), clamped to [low, high].
  uint64_t percentile(double percent, uint64_t low, uint64_t high) const;
  size_t buckets() const { return counts_.size(); }

  static uint32_t bucket_of(uint64_t ns);
  static uint64_t bucket_middle(uint32_t bucket);

 private:
  std::vector<std::pair<uint32_t, uint64_t>> counts_;  // by bucket, sorted
};

// count, total, min, max and the histogram of one set of durations (ns).
struct DurationStats {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
  DurationHistogram histogram;

  void add(uint64_t ns);
  void merge(const DurationStats &other);
  uint64_t p50() const { return histogram.percentile(50, min_ns, max_ns); }
  uint64_t p99() const { return histogram.percentile(99, min_ns, max_ns); }
};

struct RangeStats : DurationStats {  // the CPU ranges' launch time
  std::string domain;
  std::string name;
  DurationStats gpu;  // the GPU time of the same graph's replays (GPU tracks), if any
};

// The CPU ranges of the names aggregate() keeps no row for.
struct OtherNames {
  uint64_t ranges = 0;
  uint64_t total_ns = 0;
};

// One entry per (domain display name, range name), sorted by domain then name. GPU replays
// (Snapshot::gpu_tracks) go to the row (snap.gpu_domain, name) of the CPU ranges they time.
// At most kMaxAggregatedRows rows, so that the exit report's memory is bounded whatever the
// names (it was about 1.2 KB per distinct name: 240 MB at exit for 200,000 names). Beyond that
// many distinct names, the rows go to the names of most total time (certainly to every name
// with more than 1/kMaxAggregatedRows of all ranges' time), their statistics exact, and
// `other` (if not null) counts the ranges of the rest.
inline constexpr size_t kMaxAggregatedRows = 4096;
std::vector<RangeStats> aggregate(const Snapshot &snap, OtherNames *other = nullptr);

// The whole stderr text, every line ending in '\n':
//   ferrum-replay recorder: N ranges on T threads of PROCESS (pid P), trace: PATH
//                                  (or ", trace not written"; "of ..." only when the name is known)
//   domain  range  count  total ms  mean us  min us  p50 us  p99 us  max us   (if there are rows)
//     ... followed, when any row has GPU time, by the same columns for the GPU, each header
//     prefixed "gpu " (gpu count, gpu total ms, ... gpu max us; "-" where a row has none)
//   ...one row per RangeStats...
//   ... and R more range names (N ranges, total X ms); the trace has every range
//   (or, with ranges of names without a row: "... and R more range names and others beyond
//   the 4096 counted (N ranges, ...)"; then also without more than max_rows rows)
//   gpu: N replays timed, M in flight at exit, K not timed, alignment error <= E us
//                                              (only when the shim took the recorder's GPU sink)
//   also in the trace: M marks, S start/end ranges           (only when there are some)
//   protocol errors: none | 2 pop without push, 1 popped in wrong domain, 3 open at exit,
//                    1 end of an unknown start/end range, 1 start/end range open at exit
//                    (none in the shim's domain ferrum-replay | 2 of them in ...)
//   rejected pushes: N                                           (only if N > 0)
// N on the first line is the sum of the rows' counts. With more than `max_rows` rows (0: no
// limit) only the `max_rows` busiest by total time are listed, busiest first, and the "... and"
// line sums up the others. `trace_path` empty means the trace could not be written.
inline constexpr size_t kSummaryRows = 50;
// `other`: ranges of names without a row (aggregate()), counted in the first line and the
// "... and" line, which then says that more names were not counted.
std::string format_summary(const Snapshot &snap, const std::vector<RangeStats> &rows,
                           const std::string &trace_path, size_t max_rows = kSummaryRows,
                           const OtherNames &other = {});

}  // namespace ferrum_replay::recorder
