// FERRUM_RECORD_OUT expansion: the same placeholders as `nsys profile -o`.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "output_path.hpp"

using namespace ferrum_replay::recorder;

namespace {
const char *fake_env(const char *name, void *) {
  if (std::strcmp(name, "RANK") == 0) return "3";
  if (std::strcmp(name, "EMPTY") == 0) return "";
  return nullptr;
}
std::string expand(std::string_view pattern) {
  return expand_output_path(pattern, 4242, "node1", fake_env, nullptr);
}
}  // namespace

TEST_CASE("%p and %h") {
  CHECK(expand("ferrum-replay.%p.json") == "ferrum-replay.4242.json");
  CHECK(expand("/tmp/%h-%p.json") == "/tmp/node1-4242.json");
  CHECK(expand("%p%p") == "42424242");
}

TEST_CASE("%q{VAR}") {
  CHECK(expand("rank%q{RANK}.json") == "rank3.json");
  CHECK(expand("x%q{UNSET}y") == "xy");
  CHECK(expand("x%q{EMPTY}y") == "xy");
  CHECK(expand("x%q{}y") == "xy");
}

TEST_CASE("%% and literal leftovers") {
  CHECK(expand("100%%.json") == "100%.json");
  CHECK(expand("a%zb") == "a%zb");
  CHECK(expand("trailing%") == "trailing%");
  CHECK(expand("%q{UNTERMINATED") == "%q{UNTERMINATED");
  CHECK(expand("%qx") == "%qx");
  CHECK(expand("%%p") == "%p");
}

TEST_CASE("absolute_path") {
  CHECK(absolute_path("/abs/t.json", "/cwd") == "/abs/t.json");
  CHECK(absolute_path("t.json", "/cwd") == "/cwd/t.json");
  CHECK(absolute_path("d/t.json", "/cwd/") == "/cwd/d/t.json");
  CHECK(absolute_path("t.json", "/") == "/t.json");
}
