#include "snapshot.hpp"

#include <algorithm>

namespace ferrum_replay::recorder {

uint64_t Snapshot::range_count() const {
  uint64_t n = 0;
  for (const ThreadSnapshot &t : threads) n += t.events.size();
  return n;
}

std::vector<std::string> Snapshot::used_domains() const {
  std::vector<bool> used(domain_names.size(), false);
  // Every created domain is listed (ids >= 1); the implicit global domain only when used.
  for (size_t id = 1; id < used.size(); ++id) used[id] = true;
  for (const ThreadSnapshot &t : threads)
    for (const Event &e : t.events)
      if (e.domain_id < used.size()) used[e.domain_id] = true;
  std::vector<std::string> out;
  for (size_t id = 0; id < used.size(); ++id)
    if (used[id]) out.push_back(domain_names[id]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void sort_events(std::vector<Event> &events) {
  // Events are stored in the order ranges *ended*; viewers want start order with an enclosing
  // range before the ranges it contains, which "earlier start, then later end" guarantees. Equal
  // intervals (possible at clock resolution) keep the outer range first by depth.
  std::sort(events.begin(), events.end(), [](const Event &a, const Event &b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
    if (a.domain_id != b.domain_id) return a.domain_id < b.domain_id;
    return a.depth < b.depth;
  });
}

}  // namespace ferrum_replay::recorder
