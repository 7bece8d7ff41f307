// The naming scope's per-thread stack (range/scope_names.hpp): bounds, balance, per-thread
// names, names made printable and cut as a graph's; and a scoped instantiation in the
// registry, which a later name by handle replaces. Run with FERRUM_REPLAY_SITE=off.
#include <doctest/doctest.h>

#include <errno.h>

#include <memory>
#include <string>
#include <thread>

#include "range/graph_registry.hpp"
#include "range/scope_names.hpp"

namespace shim = ferrum_replay::shim;

namespace {

std::string current() {
  const char *name = shim::current_scope_name();
  return name ? name : "(none)";
}

// Pops whatever the test case left pushed, so that cases do not see each other's levels.
void pop_all() {
  while (shim::pop_scope_name() == 0) {
  }
}

}  // namespace

TEST_CASE("scope: nothing pushed names nothing; pop without push is -EINVAL") {
  pop_all();
  CHECK(current() == "(none)");
  CHECK(shim::pop_scope_name() == -EINVAL);
  CHECK(shim::scope_depth() == 0);
}

TEST_CASE("scope: the innermost name applies; a pop restores the outer one") {
  pop_all();
  CHECK(shim::push_scope_name("outer") == 0);
  CHECK(shim::push_scope_name("inner") == 0);
  CHECK(current() == "inner");
  CHECK(shim::pop_scope_name() == 0);
  CHECK(current() == "outer");
  CHECK(shim::pop_scope_name() == 0);
  CHECK(current() == "(none)");
  CHECK(shim::pop_scope_name() == -EINVAL);
}

TEST_CASE("scope: 16 levels hold names; deeper pushes are -ENOSPC, counted, and pop in balance") {
  pop_all();
  for (size_t level = 0; level < shim::kMaxScopeDepth; ++level)
    CHECK(shim::push_scope_name(("level " + std::to_string(level)).c_str()) == 0);
  CHECK(shim::push_scope_name("too deep") == -ENOSPC);
  CHECK(shim::push_scope_name("deeper") == -ENOSPC);
  CHECK(shim::scope_depth() == shim::kMaxScopeDepth + 2);
  CHECK(current() == "level 15");  // the innermost name that fit
  CHECK(shim::pop_scope_name() == 0);
  CHECK(shim::pop_scope_name() == 0);
  CHECK(current() == "level 15");
  CHECK(shim::pop_scope_name() == 0);
  CHECK(current() == "level 14");
  for (size_t level = 1; level < shim::kMaxScopeDepth; ++level) CHECK(shim::pop_scope_name() == 0);
  CHECK(shim::pop_scope_name() == -EINVAL);
  CHECK(current() == "(none)");
}

TEST_CASE("scope: a null name is -EINVAL, still a level, which carries the outer name") {
  pop_all();
  CHECK(shim::push_scope_name(nullptr) == -EINVAL);
  CHECK(current() == "(none)");
  CHECK(shim::push_scope_name("outer") == 0);
  CHECK(shim::push_scope_name(nullptr) == -EINVAL);
  CHECK(current() == "outer");
  CHECK(shim::pop_scope_name() == 0);
  CHECK(shim::pop_scope_name() == 0);
  CHECK(shim::pop_scope_name() == 0);
  CHECK(shim::pop_scope_name() == -EINVAL);
}

TEST_CASE("scope: names are made printable and cut as a graph's name; empty becomes '?'") {
  pop_all();
  std::string long_name(300, 'n');
  shim::push_scope_name(long_name.c_str());
  CHECK(current().size() == shim::kMaxNameLength);
  shim::push_scope_name("tab\there \xff");
  CHECK(current() == "tab?here ?");
  shim::push_scope_name("");
  CHECK(current() == "?");
  pop_all();
}

TEST_CASE("scope: per thread; a thread that exits inside a scope leaves the others alone") {
  pop_all();
  shim::push_scope_name("main");
  std::string seen_in_thread;
  std::thread([&] {
    seen_in_thread = current();
    shim::push_scope_name("worker");  // never popped: released with the thread
    shim::push_scope_name("worker inner");
  }).join();
  CHECK(seen_in_thread == "(none)");
  CHECK(current() == "main");
  CHECK(shim::scope_depth() == 1);
  pop_all();
}

TEST_CASE("scope: a scoped graph is the program's name; a later name by handle replaces it") {
  auto registry = std::make_unique<shim::GraphRegistry>();
  const void *exec = reinterpret_cast<const void *>(0x7000);
  registry->on_instantiate(exec, "cuGraphInstantiate", "", "", false, "decode bs=8");
  shim::GraphRecord *record = registry->find(exec);
  REQUIRE(record != nullptr);
  CHECK(std::string(record->label.load()->text) == "decode bs=8");
  CHECK(registry->name_graph(exec, "explicit", "") == 0);
  CHECK(std::string(registry->find(exec)->label.load()->text) == "explicit");
  // Not scoped: "graph N" (call sites are off in this test).
  const void *other = reinterpret_cast<const void *>(0x8000);
  registry->on_instantiate(other, "cuGraphInstantiate", "", "", false);
  CHECK(std::string(registry->find(other)->label.load()->text) == "graph 2");
}
