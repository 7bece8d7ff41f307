// What NVTX says besides push/pop: marks, start/end ranges (which may end on another thread),
// category names, and the process's name as traces show it.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "recorder.hpp"
#include "summary_table.hpp"
#include "trace_writer.hpp"
#include "utf8.hpp"

using namespace ferrum_replay::recorder;
using namespace std::string_literals;

namespace {

// Every full chunk spilled (FERRUM_RECORD_MEMORY=0): the spill is part of what these test.
Settings spilling_at_once() {
  Settings settings;
  settings.memory = 0;
  return settings;
}

size_t count_of(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

RangeAttrs with_category(uint32_t category) {
  RangeAttrs a;
  a.category = category;
  return a;
}

}  // namespace

TEST_CASE("a mark is an instant event with the range's attributes, never a range") {
  Recorder r(spilling_at_once(), 0);
  auto *d = r.names().create_domain("mine");
  RangeAttrs attrs = with_category(3);
  attrs.payload = Payload(int64_t{-4});
  attrs.has_color = true;
  attrs.color = 0xFF112233;
  r.mark(*d, "tick", false, attrs);
  r.names().name_category(d->id, 3, "three");
  const Snapshot s = r.snapshot();
  CHECK(s.range_count() == 0);
  CHECK(s.event_count() == 1);
  CHECK(s.mark_count() == 1);
  const std::string json = render_trace(s);
  CHECK(json.find("{\"ph\":\"i\",\"s\":\"t\",\"name\":\"tick\",\"cat\":\"mine\",\"ts\":") !=
        std::string::npos);
  CHECK(json.find("\"args\":{\"category\":3,\"categoryName\":\"three\",\"payload\":-4,"
                  "\"color\":\"#112233\"}}") != std::string::npos);
  CHECK(json.find("\"ranges\":0,\"marks\":1,\"startEndRanges\":0,") != std::string::npos);
  // Not a range: no row in the table, a line of its own.
  CHECK(aggregate(s).empty());
  CHECK(format_summary(s, aggregate(s), "/t.json")
            .find("also in the trace: 1 marks, 0 start/end "
                  "ranges\n") != std::string::npos);
}

TEST_CASE("a start/end range ended on another thread is one b/e pair") {
  Recorder r(spilling_at_once(), 0);
  auto *d = r.names().create_domain("mine");
  const uint64_t id = r.start_range(*d, "request", false, with_category(7));
  CHECK(id != 0);
  const uint64_t other = r.start_range(r.names().global_domain(), "second", false, {});
  CHECK(other != id);
  std::thread([&] {
    r.end_range(*d, id);
    r.end_range(r.names().global_domain(), other);
  }).join();
  const Snapshot s = r.snapshot();
  REQUIRE(s.threads.size() == 2);
  CHECK(s.errors.none());
  CHECK(s.range_count() == 0);
  CHECK(s.async_started == 2);
  const std::string json = render_trace(s);
  const std::string main_tid = std::to_string(s.threads[0].tid);
  const std::string end_tid = std::to_string(s.threads[1].tid);
  CHECK(json.find("{\"ph\":\"b\",\"name\":\"request\",\"cat\":\"mine\",\"id\":\"0x" + [&] {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(id));
    return std::string(hex);
  }()) != std::string::npos);
  // The end carries the begin's name and domain (viewers pair by them) on the ending thread.
  const size_t e = json.find("{\"ph\":\"e\",\"name\":\"request\",\"cat\":\"mine\"");
  REQUIRE(e != std::string::npos);
  CHECK(json.find("\"tid\":" + end_tid + "}", e) < json.find('\n', e));
  CHECK(count_of(json, "\"ph\":\"b\"") == 2);
  CHECK(count_of(json, "\"ph\":\"e\"") == 2);
  CHECK(json.find("\"startEndRanges\":2,") != std::string::npos);
}

TEST_CASE("an end of an unknown range is counted, never recorded; open ranges are counted") {
  Recorder r(spilling_at_once(), 0);
  const auto &g = r.names().global_domain();
  r.end_range(g, 0);                      // never an id
  r.end_range(g, 0xdeadbeefdeadbeefULL);  // never handed out
  const uint64_t done = r.start_range(g, "done", false, {});
  r.end_range(g, done);
  r.end_range(g, done);  // a second end
  r.start_range(g, "open", false, {});
  const Snapshot s = r.snapshot();
  CHECK(s.errors.end_unknown_id == 3);
  CHECK(s.errors.start_open_at_exit == 1);
  CHECK_FALSE(s.errors.none());
  const std::string json = render_trace(s);
  // Only complete pairs are written, each end once.
  CHECK(count_of(json, "\"ph\":\"b\"") == 1);
  CHECK(count_of(json, "\"ph\":\"e\"") == 1);
  CHECK(json.find("\"open\"") == std::string::npos);
  CHECK(json.find("\"endUnknownId\":3,\"startOpenAtExit\":1}") != std::string::npos);
  CHECK(format_summary(s, aggregate(s), "/t.json")
            .find("protocol errors: 3 end of an unknown start/end range, 1 start/end range open "
                  "at exit\n") != std::string::npos);
}

TEST_CASE("marks and start/end halves go through the spill like ranges") {
  Recorder r(spilling_at_once(), 0);
  const auto &g = r.names().global_domain();
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3000; ++i) {
    ids.push_back(r.start_range(g, "long", false, {}));
    r.mark(g, "m", false, {});
    r.push(g, "x", false, {});
    r.pop(g);
  }
  for (uint64_t id : ids) r.end_range(g, id);
  REQUIRE(r.spill_file().size() > 0);
  Snapshot s = r.snapshot_for_report();
  CHECK_FALSE(s.threads[0].runs.empty());
  CHECK(s.range_count() == 3000);
  CHECK(s.mark_count() == 3000);
  CHECK(s.async_started == 3000);
  CHECK(s.errors.none());
  const std::string json = render_trace(s);
  CHECK(count_of(json, "\"ph\":\"X\"") == 3000);
  CHECK(count_of(json, "\"ph\":\"i\"") == 3000);
  CHECK(count_of(json, "\"ph\":\"b\"") == 3000);
  CHECK(count_of(json, "\"ph\":\"e\"") == 3000);
}

TEST_CASE("category names: per domain, shown beside the number; cat stays the domain") {
  Recorder r(spilling_at_once(), 0);
  auto *d = r.names().create_domain("ferrum-replay");
  r.names().name_category(d->id, 1, "decode batch 8");
  r.names().name_category(0, 1, "global one");
  r.push(*d, "decode batch 8", false, with_category(1));
  r.pop(*d);
  r.push(r.names().global_domain(), "app", false, with_category(1));
  r.pop(r.names().global_domain());
  r.push(r.names().global_domain(), "unnamed", false, with_category(2));
  r.pop(r.names().global_domain());
  const std::string json = render_trace(r.snapshot());
  CHECK(json.find("\"cat\":\"ferrum-replay\"") != std::string::npos);
  CHECK(json.find("\"args\":{\"category\":1,\"categoryName\":\"decode batch 8\",\"depth\":0}") !=
        std::string::npos);
  CHECK(json.find("\"args\":{\"category\":1,\"categoryName\":\"global one\",\"depth\":0}") !=
        std::string::npos);
  CHECK(json.find("\"args\":{\"category\":2,\"depth\":0}") != std::string::npos);
}

TEST_CASE("category names: every event gets its own, however many the trace mixes") {
  // The writer remembers recent lookups (trace_writer.cpp): hundreds of (domain, category)
  // pairs, named and not, in an order that keeps evicting them, must each show their own name.
  Recorder r(spilling_at_once(), 0);
  const nvtxDomainRegistration_st *domains[] = {
      &r.names().global_domain(), r.names().create_domain("a"), r.names().create_domain("b")};
  for (uint32_t c = 0; c <= 300; c += 3)
    for (const nvtxDomainRegistration_st *d : domains)
      r.names().name_category(d->id, c, "n" + std::to_string(c));
  r.names().name_category(domains[1]->id, 7, "only in a");
  std::string expected;
  for (uint32_t i = 0; i < 3000; ++i) {
    const uint32_t category = i * 37 % 301;
    const nvtxDomainRegistration_st &d = *domains[i % 3];
    r.push(d, "x", false, with_category(category));
    r.pop(d);
    expected += "\"category\":" + std::to_string(category);
    if (category % 3 == 0)
      expected += ",\"categoryName\":\"n" + std::to_string(category) + "\"";
    else if (category == 7 && i % 3 == 1)
      expected += ",\"categoryName\":\"only in a\"";
    expected += ",";
  }
  const std::string json = render_trace(r.snapshot());
  std::string got;
  for (size_t at = json.find("\"category\":"); at != std::string::npos;
       at = json.find("\"category\":", at + 1)) {
    const size_t end = json.find(",\"depth\"", at);
    REQUIRE(end != std::string::npos);
    got += json.substr(at, end - at) + ",";
  }
  CHECK(got == expected);
}

TEST_CASE("the process's name comes from its command line") {
  CHECK(command_display_name("/opt/bin/inference_server_main\0--port\0008000\0"s) ==
        "inference_server_main");
  CHECK(command_display_name("/usr/bin/python3.11\0/srv/app/serve.py\0--model\0x\0"s) ==
        "python3.11 serve.py");
  CHECK(command_display_name("python3\0-m\0vllm.entrypoints.api_server\0--port\0001\0"s) ==
        "python3 -m vllm.entrypoints.api_server");
  CHECK(command_display_name("python\0-u\0serve.py\0"s) == "python");
  CHECK(command_display_name("./a\0"s) == "a");
  CHECK(command_display_name("no-nul-at-end"s) == "no-nul-at-end");
  CHECK(command_display_name(""s).empty());
  CHECK(command_display_name("/ends/in/slash/\0"s).empty());
  // This test program's own name is longer than /proc/self/comm's 15 bytes.
  Recorder r(spilling_at_once(), 0);
  CHECK(r.snapshot().process_name == "recorder-unit-tests");
}

TEST_CASE("names stay within the names budget; domains stay themselves beyond it") {
  // A program that creates a new domain, string or thread name without end: each kept until
  // exit, so together bounded. Beyond: a thread or category name is not kept, a string is the
  // caller's to keep (nullptr), a domain is still a domain of its own (its own stacks).
  NameRegistry names(false, "");
  nvtxDomainRegistration_st *first = names.create_domain("domain 0");
  const nvtxStringRegistration_st *first_string = names.register_string("string 0");
  names.name_thread(1, "thread 0");
  names.name_category(0, 1, "category 1");
  const std::string long_name(kMaxNameBytes * 2, 'n');  // cut to kMaxNameBytes, and counted so
  size_t made = 0;
  for (; made < 100000; ++made) {
    names.name_thread(static_cast<uint32_t>(100 + made), std::to_string(made) + long_name);
    if (names.refused() != 0) break;
  }
  CHECK(names.refused() == 1);
  // At most the budget's worth of names, each counted with its entry.
  CHECK(made <= NameRegistry::kNamesBudget / (kMaxNameBytes + NameRegistry::kEntryOverhead));
  std::string thread_name;
  CHECK_FALSE(names.thread_name(static_cast<uint32_t>(100 + made), &thread_name));
  CHECK(names.thread_name(1, &thread_name));
  CHECK(thread_name == "thread 0");
  CHECK(names.thread_name(100, &thread_name));
  CHECK(thread_name.size() == kMaxNameBytes);
  // Domains beyond the budget: each its own handle and id, found again by name.
  nvtxDomainRegistration_st *a = names.create_domain("A" + long_name);
  nvtxDomainRegistration_st *b = names.create_domain("B" + long_name);
  CHECK((a != nullptr && b != nullptr && a != b && a->id != b->id));
  CHECK(names.create_domain("A" + long_name) == a);
  CHECK(names.create_domain("domain 0") == first);
  CHECK(names.domain_names()[b->id] == ("B" + long_name).substr(0, kMaxNameBytes));
  // A string beyond the budget is not the registry's: Recorder::register_string keeps it.
  CHECK(names.register_string("string 1" + long_name) == nullptr);
  CHECK(names.register_string("string 0") == first_string);
  names.name_category(0, 2, "category 2");
  CHECK(names.category_names().count({0, 2}) == 0);
  CHECK(names.category_names().at({0, 1}) == "category 1");
  CHECK(names.refused() == 2);
}

TEST_CASE("registered strings beyond the names budget keep their text") {
  // The shim registers a string per graph name: a graph renamed without end must still end
  // with its last name, so strings beyond the registry's budget live with the thread's names.
  Recorder r(Settings{}, 0);
  const std::string long_name(kMaxNameBytes, 's');
  std::vector<std::pair<const nvtxStringRegistration_st *, std::string>> handles;
  const size_t beyond =
      NameRegistry::kNamesBudget / (2 * kMaxNameBytes + NameRegistry::kEntryOverhead) + 1000;
  for (size_t i = 0; i < beyond; ++i) {
    std::string text = std::to_string(i) + long_name;
    text.resize(kMaxNameBytes);
    handles.emplace_back(r.register_string(text), text);
  }
  for (const auto &[handle, text] : handles) {
    REQUIRE(handle != nullptr);
    CHECK(std::string_view(handle->text, handle->size) == text);
    CHECK(handle->text[handle->size] == '\0');
  }
  CHECK(r.names().refused() == 0);
  // The same string registered again beyond the budget is the same handle, not another copy.
  std::string again = handles.back().second;
  CHECK(r.register_string(again) == handles.back().first);
}

TEST_CASE("category names stay bounded when a process names categories without end") {
  // The shim names one category per graph: re-instantiating graphs for a long time names
  // millions. The latest ones are kept, the oldest forgotten.
  NameRegistry names(false, "");
  const uint32_t n = NameRegistry::kMaxCategoryNames + 1000;
  for (uint32_t c = 1; c <= n; ++c) names.name_category(1, c, c % 2 ? "odd" : "even");
  names.name_category(1, n, "renamed");  // a new name for a kept category takes no new place
  const auto kept = names.category_names();
  CHECK(kept.size() == NameRegistry::kMaxCategoryNames);
  CHECK(kept.count({1, 1}) == 0);
  CHECK(kept.count({1, 1000}) == 0);
  CHECK(kept.at({1, 1001}) == "odd");
  CHECK(kept.at({1, n}) == "renamed");
}
