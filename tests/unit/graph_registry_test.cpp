// The graph registry: stable identities in first-seen order, one record per handle even
// when threads see a new handle at the same moment, and a bounded table.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "graph_registry.hpp"

namespace {

const void *handle(uintptr_t n) {
  return reinterpret_cast<const void *>(n * 0x40 + 0x100000);
}

}  // namespace

TEST_CASE("graphs are named 'graph N' in first-seen order and keep their record") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  ferrum::GraphRecord &first = registry->record_for_launch(handle(7), nullptr);
  ferrum::GraphRecord &second = registry->record_for_launch(handle(3), nullptr);
  CHECK(std::string(first.name) == "graph 1");
  CHECK(std::string(second.name) == "graph 2");
  CHECK(first.ordinal == 1);
  CHECK(second.ordinal == 2);
  CHECK(&registry->record_for_launch(handle(7), nullptr) == &first);
  CHECK(registry->size() == 2);
}

TEST_CASE("a null handle shares one overflow record and does not take an ordinal") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  ferrum::GraphRecord &null_record = registry->record_for_launch(nullptr, nullptr);
  CHECK(null_record.ordinal == 0);
  CHECK(std::string(null_record.name) == "graph (unregistered)");
  CHECK(&registry->record_for_launch(nullptr, nullptr) == &null_record);
  CHECK(registry->record_for_launch(handle(1), nullptr).ordinal == 1);
}

TEST_CASE("colours are stable per name and differ between names") {
  CHECK(ferrum::color_for_name("graph 1") == ferrum::color_for_name("graph 1"));
  CHECK(ferrum::color_for_name("graph 1") != ferrum::color_for_name("graph 2"));
  CHECK((ferrum::color_for_name("x") >> 24) == 0xFF);  // opaque
}

TEST_CASE("8 threads seeing the same 64 new handles at once: 64 records, ordinals 1..64") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::vector<std::vector<const ferrum::GraphRecord *>> seen(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (uintptr_t g = 0; g < 64; ++g)
        seen[t].push_back(&registry->record_for_launch(handle(g), nullptr));
    });
  }
  go = true;
  for (auto &thread : threads) thread.join();
  CHECK(registry->size() == 64);
  std::set<uint32_t> ordinals;
  for (uintptr_t g = 0; g < 64; ++g) {
    for (int t = 1; t < 8; ++t) CHECK(seen[t][g] == seen[0][g]);
    ordinals.insert(seen[0][g]->ordinal);
  }
  CHECK(ordinals.size() == 64);
  CHECK(*ordinals.begin() == 1);
  CHECK(*ordinals.rbegin() == 64);
}

TEST_CASE("past kMaxGraphs, new handles share the overflow record; old ones keep theirs") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  for (uintptr_t g = 0; g < ferrum::GraphRegistry::kMaxGraphs; ++g)
    REQUIRE(registry->record_for_launch(handle(g), nullptr).ordinal == g + 1);
  ferrum::GraphRecord &extra = registry->record_for_launch(handle(999999), nullptr);
  CHECK(extra.ordinal == 0);
  CHECK(registry->record_for_launch(handle(5), nullptr).ordinal == 6);
  size_t visited = 0;
  registry->for_each([&](const ferrum::GraphRecord &) { ++visited; });
  CHECK(visited == ferrum::GraphRegistry::kMaxGraphs);  // overflow not listed: never launched
}
