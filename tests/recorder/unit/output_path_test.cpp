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
  return expand_output_pattern(pattern, 4242, "node1", fake_env, nullptr).path;
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
  CHECK(expand("x%q{}y") == "x%q{}y");  // not a variable name: kept (docs/text-rules.md)
}

TEST_CASE("unset variables are reported, each once; an expansion over 4095 bytes is an error") {
  const ExpandedPath e =
      expand_output_pattern("%q{NOPE}/%q{RANK}/%q{NOPE}%q{ALSO}.json", 1, "h", fake_env, nullptr);
  CHECK(e.path == "./3/.json");  // relative stays relative: never the root directory
  CHECK(e.unset == "NOPE, ALSO");
  CHECK_FALSE(e.too_long);
  CHECK(expand_output_pattern("x%q{EMPTY}", 1, "h", fake_env, nullptr).unset.empty());
  const ExpandedPath big =
      expand_output_pattern(std::string(4094, 'x') + "%p", 4242, "h", fake_env, nullptr);
  CHECK(big.too_long);
  CHECK(big.path.empty());
  CHECK(expand(std::string(4095, 'x')).size() == 4095);
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
