// One executable graph's record and its label: what a launch reads (the first cache line of a
// record) and what the registry keeps about the graph. The registry (graph_registry.hpp) owns
// them; replay numbers (replay_numbers.hpp) count in them.
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace ferrum_replay::shim {

inline constexpr size_t kMaxMessageLength = 159;
inline constexpr size_t kMaxNameLength = 127;
inline constexpr size_t kMaxSiteLength = 127;
inline constexpr size_t kMaxContentLength = 127;

// What a launch pushes: immutable once published.
struct GraphLabel {
  nvtxStringHandle_t message = nullptr;  // registered; null when no NVTX tool answers
  GraphLabel *next_free = nullptr;       // the pool's free list (registry mutex)
  uint32_t color = 0;                    // ARGB, stable per name
  // Non-zero: the text shows a person's whole name and may be shared with graphs showing the
  // same (the registry's shared message count, keyed by text and name).
  uint64_t shared_key = 0;
  // Timed replays in flight that name this label (GPU timing reads `text` when the GPU has
  // finished one): the registry reuses the label only once it is 0 (release_label).
  mutable std::atomic<uint32_t> replays_in_flight{0};
  char text[kMaxMessageLength + 1] = {};
};

// Raised (under the registry's mutex) each time a graph stops living, as its live_ordinal goes
// to 0: GPU timing looks for rows of graphs no longer live only once it has changed, not at
// every replay of a graph without a row (gpu_engine.cpp: Engine::stats_slot).
inline constinit std::atomic<uint64_t> g_graphs_retired{0};

// The first cache line holds all a launch touches — the label's message and colour are
// copied here, so a launch reads the slot and this line and not the label (with 10,000 live
// graphs each line is a cache miss). The label is read only when no message was registered.
struct alignas(64) GraphRecord {
  uint32_t ordinal = 0;            // 1, 2, 3... in registration order; 0 for the overflow record
  std::atomic<uint32_t> color{0};  // of the current label
  std::atomic<nvtxStringHandle_t> message{nullptr};  // of the current label
  std::atomic<const GraphLabel *> label{nullptr};
  std::atomic<uintptr_t> handle{0};       // the exec handle this record was registered for
  std::atomic<bool> site_pending{false};  // FERRUM_REPLAY_SITE=launch: named at first launch
  // The one thread that launches this graph (its replay_numbers.hpp token), 0 before the first
  // launch, or kSharedGraph once a second thread launched it.
  std::atomic<uint32_t> launcher{0};
  // Replay numbers handed out to threads, a block at a time (replay_numbers.hpp): not the
  // number of launches — replay_count() is.
  std::atomic<uint64_t> numbers_taken{0};
  // Holds the ordinal while the graph lives (registered, neither destroyed nor replaced by its
  // handle's next graph nor forgotten), 0 otherwise (g_graphs_retired above): GPU timing reads
  // it, lock-free, to give a row of statistics that is no longer a live graph's to a new graph
  // (gpu::GraphStats::live); in this line, as a timed launch hands it over. A word of the
  // registry's, outside the record and made once for good (GraphRegistry::live_word_of): the
  // pool constructs a record anew when it reuses it, while a row may still read the word of the
  // graph it was — a word inside the record was rewritten by that constructor, racing with the
  // reads (review VV-3, WW-3). Null: none could be had (no memory); the graph counts as live.
  std::atomic<std::atomic<uint32_t> *> live_ordinal{nullptr};
  std::atomic<uint64_t> rejected_pushes{0};
  // Handed out, then given back unused by a thread (replay_numbers.hpp); the ordinal the
  // record has now, readable by a thread that is not sure the record is still that graph's.
  std::atomic<uint64_t> numbers_returned{0};
  // Launches whose push the NVTX tool answered FERRUM_REPLAY_PUSH_AFTER_REPORT: made after it
  // took its report (a thread still launching at exit). Off the launch's cache line: rare.
  std::atomic<uint64_t> after_tool_report{0};
  std::atomic<uint64_t> failed_launches{0};  // off the first line: only a failed launch adds
  std::atomic<uint32_t> generation{0};
  // Below: written under the registry mutex only; never read on the launch path.
  const char *api = "";              // the function that instantiated it, or "launch"
  GraphRecord *next_free = nullptr;  // the pool's free list
  bool in_use = false;               // allocated (live or retired-in-quarantine), not free
  bool user_named = false;
  bool user_name_whole = false;  // the program's name fit and was printable as given
  bool live = true;              // false once destroyed
  bool confirmed = false;        // its instantiation was seen: its destroy will be too
  GraphRecord *older = nullptr;  // the unconfirmed list, oldest first (unconfirmed only)
  GraphRecord *newer = nullptr;
  uint64_t launches_seen = 0;          // replay_count() when the unconfirmed list last looked
  char name[kMaxNameLength + 1] = {};  // the {name} field
  char site[kMaxSiteLength + 1] = {};
  char content[kMaxContentLength + 1] = {};
  // Nine cache lines, not eight. Records lie side by side in the registry's pool, and at a
  // 512-byte stride every record's first line (the one a launch reads) fell in the same eighth
  // of a physically indexed cache's sets: with 10,000 graphs launched in turn those lines no
  // longer stayed in the core's L2. At 576 bytes they spread over all its sets (measured,
  // docs/performance.md: 10,000 graphs against one, 1.35x -> 1.13x on an Intel VM).
  char spread_sets[48] = {};  // what the fields above leave of the ninth line
};
static_assert(offsetof(GraphRecord, rejected_pushes) + sizeof(uint64_t) <= 64,
              "what a launch touches fits in the record's first cache line");
static_assert(sizeof(GraphRecord) == 9 * 64, "an odd number of cache lines (see spread_sets)");

}  // namespace ferrum_replay::shim
