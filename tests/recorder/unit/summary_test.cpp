// The stderr summary: statistics per (domain, name) and the exact shape of the text.
#include <doctest/doctest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "summary_table.hpp"
#include "utf8.hpp"

using namespace ferrum_replay::recorder;

namespace {

Event event(uint32_t domain, const char *name, uint64_t start, uint64_t end) {
  Event e{};
  e.domain_id = domain;
  e.attrs.name = name;
  e.start = start;
  e.end = end;
  return e;
}

Snapshot sample() {
  Snapshot s;
  s.domain_names = {"global", "ferrum-replay"};
  ThreadSnapshot a, b;
  a.tid = 1;
  b.tid = 2;
  a.events = {event(1, "prefill", 0, 100000), event(1, "prefill", 0, 150000),
              event(0, "app step", 0, 2000)};
  // Same text, different pointer (another thread's copy): must merge into one row.
  static const char other_copy[] = "prefill";
  b.events = {event(1, other_copy, 0, 125000)};
  s.threads = {a, b};
  return s;
}

std::vector<std::string> lines(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("aggregate merges by text and sorts by domain then name") {
  const std::vector<RangeStats> rows = aggregate(sample());
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].domain == "ferrum-replay");
  CHECK(rows[0].name == "prefill");
  CHECK(rows[0].count == 3);
  CHECK(rows[0].total_ns == 375000);
  CHECK(rows[0].min_ns == 100000);
  CHECK(rows[0].max_ns == 150000);
  CHECK(rows[1].domain == "global");
  CHECK(rows[1].name == "app step");
  CHECK(rows[1].count == 1);
}

TEST_CASE("summary text") {
  const Snapshot s = sample();
  const std::vector<std::string> l = lines(format_summary(s, aggregate(s), "/abs/t.json"));
  REQUIRE(l.size() == 5);
  CHECK(l[0] == "ferrum-replay recorder: 4 ranges on 2 threads, trace: /abs/t.json");
  // No GPU time: the CPU columns only (the p50 is a bucket's middle, within 3.2%).
  CHECK(l[1] ==
        "domain          range      count   total ms    mean us     min us     p50 us     p99 us"
        "     max us");
  CHECK(l[2] ==
        "ferrum-replay   prefill    3          0.375    125.000    100.000    124.928    150.000"
        "    150.000");
  CHECK(l[3] ==
        "global          app step   1          0.002      2.000      2.000      2.000      2.000"
        "      2.000");
  CHECK(l[4] == "protocol errors: none");
}

TEST_CASE("protocol errors, rejected pushes and unwritten trace") {
  Snapshot s = sample();
  s.errors.pop_without_push = 2;
  s.errors.open_at_exit = 3;
  s.rejected_pushes = 5;
  const std::vector<std::string> l = lines(format_summary(s, aggregate(s), ""));
  CHECK(l.front() == "ferrum-replay recorder: 4 ranges on 2 threads, trace not written");
  CHECK(l[l.size() - 2] == "protocol errors: 2 pop without push, 3 open at exit");
  CHECK(l.back() == "rejected pushes: 5");

  s.errors = {};
  s.errors.pop_wrong_domain = 1;
  s.rejected_pushes = 0;
  CHECK(lines(format_summary(s, aggregate(s), "x")).back() ==
        "protocol errors: 1 popped in wrong domain");

  // Whose they are, when the recorder knows the shim's domain (review LL-1).
  s.shim_domain_known = true;
  s.gpu_domain = "ferrum-replay";
  CHECK(lines(format_summary(s, aggregate(s), "x")).back() ==
        "protocol errors: 1 popped in wrong domain (none in the shim's domain ferrum-replay)");
  s.errors.open_at_exit = 2;
  s.shim_errors.open_at_exit = 1;
  CHECK(lines(format_summary(s, aggregate(s), "x")).back() ==
        "protocol errors: 1 popped in wrong domain, 2 open at exit (1 of them in the shim's "
        "domain ferrum-replay)");
}

TEST_CASE("empty run prints no column header") {
  const Snapshot s;
  const std::vector<std::string> l = lines(format_summary(s, aggregate(s), "/t.json"));
  REQUIRE(l.size() == 2);
  CHECK(l[0] == "ferrum-replay recorder: 0 ranges on 0 threads, trace: /t.json");
  CHECK(l[1] == "protocol errors: none");
}

TEST_CASE("names with control characters stay on one line and align by code points") {
  Snapshot s;
  s.domain_names = {"global"};
  ThreadSnapshot t;
  t.events = {event(0, "a\nb", 0, 1000), event(0, "caf\xc3\xa9", 0, 1000)};
  s.threads = {t};
  const std::vector<std::string> l = lines(format_summary(s, aggregate(s), "/t"));
  REQUIRE(l.size() == 5);
  CHECK(l[2].find("a?b") != std::string::npos);
  // "café" is 5 bytes but 4 columns wide: the count column starts at the same column.
  const auto count_column = [](const std::string &row) {
    return display_width(std::string_view(row).substr(0, row.find('1')));
  };
  CHECK(count_column(l[2]) == count_column(l[3]));
}

TEST_CASE("many distinct names: the busiest rows, then one line for the rest") {
  Snapshot s;
  s.domain_names = {"global"};
  ThreadSnapshot t;
  t.tid = 1;
  // 50,004 names ("graph N" re-instantiated): name i runs (i + 1) us once; "graph 0" twice.
  static std::vector<std::string> names;
  names.clear();
  for (int i = 0; i < 50004; ++i) names.push_back("graph " + std::to_string(i));
  for (int i = 0; i < 50004; ++i)
    t.events.push_back(event(0, names[i].c_str(), 0, 1000 * static_cast<uint64_t>(i + 1)));
  t.events.push_back(event(0, names[0].c_str(), 0, 1000));
  s.threads = {t};
  // More names than the rows kept (kMaxAggregatedRows): the rows go to the busiest names,
  // exact, and the rest is counted.
  OtherNames other;
  const std::vector<RangeStats> rows = aggregate(s, &other);
  REQUIRE(rows.size() == kMaxAggregatedRows);
  uint64_t in_rows = 0;
  for (const RangeStats &r : rows) {
    REQUIRE(r.name.rfind("graph ", 0) == 0);
    const int i = std::stoi(r.name.substr(6));
    // The last names met, and "graph 0", met again last (Space-Saving keeps the newest).
    CHECK((i == 0 || i > 50004 - static_cast<int>(kMaxAggregatedRows)));
    // Exact, though rows changed hands on the way.
    CHECK(r.count == (i == 0 ? 2 : 1));
    CHECK(r.total_ns == (i == 0 ? 2000 : 1000 * static_cast<uint64_t>(i + 1)));
    CHECK(r.max_ns == (i == 0 ? 1000 : r.total_ns));
    in_rows += r.count;
  }
  CHECK(other.ranges == 50005 - in_rows);
  const std::vector<std::string> l = lines(format_summary(s, rows, "/t.json", kSummaryRows, other));
  REQUIRE(l.size() == 1 + 1 + 50 + 1 + 1);
  CHECK(l[0] == "ferrum-replay recorder: 50005 ranges on 1 threads, trace: /t.json");
  CHECK(l[2].rfind("global   graph 50003 ", 0) == 0);   // the busiest first
  CHECK(l[51].rfind("global   graph 49954 ", 0) == 0);  // the 50th busiest
  // The other 49,954 names: 49,955 ranges (graph 0 twice) of 1..49,954 us, plus 1 us.
  const uint64_t rest_ns = 1000ull * 49954 * 49955 / 2 + 1000;
  char expected[160];
  std::snprintf(expected, sizeof expected,
                "... and 4046 more range names and others beyond the 4096 counted (49955 "
                "ranges, total %.3f ms); the trace has every range",
                static_cast<double>(rest_ns) / 1e6);
  CHECK(l[52] == expected);
  CHECK(l[53] == "protocol errors: none");

  // At the limit nothing is cut, and the order stays domain then name.
  s.threads[0].events.resize(50);
  const std::vector<std::string> all = lines(format_summary(s, aggregate(s), "/t.json"));
  CHECK(all.size() == 1 + 1 + 50 + 1);
  CHECK(all[2].rfind("global   graph 0 ", 0) == 0);
  CHECK(lines(format_summary(s, aggregate(s), "/t.json", 0)).size() == all.size());
}

TEST_CASE("the first line counts the ranges the rows hold") {
  // A thread whose spilled run is not readable (no segment there): the rows count what could
  // be read, and so does the first line, instead of the 104 the snapshot's bookkeeping claims.
  static SpillFile empty_spill;
  Snapshot s = sample();
  s.spill = &empty_spill;
  SpillRun unreadable;
  unreadable.count = 100;
  unreadable.ranges = 100;
  s.threads[0].runs = {unreadable};
  CHECK(s.range_count() == 104);
  const std::vector<std::string> l = lines(format_summary(s, aggregate(s), "/t.json"));
  CHECK(l[0] == "ferrum-replay recorder: 4 ranges on 2 threads, trace: /t.json");
}
