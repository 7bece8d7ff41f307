#include "snapshot.hpp"

#include <algorithm>
#include <map>

namespace ferrum_replay::recorder {

uint64_t ThreadSnapshot::event_count() const {
  uint64_t n = events.size();
  for (const SpillRun &run : runs) n += run.count;
  return n;
}

uint64_t ThreadSnapshot::range_count() const {
  uint64_t n = 0;
  for (const Event &e : events) n += e.is_range();
  for (const SpillRun &run : runs) n += run.ranges;
  return n;
}

uint64_t Snapshot::range_count() const {
  uint64_t n = 0;
  for (const ThreadSnapshot &t : threads) n += t.range_count();
  return n;
}

uint64_t Snapshot::event_count() const {
  uint64_t n = 0;
  for (const ThreadSnapshot &t : threads) n += t.event_count();
  return n;
}

const std::string *Snapshot::category_name(uint32_t domain_id, uint32_t category) const {
  if (category_names.empty()) return nullptr;
  const auto it = category_names.find({domain_id, category});
  return it == category_names.end() ? nullptr : &it->second;
}

void match_async_ranges(Snapshot &snap, uint64_t ids_issued, size_t room) {
  snap.async_ranges.clear();
  snap.async_events = snap.async_started = snap.async_beyond_room = 0;
  if (ids_issued <= 1) return;
  std::unordered_map<uint64_t, AsyncRange> &table = snap.async_ranges;
  uint64_t unknown = 0, beyond_room = 0;
  for (const ThreadSnapshot &t : snap.threads) {
    for_each_event(snap, t, [&](const Event &e) {
      if (!e.is_async()) return;
      ++snap.async_events;
      const uint64_t id = e.async_id();
      if (id == 0 || id >= ids_issued) {
        unknown += e.kind() == EventKind::async_end;
        return;
      }
      auto it = table.find(id);
      if (it == table.end()) {
        if (table.size() >= room) {
          ++beyond_room;  // neither half of this range is written
          return;
        }
        it = table.emplace(id, AsyncRange{}).first;
      }
      AsyncRange &r = it->second;
      if (e.kind() == EventKind::async_begin) {
        r.begun = true;
        r.name = e.attrs.name;
        r.domain_id = e.domain_id;
      } else if (r.ends != UINT16_MAX) {
        ++r.ends;
      } else {
        ++unknown;
      }
    });
  }
  for (const auto &[id, r] : table) {
    snap.async_started += r.begun;
    if (r.begun && r.ends == 0) ++snap.errors.start_open_at_exit;
    // An end without its begin (the begin was lost: recorded in a parent before fork, or by a
    // thread whose events were given up) or a second end of one range.
    if (r.ends > 0) unknown += r.begun ? r.ends - 1u : r.ends;
  }
  snap.errors.end_unknown_id += unknown;
  snap.async_beyond_room += beyond_room;
}

uint64_t Snapshot::gpu_replay_count() const {
  uint64_t n = 0;
  for (const ThreadSnapshot &t : gpu_tracks) n += t.event_count();
  return n;
}

std::vector<std::string> Snapshot::used_domains() const {
  std::vector<bool> used(domain_names.size(), false);
  // Every domain the program created is listed (ids >= 1; not the shim's, made in advance,
  // while the program has not asked for it); the implicit global domain only when used.
  for (size_t id = 1; id < used.size(); ++id) used[id] = id != unasked_domain;
  for (const ThreadSnapshot &t : threads) {
    for (const Event &e : t.events)
      if (e.domain_id < used.size()) used[e.domain_id] = true;
    for (const SpillRun &run : t.runs)
      if (run.uses_global_domain && !used.empty()) used[0] = true;
  }
  std::vector<std::string> out;
  for (size_t id = 0; id < used.size(); ++id)
    if (used[id]) out.push_back(domain_names[id]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void sort_events(Event *begin, Event *end) {
  // Ranges that do not nest (graph replays, mostly) arrive already in order: checking costs
  // one comparison per event, sorting them anyway about ten (the recorder's per-range cost).
  if (!std::is_sorted(begin, end, event_before)) std::sort(begin, end, event_before);
}

void sort_events(std::vector<Event> &events) {
  sort_events(events.data(), events.data() + events.size());
}

std::vector<std::vector<uint32_t>> chain_runs(const std::vector<SpillRun> &runs) {
  struct Before {
    bool operator()(const OrderKey &a, const OrderKey &b) const { return trace_order_before(a, b); }
  };
  std::vector<std::vector<uint32_t>> chains;
  std::vector<uint32_t> order;
  order.reserve(runs.size());
  for (uint32_t i = 0; i < runs.size(); ++i) {
    if (runs[i].count == 0) continue;
    if (runs[i].keyed)
      order.push_back(i);
    else
      chains.push_back({i});  // where its events stand is not known: a chain of its own
  }
  // Runs by their first events (interval partitioning: the fewest chains), equal ones by index.
  std::stable_sort(order.begin(), order.end(), [&runs](uint32_t a, uint32_t b) {
    return trace_order_before(runs[a].first, runs[b].first);
  });
  std::multimap<OrderKey, size_t, Before> tails;  // each chain's last event -> the chain
  for (const uint32_t i : order) {
    // The chain whose last event comes latest while still strictly before this run's first.
    auto it = tails.lower_bound(runs[i].first);
    size_t chain;
    if (it != tails.begin()) {
      chain = (--it)->second;
      tails.erase(it);
    } else {
      chain = chains.size();
      chains.emplace_back();
    }
    chains[chain].push_back(i);
    tails.emplace(runs[i].last, chain);
  }
  return chains;
}

MergedEvents::MergedEvents(const Snapshot &snap, const ThreadSnapshot &thread)
    : spill_(snap.spill), runs_(thread.runs), memory_(thread.events) {
  if (spill_)
    for (std::vector<uint32_t> &runs : chain_runs(runs_)) {
      chains_.emplace_back();
      chains_.back().runs = std::move(runs);
    }
  for (size_t source = 0; source <= chains_.size(); ++source)
    if (head(source)) heap_.push_back(source);
  // std heaps put the largest first: "larger" here means later in trace order.
  std::make_heap(heap_.begin(), heap_.end(),
                 [this](size_t a, size_t b) { return source_before(b, a); });
}

const Event *MergedEvents::head(size_t source) {
  if (source == 0) return memory_pos_ < memory_.size() ? &memory_[memory_pos_] : nullptr;
  Chain &chain = chains_[source - 1];
  if (!chain.reader) chain.reader.emplace(*spill_, runs_[chain.runs[chain.at]]);
  const Event *e = chain.reader->peek();
  while (!e && chain.at + 1 < chain.runs.size()) {
    chain.reader.emplace(*spill_, runs_[chain.runs[++chain.at]]);
    e = chain.reader->peek();
  }
  return e;
}

bool MergedEvents::source_before(size_t a, size_t b) {
  const Event *x = head(a);
  const Event *y = head(b);
  if (event_before(*x, *y)) return true;
  if (event_before(*y, *x)) return false;
  return rank(a) < rank(b);
}

const Event *MergedEvents::next() {
  const auto later = [this](size_t a, size_t b) { return source_before(b, a); };
  if (current_ != SIZE_MAX) {
    if (current_ == 0)
      ++memory_pos_;
    else
      chains_[current_ - 1].reader->advance();
    if (head(current_)) {
      // Runs seldom overlap in time (a thread's chunks end one after another): while the same
      // source still comes first, its next event is returned without a trip through the heap.
      if (heap_.empty() || source_before(current_, heap_.front())) return head(current_);
      heap_.push_back(current_);
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
    current_ = SIZE_MAX;
  }
  if (heap_.empty()) return nullptr;
  std::pop_heap(heap_.begin(), heap_.end(), later);
  current_ = heap_.back();
  heap_.pop_back();
  return head(current_);
}

GpuReplays::GpuReplays(const Snapshot &snap, const ThreadSnapshot &track)
    : merged_(snap, track), slack_ns_(2 * snap.gpu.align_error_ns) {}

const Event *GpuReplays::next() {
  const Event *e = merged_.next();
  if (!e) return nullptr;
  shown_ = *e;
  // Moved whole, start and end: its length is what the shim measured, and what the table and
  // the judges read (a start moved alone cut it, to 0 where two starts came equal: F138).
  if (shown_.start < previous_end_ && previous_end_ - shown_.start <= slack_ns_) {
    const uint64_t by = previous_end_ - shown_.start;
    shown_.start += by;
    shown_.end += by;
  }
  if (shown_.end > previous_end_) previous_end_ = shown_.end;
  return &shown_;
}

namespace {

// Merges `count` runs into one new run of `spill`. False (and `out` unusable) if the spill file
// cannot be written or a run became unreadable.
bool merge_runs(SpillFile &spill, const SpillRun *first, size_t count, SpillRun *out) {
  // Merged through a throwaway snapshot that holds only them.
  Snapshot part;
  part.spill = &spill;
  ThreadSnapshot group;
  group.runs.assign(first, first + count);
  const uint64_t events = group.event_count();
  if (events > UINT32_MAX || !spill.reserve(events, out)) return false;
  MergedEvents merged(part, group);
  constexpr uint32_t kBatch = 1024;
  std::vector<Event> batch;
  batch.reserve(kBatch);
  uint32_t written = 0;
  for (const Event *e = merged.next();; e = merged.next()) {
    if (e) {
      if (batch.empty() && written == 0) {
        out->first = OrderKey::of(*e);
        out->keyed = true;
      }
      out->last = OrderKey::of(*e);
      batch.push_back(*e);
      out->uses_global_domain |= e->domain_id == 0;
      out->ranges += e->is_range();
    }
    if (batch.size() == kBatch || (!e && !batch.empty())) {
      if (!spill.write(*out, written, batch.data(), static_cast<uint32_t>(batch.size())))
        return false;
      written += static_cast<uint32_t>(batch.size());
      batch.clear();
    }
    if (!e) break;
  }
  return written == out->count;  // a run became unreadable: keep the originals
}

}  // namespace

void compact_runs(SpillFile &spill, std::vector<SpillRun> &runs, size_t max_runs) {
  if (max_runs < 2) max_runs = 2;
  if (chain_runs(runs).size() <= max_runs) return;  // read as they are: nothing to copy
  while (runs.size() > max_runs) {
    // Groups of up to max_runs consecutive runs, each merged into one, until the runs left as
    // they are bring the count within max_runs: only as many events are copied as that takes.
    std::vector<SpillRun> merged_runs;
    size_t first = 0;
    while (first < runs.size()) {
      const size_t left = runs.size() - first;
      const size_t count = merged_runs.size() + left;  // if the rest stayed as it is
      if (count <= max_runs) {
        merged_runs.insert(merged_runs.end(), runs.begin() + static_cast<ptrdiff_t>(first),
                           runs.end());
        break;
      }
      const size_t group = std::min({max_runs, left, count - max_runs + 1});
      if (group == 1) {
        merged_runs.push_back(runs[first++]);
        continue;
      }
      SpillRun out;
      if (!merge_runs(spill, runs.data() + first, group, &out)) return;
      merged_runs.push_back(out);
      first += group;
    }
    runs.swap(merged_runs);
  }
}

}  // namespace ferrum_replay::recorder
