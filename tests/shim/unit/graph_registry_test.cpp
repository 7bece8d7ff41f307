// The graph registry: identities in registration order, a new identity when the driver
// reuses a destroyed handle, user names, one record per handle when threads see a new
// handle at the same moment, and bounded tables under churn (issue 10). Run with
// FERRUM_REPLAY_SITE=off (tests/shim/unit/meson.build), so unnamed graphs are "graph N".
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../support/address_space.hpp"
#include "naming/graph_naming.hpp"
#include "range/graph_registry.hpp"
#include "range/replay_numbers.hpp"

namespace {

const void *handle(uintptr_t n) {
  return reinterpret_cast<const void *>(n * 0x40 + 0x100000);
}

std::string message_of(const ferrum_replay::shim::GraphRecord &record) {
  return record.label.load()->text;
}

// The registry as the shim drives it (launch_range.cpp), with no call site or content: the
// lock-free lookup first, registration on a miss.
struct Registry : ferrum_replay::shim::GraphRegistry {
  ferrum_replay::shim::GraphRecord &record_for_launch(const void *exec) {
    ferrum_replay::shim::GraphRecord *record = find(exec);
    return record ? *record : *register_at_launch(exec, "");
  }
  void on_instantiate(const void *exec, std::nullptr_t, const char *api) {
    GraphRegistry::on_instantiate(exec, api, "", "", false);
  }
  int name_graph(const void *exec, const char *name) {
    return GraphRegistry::name_graph(exec, name, "");
  }
  // Distinct graphs registered so far: the largest ordinal held.
  size_t size() const {
    size_t largest = 0;
    for_each([&](const ferrum_replay::shim::GraphRecord &record) {
      largest = std::max<size_t>(largest, record.ordinal);
    });
    return largest;
  }
};

}  // namespace

TEST_CASE("graphs first seen at launch are 'graph N' in first-seen order and keep their record") {
  auto registry = std::make_unique<Registry>();
  ferrum_replay::shim::GraphRecord &first = registry->record_for_launch(handle(7));
  ferrum_replay::shim::GraphRecord &second = registry->record_for_launch(handle(3));
  CHECK(message_of(first) == "graph 1");
  CHECK(message_of(second) == "graph 2");
  CHECK(std::string(first.api) == "launch");
  CHECK(&registry->record_for_launch(handle(7)) == &first);
  CHECK(registry->size() == 2);
}

TEST_CASE("instantiation gives the identity; a reused handle gets a new one, never the old name") {
  auto registry = std::make_unique<Registry>();
  registry->on_instantiate(handle(1), nullptr, "cuGraphInstantiateWithFlags");
  registry->on_instantiate(handle(2), nullptr, "cuGraphInstantiateWithFlags");
  REQUIRE(registry->name_graph(handle(2), "decode") == 0);
  ferrum_replay::shim::GraphRecord &decode = registry->record_for_launch(handle(2));
  CHECK(decode.ordinal == 2);
  CHECK(message_of(decode) == "decode");
  // The program destroys graph 2 and instantiates another: the driver hands out the handle again.
  registry->on_destroy(handle(2));
  registry->on_instantiate(handle(2), nullptr, "cudaGraphInstantiate");
  ferrum_replay::shim::GraphRecord &successor = registry->record_for_launch(handle(2));
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
  auto registry = std::make_unique<Registry>();
  registry->on_instantiate(handle(5), nullptr, "cuGraphInstantiate");
  registry->on_destroy(handle(5));
  CHECK(registry->record_for_launch(handle(5)).ordinal == 2);
}

TEST_CASE("user names: kept across launches, shared when the user names two graphs alike") {
  auto registry = std::make_unique<Registry>();
  registry->on_instantiate(handle(1), nullptr, "x");
  registry->on_instantiate(handle(2), nullptr, "x");
  CHECK(registry->name_graph(handle(1), "decode") == 0);
  CHECK(registry->name_graph(handle(2), "decode") == 0);
  CHECK(message_of(registry->record_for_launch(handle(1))) == "decode");
  CHECK(message_of(registry->record_for_launch(handle(2))) == "decode");
  // Renaming publishes a new label; the old one stays readable for launches in flight.
  const ferrum_replay::shim::GraphLabel *before =
      registry->record_for_launch(handle(1)).label.load();
  CHECK(registry->name_graph(handle(1), "prefill") == 0);
  CHECK(std::string(before->text) == "decode");
  CHECK(message_of(registry->record_for_launch(handle(1))) == "prefill");
}

TEST_CASE("a person's name shares a message only with graphs named alike, in either order") {
  // F172 (review W): a name shown whole may share its message, but only with graphs that show
  // that same name; a cut or '?'-replaced name, or an automatic one, never merges with it.
  const std::string x127(ferrum_replay::shim::kMaxNameLength, 'x');
  const std::pair<std::string, std::string> pairs[] = {
      {"a\x01", "a?"},         // '?' replaced vs written
      {"", "?"},               // nothing to show vs written
      {x127 + "A", x127},      // cut vs exactly the bound
      {"graph 1", "graph 1"},  // the first stays automatic below (not named): its "graph 1"
  };
  for (const auto &[first, second] : pairs) {
    for (const bool reversed : {false, true}) {
      CAPTURE(first);
      CAPTURE(reversed);
      auto registry = std::make_unique<Registry>();
      registry->on_instantiate(handle(1), nullptr, "x");
      registry->on_instantiate(handle(2), nullptr, "x");
      const bool automatic = first == "graph 1";  // graph 1 shows its number, by no one's choice
      if (reversed) {
        CHECK(registry->name_graph(handle(2), second.c_str()) == 0);
        if (!automatic) CHECK(registry->name_graph(handle(1), first.c_str()) == 0);
      } else {
        if (!automatic) CHECK(registry->name_graph(handle(1), first.c_str()) == 0);
        CHECK(registry->name_graph(handle(2), second.c_str()) == 0);
      }
      CHECK(message_of(registry->record_for_launch(handle(1))) !=
            message_of(registry->record_for_launch(handle(2))));
    }
  }
  // Named alike, in whatever order and however often renamed: one message.
  auto registry = std::make_unique<Registry>();
  for (uintptr_t g = 1; g <= 3; ++g) registry->on_instantiate(handle(g), nullptr, "x");
  CHECK(registry->name_graph(handle(3), "other") == 0);
  CHECK(registry->name_graph(handle(2), "decode") == 0);
  CHECK(registry->name_graph(handle(1), "decode") == 0);
  CHECK(registry->name_graph(handle(3), "decode") == 0);
  for (uintptr_t g = 1; g <= 3; ++g)
    CHECK(message_of(registry->record_for_launch(handle(g))) == "decode");
}

TEST_CASE("a graph's number added to keep messages apart is checked against the messages shown") {
  // Review X: a person named graph 3 "graph 1 (graph 2)"; graph 2, named "graph 1" (graph 1's
  // own automatic message), got the same text as its kept-apart message.
  auto registry = std::make_unique<Registry>();
  for (uintptr_t g = 1; g <= 3; ++g) registry->on_instantiate(handle(g), nullptr, "x");
  CHECK(registry->name_graph(handle(3), "graph 1 (graph 2)") == 0);
  CHECK(registry->name_graph(handle(2), "graph 1") == 0);
  std::set<std::string> messages;
  for (uintptr_t g = 1; g <= 3; ++g)
    messages.insert(message_of(registry->record_for_launch(handle(g))));
  CHECK(messages.size() == 3);
  CHECK(messages.count("graph 1 (graph 2.2)") == 1);
}

TEST_CASE("a person's name whose message is cut does not share it") {
  // F172 (review W3): the name fits, the message with it does not (other fields before it).
  ferrum_replay::shim::NamingEnvironment environment;
  char error[128];
  REQUIRE(ferrum_replay::shim::parse_message_template(
      "graph: {api} {name}", environment.message_template, error, sizeof error));
  ferrum_replay::shim::set_naming_environment(environment);
  auto registry = std::make_unique<Registry>();
  const std::string stem(ferrum_replay::shim::kMaxNameLength - 2, 'm');
  for (uintptr_t g = 1; g <= 3; ++g) {
    registry->on_instantiate(handle(g), nullptr, "cuGraphInstantiateWithFlags");
    CHECK(registry->name_graph(handle(g), (stem + " " + std::to_string(g)).c_str()) == 0);
  }
  std::set<std::string> messages;
  for (uintptr_t g = 1; g <= 3; ++g)
    messages.insert(message_of(registry->record_for_launch(handle(g))));
  ferrum_replay::shim::set_naming_environment(ferrum_replay::shim::NamingEnvironment{});
  CHECK(messages.size() == 3);
}

TEST_CASE("names with unusual bytes: control bytes and bad UTF-8 become '?', long ones are cut") {
  auto registry = std::make_unique<Registry>();
  registry->on_instantiate(handle(1), nullptr, "x");
  registry->name_graph(handle(1), "tab\there\nnewline \xff end");
  CHECK(message_of(registry->record_for_launch(handle(1))) == "tab?here?newline ? end");
  registry->name_graph(handle(1), "décodeur 批处理 8");
  CHECK(message_of(registry->record_for_launch(handle(1))) == "décodeur 批处理 8");
  std::string long_name(300, 'n');
  long_name += "é";
  registry->name_graph(handle(1), long_name.c_str());
  CHECK(message_of(registry->record_for_launch(handle(1))).size() ==
        ferrum_replay::shim::kMaxNameLength);
  // An emoji across the cut is dropped whole, never split.
  std::string cut(ferrum_replay::shim::kMaxNameLength - 2, 'a');
  cut += "\xF0\x9F\x98\x80";
  registry->name_graph(handle(1), cut.c_str());
  CHECK(message_of(registry->record_for_launch(handle(1))) ==
        std::string(ferrum_replay::shim::kMaxNameLength - 2, 'a'));
  CHECK(registry->name_graph(nullptr, "x") < 0);
  CHECK(registry->name_graph(handle(1), nullptr) < 0);
}

TEST_CASE("a null handle shares one overflow record and takes no ordinal") {
  auto registry = std::make_unique<Registry>();
  ferrum_replay::shim::GraphRecord &null_record = registry->record_for_launch(nullptr);
  CHECK(null_record.ordinal == 0);
  CHECK(message_of(null_record) == "graph (unregistered)");
  CHECK(&registry->record_for_launch(nullptr) == &null_record);
  CHECK(registry->record_for_launch(handle(1)).ordinal == 1);
}

TEST_CASE("colours are stable per name and differ between names") {
  CHECK(ferrum_replay::shim::color_for_name("graph 1") ==
        ferrum_replay::shim::color_for_name("graph 1"));
  CHECK(ferrum_replay::shim::color_for_name("graph 1") !=
        ferrum_replay::shim::color_for_name("graph 2"));
  CHECK((ferrum_replay::shim::color_for_name("x") >> 24) == 0xFF);  // opaque
}

TEST_CASE("8 threads seeing the same 64 new handles at once: 64 records, ordinals 1..64") {
  auto registry = std::make_unique<Registry>();
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::vector<std::vector<const ferrum_replay::shim::GraphRecord *>> seen(8);
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
  auto registry = std::make_unique<Registry>();
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
  auto registry = std::make_unique<Registry>();
  for (uintptr_t g = 10; g > 0; --g) registry->on_instantiate(handle(g), nullptr, "x");
  std::vector<uint32_t> order;
  registry->for_each(
      [&](const ferrum_replay::shim::GraphRecord &record) { order.push_back(record.ordinal); });
  REQUIRE(order.size() == 10);
  for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == i + 1);
}

// --- Bounded under churn: what the registry holds depends on the live graphs only. ---

TEST_CASE("message counts: an entry leaves when its count reaches 0; the table follows the live") {
  ferrum_replay::shim::detail::MessageCounts counts;
  std::map<uint64_t, int> model;
  std::mt19937_64 random(12345);
  size_t biggest = 0;
  int wrong = 0;
  for (int step = 0; step < 400000; ++step) {
    // A few popular messages (counts above 1) and many passing ones; the live set rises to
    // ~20,000 and falls back to nothing, twice.
    const bool growing = (step / 100000) % 2 == 0;
    const uint64_t key =
        (random() % 4 == 0 ? random() % 16 : random() % 1000000) * 0x9E3779B97F4A7C15ull | 1;
    if (growing ? random() % 5 != 0 : false) {
      counts.add(key);
      ++model[key];
    } else if (!model.empty()) {
      auto it = model.lower_bound(growing ? key : random());
      if (it == model.end()) it = model.begin();
      counts.remove(it->first);
      if (--it->second == 0) model.erase(it);
    }
    if (counts.in_use(key) != (model.count(key) != 0)) ++wrong;
    biggest = std::max(biggest, counts.capacity);
    if (step % 50000 == 0)
      for (const auto &[live_key, n] : model) wrong += !counts.in_use(live_key);
  }
  CHECK(wrong == 0);
  CHECK(counts.used == model.size());
  CHECK(model.empty());
  // Never more than 4 entries per live message, and it shrinks back when they leave.
  CHECK(biggest <= 4 * 20000 * 2);
  CHECK(counts.capacity == ferrum_replay::shim::detail::MessageCounts::kMinCapacity);
  // One long run: keys whose home is slot 0, and keys whose home lies inside the run (the
  // table's hash is key * golden >> (64 - bits); key = x * golden^-1 makes it x >> (64 - bits)).
  uint64_t inverse = 0x9E3779B97F4A7C15ull;  // Newton: inverse * golden == 1 (mod 2^64)
  for (int i = 0; i < 6; ++i) inverse *= 2 - 0x9E3779B97F4A7C15ull * inverse;
  ferrum_replay::shim::detail::MessageCounts run;
  std::vector<uint64_t> keys;
  for (uint64_t x = 1; x < 120; x += 2) keys.push_back(x * inverse);            // home 0
  for (uint64_t j = 1; j < 40; ++j) keys.push_back(((j << 56) | 1) * inverse);  // home j (256)
  for (uint64_t k : keys) run.add(k);
  REQUIRE(run.capacity == 256);
  for (size_t i = 0; i < keys.size(); i += 3) run.remove(keys[i]);
  for (size_t i = 0; i < keys.size(); ++i) CHECK(run.in_use(keys[i]) == (i % 3 != 0));
  for (size_t i = 0; i < keys.size(); ++i)
    if (i % 3 != 0) run.remove(keys[i]);
  CHECK(run.used == 0);
  for (uint64_t k : keys) CHECK_FALSE(run.in_use(k));
}

TEST_CASE("300,000 graphs with handles never reused, two kept live: every one registered") {
  auto registry = std::make_unique<Registry>();
  registry->on_instantiate(handle(1), nullptr, "x");
  registry->on_instantiate(handle(2), nullptr, "x");
  REQUIRE(registry->name_graph(handle(1), "kept 1") == 0);
  REQUIRE(registry->name_graph(handle(2), "kept 2") == 0);
  ferrum_replay::shim::GraphRecord *kept[2] = {&registry->record_for_launch(handle(1)),
                                               &registry->record_for_launch(handle(2))};
  size_t overflowed = 0, naming_failed = 0, lost = 0, max_slots = 0;
  for (uintptr_t n = 0; n < 300000; ++n) {
    const void *exec = handle(1000 + n);
    registry->on_instantiate(exec, nullptr, "x");
    naming_failed += registry->name_graph(exec, "churn") != 0;
    ferrum_replay::shim::GraphRecord &record = registry->record_for_launch(exec);
    overflowed += record.ordinal == 0;
    ferrum_replay::shim::take_replay_number(record);
    ferrum_replay::shim::GraphRecord &keeper = registry->record_for_launch(handle(1 + n % 2));
    lost += &keeper != kept[n % 2];
    ferrum_replay::shim::take_replay_number(keeper);
    registry->on_destroy(exec);
    if (n % 1000 == 0) max_slots = std::max(max_slots, registry->occupancy().table_slots);
  }
  CHECK(overflowed == 0);
  CHECK(naming_failed == 0);
  CHECK(lost == 0);
  CHECK(message_of(*kept[0]) == "kept 1");
  CHECK(message_of(*kept[1]) == "kept 2");
  const ferrum_replay::shim::GraphRegistry::Occupancy now = registry->occupancy();
  CHECK(now.live_graphs == 2);
  CHECK(now.unconfirmed == 0);
  CHECK(now.messages == 2);  // "kept 1", "kept 2": the churn's are forgotten
  CHECK(max_slots == size_t{1} << ferrum_replay::shim::GraphRegistry::kMinTableBits);
  // The exit summary's totals: records held plus recycled ones account for every graph and
  // every launch.
  uint64_t graphs = registry->recycled().graphs, launches = registry->recycled().launches;
  registry->for_each([&](const ferrum_replay::shim::GraphRecord &record) {
    ++graphs;
    launches += ferrum_replay::shim::replay_count(record);
  });
  CHECK(graphs == 300002);
  CHECK(registry->size() == 300002);
  CHECK(launches == 600000);
}

TEST_CASE("one graph renamed 300,000 times: only its current message is counted") {
  auto registry = std::make_unique<Registry>();
  registry->on_instantiate(handle(1), nullptr, "x");
  int failed = 0;
  for (int n = 0; n < 300000; ++n)
    failed += registry->name_graph(handle(1), ("name " + std::to_string(n)).c_str()) != 0;
  CHECK(failed == 0);
  CHECK(message_of(registry->record_for_launch(handle(1))) == "name 299999");
  const ferrum_replay::shim::GraphRegistry::Occupancy now = registry->occupancy();
  CHECK(now.messages == 1);
  CHECK(now.message_capacity == ferrum_replay::shim::detail::MessageCounts::kMinCapacity);
}

TEST_CASE("no label to be had: a name is refused, the record stays as it was, until room is back" *
          doctest::skip(kNoAddressSpaceLimit)) {
  auto registry = std::make_unique<Registry>();
  // Graph 1's name comes at its first launch (FERRUM_REPLAY_SITE=launch).
  registry->GraphRegistry::on_instantiate(handle(1), "x", "", "", true);
  registry->on_instantiate(handle(2), nullptr, "x");
  REQUIRE(registry->name_graph(handle(2), "kept") == 0);
  ferrum_replay::shim::GraphRecord &pending = *registry->find(handle(1));
  ferrum_replay::shim::GraphRecord &renamed = *registry->find(handle(2));
  const int failed = in_child([&]() -> int {
    if (!limit_address_space_to_now()) return 1;
    // Renames until the label pool needs a chunk it cannot map (F170: each returned 0, and the
    // record's {name} took the name its label did not show).
    int result = 0;
    std::string last = "kept";
    for (int n = 0; n < 10000 && result == 0; ++n) {
      const std::string name = "name " + std::to_string(n);
      result = registry->name_graph(handle(2), name.c_str());
      if (result == 0) last = name;
    }
    if (result != -ENOSPC) return 2;
    if (message_of(renamed) != last || renamed.name != last) return 3;
    if (!registry->refusing_labels()) return 4;
    // The other caller of the one naming step: the name at first launch stays pending.
    registry->name_at_first_launch(pending, "Server::capture_decode");
    if (!pending.site_pending.load() || pending.site[0] != '\0' || message_of(pending) != "graph 1")
      return 5;
    // Room comes back (a graph destroyed): no longer refusing; tried again, still no memory.
    registry->on_destroy(handle(2));
    if (registry->refusing_labels()) return 6;
    registry->name_at_first_launch(pending, "Server::capture_decode");
    if (!registry->refusing_labels() || !pending.site_pending.load()) return 7;
    unlimit_address_space();
    registry->on_instantiate(handle(3), nullptr, "x");  // memory came back: registered
    if (registry->refusing_labels()) return 8;
    registry->name_at_first_launch(pending, "Server::capture_decode");
    if (pending.site_pending.load() || message_of(pending) != "Server::capture_decode") return 9;
    return 0;
  });
  CHECK(failed == 0);
}

TEST_CASE("graphs the registry never saw instantiated: held up to a bound, launched ones kept") {
  auto registry = std::make_unique<Registry>();
  registry->on_instantiate(handle(1), nullptr, "x");
  REQUIRE(registry->name_graph(handle(1), "instantiated") == 0);
  ferrum_replay::shim::GraphRecord &instantiated = registry->record_for_launch(handle(1));
  // First seen at launch (instantiated before the shim was there), named, launched often.
  ferrum_replay::shim::GraphRecord &busy = registry->record_for_launch(handle(2));
  REQUIRE(registry->name_graph(handle(2), "busy") == 0);
  const uint32_t busy_ordinal = busy.ordinal;
  size_t failed = 0, moved = 0, most_unconfirmed = 0;
  constexpr uintptr_t kStale = 100000;  // a program naming handles it already destroyed
  for (uintptr_t n = 0; n < 50000; ++n) {
    failed += registry->name_graph(handle(kStale + n), "stale") != 0;
    if (n % 1000 == 0) {
      ferrum_replay::shim::GraphRecord &now = registry->record_for_launch(handle(2));
      moved += &now != &busy;
      ferrum_replay::shim::take_replay_number(now);
      most_unconfirmed = std::max(most_unconfirmed, registry->occupancy().unconfirmed);
    }
  }
  CHECK(failed == 0);
  CHECK(moved == 0);
  CHECK(message_of(busy) == "busy");
  CHECK(busy.ordinal == busy_ordinal);
  CHECK(&registry->record_for_launch(handle(1)) == &instantiated);
  CHECK(message_of(instantiated) == "instantiated");
  CHECK(most_unconfirmed <= ferrum_replay::shim::GraphRegistry::kMaxUnconfirmed);
  const ferrum_replay::shim::GraphRegistry::Occupancy now = registry->occupancy();
  CHECK(now.live_graphs <= ferrum_replay::shim::GraphRegistry::kMaxUnconfirmed + 1);
  CHECK(now.table_slots <= 4 * ferrum_replay::shim::GraphRegistry::kMaxUnconfirmed);
  CHECK(now.messages <= 3);  // "instantiated", "busy", "stale"
  // A forgotten one launched after all: registered anew, never under the old name.
  ferrum_replay::shim::GraphRecord &again = registry->record_for_launch(handle(kStale));
  CHECK(again.ordinal > busy_ordinal + 40000);
  CHECK(message_of(again) != "stale");
  // Destroying a forgotten handle, or one never seen, changes nothing.
  const size_t live = registry->occupancy().live_graphs;
  CHECK(live == now.live_graphs);  // `again` took the place of the next one forgotten
  registry->on_destroy(handle(kStale + 1));
  registry->on_destroy(handle(999999999));
  CHECK(registry->occupancy().live_graphs == live);
}

TEST_CASE("launches find their graphs while other threads churn handles through table rebuilds") {
  auto registry = std::make_unique<Registry>();
  constexpr int kLaunchers = 4;
  for (uintptr_t g = 1; g <= 2 * kLaunchers; ++g) {
    registry->on_instantiate(handle(g), nullptr, "x");
    REQUIRE(registry->name_graph(handle(g), ("kept " + std::to_string(g)).c_str()) == 0);
  }
  std::vector<ferrum_replay::shim::GraphRecord *> kept;
  for (uintptr_t g = 1; g <= 2 * kLaunchers; ++g)
    kept.push_back(&registry->record_for_launch(handle(g)));
  std::atomic<bool> churning{true};
  std::atomic<size_t> wrong{0}, launches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kLaunchers; ++t) {
    threads.emplace_back([&, t] {
      size_t mine = 0, bad = 0;
      for (uint64_t i = 0; churning.load(std::memory_order_relaxed) || i < 1000; ++i) {
        const uintptr_t g = 1 + 2 * static_cast<uintptr_t>(t) + (i & 1);
        const ferrum_replay::shim::GraphRecord &record = registry->record_for_launch(handle(g));
        bad += &record != kept[g - 1] ||
               std::strcmp(record.label.load()->text, ("kept " + std::to_string(g)).c_str()) != 0;
        ++mine;
      }
      wrong += bad;
      launches += mine;
    });
  }
  // Instantiate/name/destroy with fresh handles, and name stale ones: the table is rebuilt
  // every few hundred cycles and unconfirmed graphs are forgotten, all while launches run.
  threads.emplace_back([&] {
    for (uintptr_t n = 0; n < 20000; ++n) {
      const void *exec = handle(1000 + n);
      registry->on_instantiate(exec, nullptr, "x");
      registry->name_graph(exec, "churn");
      registry->record_for_launch(exec);
      registry->on_destroy(exec);
      registry->name_graph(exec, "stale");
    }
    churning = false;
  });
  for (auto &thread : threads) thread.join();
  CHECK(wrong == 0);
  CHECK(launches >= kLaunchers * 1000);
  CHECK(registry->occupancy().live_graphs <=
        2 * kLaunchers + ferrum_replay::shim::GraphRegistry::kMaxUnconfirmed);
}
