// Replay numbers (shim/range/replay_numbers.hpp): a graph one thread launches counts in its
// record; a graph several threads launch is taken a block at a time into per-thread caches.
// Either way every launch gets a number no other launch of its graph got, one thread's are
// consecutive, and the count of launches stays exact through blocks, evictions, thread exits
// and churn.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "range/graph_record.hpp"
#include "range/replay_numbers.hpp"

using ferrum_replay::shim::GraphRecord;
using ferrum_replay::shim::replay_count;
using ferrum_replay::shim::take_replay_number;

namespace {

// A record as the registry makes one: a new ordinal (far from the registry tests' own),
// mirrored in its generation. Kept until the process exits, as the registry keeps its records
// (never unmapped): a thread's cache may still name it after the test that made it.
GraphRecord *make_record(uint32_t ordinal) {
  static std::vector<std::unique_ptr<GraphRecord>> kept;
  auto record = std::make_unique<GraphRecord>();
  record->ordinal = 1000000 + ordinal;
  record->generation.store(record->ordinal);
  kept.push_back(std::move(record));
  return kept.back().get();
}

// Another thread launches `record` once (it becomes that thread's graph), so that the calling
// thread's next launch makes it shared.
void launch_elsewhere(GraphRecord &record) {
  std::thread([&] { take_replay_number(record); }).join();
}

}  // namespace

TEST_CASE("one thread's graph counts 1, 2, 3... in its record; a second thread makes it shared") {
  auto record = make_record(1);
  for (uint64_t n = 1; n <= 1000; ++n) {
    REQUIRE(take_replay_number(*record) == n);
    REQUIRE(replay_count(*record) == n);
  }
  CHECK(record->launcher.load() == ferrum_replay::shim::t_launcher);
  CHECK(record->numbers_taken.load() == 1000);  // no block: nothing held anywhere
  launch_elsewhere(*record);
  CHECK(record->launcher.load() == ferrum_replay::shim::kSharedGraph);
  CHECK(replay_count(*record) == 1001);
  // Shared: this thread's numbers now come a block at a time, still consecutive and counted.
  for (uint64_t n = 1002; n <= 3000; ++n) {
    REQUIRE(take_replay_number(*record) == n);
    REQUIRE(replay_count(*record) == n);
  }
  CHECK(record->numbers_taken.load() > 3000);  // a block is held
}

TEST_CASE("a thread alternating between more graphs than its cache holds counts each exactly") {
  std::vector<GraphRecord *> records;
  for (uint32_t i = 0; i < 9; ++i) records.push_back(make_record(100 + i));
  for (auto &record : records) launch_elsewhere(*record);  // shared: numbers 1 were taken
  std::vector<uint64_t> expected(records.size(), 1);
  for (int round = 0; round < 200; ++round) {
    for (size_t i = 0; i < records.size(); ++i) {
      // Graph i is launched i + 1 times in a row, so blocks grow and are evicted part-used.
      for (size_t k = 0; k <= i; ++k) CHECK(take_replay_number(*records[i]) == ++expected[i]);
    }
  }
  for (size_t i = 0; i < records.size(); ++i) CHECK(replay_count(*records[i]) == expected[i]);
}

TEST_CASE("threads launching one graph at once get unique numbers and an exact count") {
  auto record = make_record(200);
  constexpr int kThreads = 8, kLaunches = 20000;
  std::vector<std::vector<uint64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      seen[t].reserve(kLaunches);
      for (int i = 0; i < kLaunches; ++i) seen[t].push_back(take_replay_number(*record));
      // Counted while the other threads still hold blocks: never more than were launched.
      CHECK(replay_count(*record) <= uint64_t{kThreads} * kLaunches);
    });
  for (std::thread &t : threads) t.join();
  std::set<uint64_t> all;
  for (const std::vector<uint64_t> &numbers : seen) {
    CHECK(std::is_sorted(numbers.begin(), numbers.end()));  // a thread's numbers only grow
    all.insert(numbers.begin(), numbers.end());
  }
  CHECK(all.size() == size_t{kThreads} * kLaunches);  // no number handed out twice
  CHECK(*all.begin() >= 1);
  // The exited threads gave back what their blocks still held.
  CHECK(replay_count(*record) == uint64_t{kThreads} * kLaunches);
}

TEST_CASE("threads coming and going never exhaust the caches, and every launch is counted") {
  auto record = make_record(300);
  launch_elsewhere(*record);
  launch_elsewhere(*record);  // shared
  CHECK(record->launcher.load() == ferrum_replay::shim::kSharedGraph);
  constexpr int kGenerations = 3 * ferrum_replay::shim::kMaxCaches;
  int with_cache = 0;
  for (int g = 0; g < kGenerations; ++g) {
    std::thread([&] {
      for (int i = 0; i < 5; ++i) take_replay_number(*record);
      with_cache += ferrum_replay::shim::t_replays != nullptr;
    }).join();
  }
  CHECK(with_cache == kGenerations);  // each exiting thread released its cache
  CHECK(replay_count(*record) == uint64_t{kGenerations} * 5 + 2);
}

TEST_CASE("numbers held for a graph whose record was recycled are not given to the new graph") {
  auto record = make_record(400);
  auto other = make_record(401);
  launch_elsewhere(*record);
  launch_elsewhere(*other);
  std::thread([&] {
    for (int i = 0; i < 40; ++i) take_replay_number(*record);  // shared: holds part of a block
    // The graph is destroyed and, long after, its record reused for another graph.
    record->ordinal = 999;  // a new ordinal: the registry's next
    record->generation.store(999);
    record->numbers_taken.store(0);
    record->numbers_returned.store(0);
    record->launcher.store(ferrum_replay::shim::kSharedGraph);  // as if shared again
    for (int i = 0; i < 3; ++i) CHECK(take_replay_number(*record) == uint64_t(i + 1));
    CHECK(replay_count(*record) == 3);
    for (int i = 0; i < 100; ++i) take_replay_number(*other);  // evictions, then thread exit
  }).join();
  CHECK(replay_count(*record) == 3);
  CHECK(replay_count(*other) == 101);
}
