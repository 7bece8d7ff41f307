// The graph registry: identities in registration order, a new identity when the driver
// reuses a destroyed handle, user names, and one record per handle when threads see a new
// handle at the same moment. Run with FERRUM_REPLAY_SITE=off (tests/unit/meson.build), so
// unnamed graphs are "graph N".
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

std::string message_of(const ferrum::GraphRecord &record) {
  return record.label.load()->text;
}

}  // namespace

TEST_CASE("graphs first seen at launch are 'graph N' in first-seen order and keep their record") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  ferrum::GraphRecord &first = registry->record_for_launch(handle(7));
  ferrum::GraphRecord &second = registry->record_for_launch(handle(3));
  CHECK(message_of(first) == "graph 1");
  CHECK(message_of(second) == "graph 2");
  CHECK(std::string(first.api) == "launch");
  CHECK(&registry->record_for_launch(handle(7)) == &first);
  CHECK(registry->size() == 2);
}

TEST_CASE("instantiation gives the identity; a reused handle gets a new one, never the old name") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  registry->on_instantiate(handle(1), nullptr, "cuGraphInstantiateWithFlags");
  registry->on_instantiate(handle(2), nullptr, "cuGraphInstantiateWithFlags");
  REQUIRE(registry->name_graph(handle(2), "decode") == 0);
  ferrum::GraphRecord &decode = registry->record_for_launch(handle(2));
  CHECK(decode.ordinal == 2);
  CHECK(message_of(decode) == "decode");
  // The program destroys graph 2 and instantiates another: the driver hands out the handle again.
  registry->on_destroy(handle(2));
  registry->on_instantiate(handle(2), nullptr, "cudaGraphInstantiate");
  ferrum::GraphRecord &successor = registry->record_for_launch(handle(2));
  CHECK(&successor != &decode);
  CHECK(successor.ordinal == 3);
  CHECK(message_of(successor) == "graph 3");
  CHECK(std::string(successor.api) == "cudaGraphInstantiate");
  CHECK_FALSE(decode.live);
  // Instantiated again without a destroy we saw (it happened before the shim was loaded, say).
  registry->on_instantiate(handle(2), nullptr, "cudaGraphInstantiate");
  CHECK(registry->record_for_launch(handle(2)).ordinal == 4);
}

TEST_CASE("a destroyed handle launched again is registered as a new graph") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  registry->on_instantiate(handle(5), nullptr, "cuGraphInstantiate");
  registry->on_destroy(handle(5));
  CHECK(registry->record_for_launch(handle(5)).ordinal == 2);
}

TEST_CASE("user names: kept across launches, shared when the user names two graphs alike") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  registry->on_instantiate(handle(1), nullptr, "x");
  registry->on_instantiate(handle(2), nullptr, "x");
  CHECK(registry->name_graph(handle(1), "decode") == 0);
  CHECK(registry->name_graph(handle(2), "decode") == 0);
  CHECK(message_of(registry->record_for_launch(handle(1))) == "decode");
  CHECK(message_of(registry->record_for_launch(handle(2))) == "decode");
  // Renaming publishes a new label; the old one stays readable for launches in flight.
  const ferrum::GraphLabel *before = registry->record_for_launch(handle(1)).label.load();
  CHECK(registry->name_graph(handle(1), "prefill") == 0);
  CHECK(std::string(before->text) == "decode");
  CHECK(message_of(registry->record_for_launch(handle(1))) == "prefill");
}

TEST_CASE("names with unusual bytes: control bytes and bad UTF-8 become '?', long ones are cut") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  registry->on_instantiate(handle(1), nullptr, "x");
  registry->name_graph(handle(1), "tab\there\nnewline \xff end");
  CHECK(message_of(registry->record_for_launch(handle(1))) == "tab?here?newline ? end");
  registry->name_graph(handle(1), "décodeur 批处理 8");
  CHECK(message_of(registry->record_for_launch(handle(1))) == "décodeur 批处理 8");
  std::string long_name(300, 'n');
  long_name += "é";
  registry->name_graph(handle(1), long_name.c_str());
  CHECK(message_of(registry->record_for_launch(handle(1))).size() == ferrum::kMaxNameLength);
  // An emoji across the cut is dropped whole, never split.
  std::string cut(ferrum::kMaxNameLength - 2, 'a');
  cut += "\xF0\x9F\x98\x80";
  registry->name_graph(handle(1), cut.c_str());
  CHECK(message_of(registry->record_for_launch(handle(1))) ==
        std::string(ferrum::kMaxNameLength - 2, 'a'));
  CHECK(registry->name_graph(nullptr, "x") < 0);
  CHECK(registry->name_graph(handle(1), nullptr) < 0);
}

TEST_CASE("a null handle shares one overflow record and takes no ordinal") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  ferrum::GraphRecord &null_record = registry->record_for_launch(nullptr);
  CHECK(null_record.ordinal == 0);
  CHECK(message_of(null_record) == "graph (unregistered)");
  CHECK(&registry->record_for_launch(nullptr) == &null_record);
  CHECK(registry->record_for_launch(handle(1)).ordinal == 1);
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
      for (uintptr_t g = 0; g < 64; ++g) seen[t].push_back(&registry->record_for_launch(handle(g)));
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

TEST_CASE("graphs named from two threads at once: each ends with one of the names, intact") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  for (uintptr_t g = 1; g <= 32; ++g) registry->on_instantiate(handle(g), nullptr, "x");
  std::atomic<bool> go{false};
  auto name_all = [&](const char *prefix) {
    while (!go.load()) std::this_thread::yield();
    for (int round = 0; round < 20; ++round)
      for (uintptr_t g = 1; g <= 32; ++g)
        registry->name_graph(handle(g), (std::string(prefix) + std::to_string(g)).c_str());
  };
  std::thread left(name_all, "left "), right(name_all, "right ");
  go = true;
  left.join();
  right.join();
  for (uintptr_t g = 1; g <= 32; ++g) {
    const std::string text = message_of(registry->record_for_launch(handle(g)));
    CHECK((text == "left " + std::to_string(g) || text == "right " + std::to_string(g)));
  }
  CHECK(registry->size() == 32);
}

TEST_CASE("for_each visits graphs in ordinal order") {
  auto registry = std::make_unique<ferrum::GraphRegistry>();
  for (uintptr_t g = 10; g > 0; --g) registry->on_instantiate(handle(g), nullptr, "x");
  std::vector<uint32_t> order;
  registry->for_each([&](const ferrum::GraphRecord &record) { order.push_back(record.ordinal); });
  REQUIRE(order.size() == 10);
  for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == i + 1);
}
