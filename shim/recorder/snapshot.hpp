// A consistent-enough copy of everything the recorder knows, taken once at exit. The writer and
// the table work on this copy only, so they are pure functions that unit tests can feed directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "event.hpp"

namespace ferrum_replay::recorder {

struct ProtocolErrors {
  uint64_t pop_without_push = 0;  // pop with no open range on this thread at all
  uint64_t pop_wrong_domain = 0;  // pop on an empty domain while another domain has one open
  uint64_t open_at_exit = 0;      // frames still open when the report was taken, all threads
  bool none() const { return pop_without_push == 0 && pop_wrong_domain == 0 && open_at_exit == 0; }
};

struct ThreadSnapshot {
  uint32_t tid = 0;
  std::string name;
  std::vector<Event> events;  // sorted by start, longer first on ties (so parents precede children)
  uint32_t open_frames = 0;
};

struct Snapshot {
  long pid = 0;
  std::string process_name;
  uint64_t origin_ns = 0;                 // ts 0 in the trace (CLOCK_MONOTONIC)
  uint64_t origin_realtime_ns = 0;        // the same instant in CLOCK_REALTIME; 0 if unknown
  std::string host;                       // host name, filled in by the exit report
  std::string rank_variable, rank_value;  // the job rank (settings.hpp), if any
  std::vector<std::string> domain_names;  // display names by domain id ([0] = "global")
  std::vector<ThreadSnapshot> threads;
  uint64_t rejected_pushes = 0;
  ProtocolErrors errors;

  uint64_t range_count() const;
  // Display names of domains that were created or hold at least one range, sorted.
  std::vector<std::string> used_domains() const;
};

// Sorts one thread's events into trace order.
void sort_events(std::vector<Event> &events);

}  // namespace ferrum_replay::recorder
