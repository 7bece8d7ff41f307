// FERRUM_RECORD_* parsing, including the one-line warning for a bad FERRUM_RECORD_REJECT.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "../../support/name_list.hpp"
#include "setting_names.hpp"
#include "settings.hpp"

using namespace ferrum_replay::recorder;

namespace {
using Env = std::map<std::string, std::string>;
const char *lookup(const char *name, void *context) {
  const Env &env = *static_cast<Env *>(context);
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}
Settings parse(Env env, std::vector<std::string> *warnings = nullptr) {
  return parse_settings(lookup, &env, warnings);
}
}  // namespace

TEST_CASE("defaults") {
  std::vector<std::string> w;
  const Settings s = parse({}, &w);
  CHECK(s.reject == RejectMode::none);
  CHECK_FALSE(s.reject_domain_only);
  CHECK(s.out_pattern == "ferrum-replay.%p.json");
  CHECK(s.table);
  CHECK(w.empty());
}

TEST_CASE("output and table") {
  CHECK(parse({{"FERRUM_RECORD_OUT", "/x/%p.json"}}).out_pattern == "/x/%p.json");
  CHECK(parse({{"FERRUM_RECORD_OUT", ""}}).out_pattern == "ferrum-replay.%p.json");
  CHECK_FALSE(parse({{"FERRUM_RECORD_TABLE", "0"}}).table);
  CHECK_FALSE(parse({{"FERRUM_RECORD_TABLE", "off"}}).table);
  CHECK(parse({{"FERRUM_RECORD_TABLE", "1"}}).table);
}

// Every 1/0 setting reads the same words (common/switch_word.hpp) and warns the same way.
TEST_CASE("every switch value: the valid ones silently, anything else with one quoted warning") {
  struct Switch {
    const char *name;
    bool Settings::*field;
    bool fallback;
    const char *otherwise;
  };
  for (const Switch sw :
       {Switch{"FERRUM_RECORD_TABLE", &Settings::table, true, "printing the table"},
        Switch{"FERRUM_RECORD_FORCE", &Settings::force, false,
               "not replacing files that are not ferrum-replay traces"}}) {
    CAPTURE(sw.name);
    CHECK(parse({}).*sw.field == sw.fallback);
    CHECK(parse({{sw.name, ""}}).*sw.field == sw.fallback);
    for (const char *off : {"0", "false", "No", "OFF", "fAlSe"}) {
      CAPTURE(off);
      std::vector<std::string> w;
      CHECK_FALSE(parse({{sw.name, off}}, &w).*sw.field);
      CHECK(w.empty());
    }
    for (const char *on : {"1", "true", "YES", "on", "True"}) {
      CAPTURE(on);
      std::vector<std::string> w;
      CHECK(parse({{sw.name, on}}, &w).*sw.field);
      CHECK(w.empty());
    }
    for (const char *bad : {"bogus", "2", " 0", "offf", "nein", "o", "yes "}) {
      CAPTURE(bad);
      std::vector<std::string> w;
      CHECK(parse({{sw.name, bad}}, &w).*sw.field == sw.fallback);
      REQUIRE(w.size() == 1);
      CHECK(w[0] == std::string("ferrum-replay recorder: ") + sw.name + "='" + bad +
                        "' is invalid (expected on or off); " + sw.otherwise + "\n");
    }
    // The value is quoted printable: it cannot add a line or garble a terminal.
    std::vector<std::string> w;
    parse({{sw.name, "x\n\x1b[2Jy"}}, &w);
    REQUIRE(w.size() == 1);
    CHECK(w[0] == std::string("ferrum-replay recorder: ") + sw.name +
                      "='x??[2Jy' is invalid (expected on or off); " + sw.otherwise + "\n");
  }
}

TEST_CASE("reject modes") {
  CHECK(parse({{"FERRUM_RECORD_REJECT", "all"}}).reject == RejectMode::all);
  CHECK(parse({{"FERRUM_RECORD_REJECT", "1"}}).reject == RejectMode::all);
  const Settings every = parse({{"FERRUM_RECORD_REJECT", "7"}});
  CHECK(every.reject == RejectMode::every_nth);
  CHECK(every.reject_every == 7);
  const Settings dom =
      parse({{"FERRUM_RECORD_REJECT", "all"}, {"FERRUM_RECORD_REJECT_DOMAIN", "global"}});
  CHECK(dom.reject_domain_only);
  CHECK(dom.reject_domain == "global");
  // A domain without a rejection to limit: one line, nothing rejected.
  std::vector<std::string> w;
  CHECK(parse({{"FERRUM_RECORD_REJECT_DOMAIN", "victim"}}, &w).reject == RejectMode::none);
  REQUIRE(w.size() == 1);
  CHECK(w[0] ==
        "ferrum-replay recorder: FERRUM_RECORD_REJECT_DOMAIN='victim' limits "
        "FERRUM_RECORD_REJECT, which is not set; rejecting nothing\n");
  // An invalid FERRUM_RECORD_REJECT has its own line, not this one as well.
  w.clear();
  parse({{"FERRUM_RECORD_REJECT", "x"}, {"FERRUM_RECORD_REJECT_DOMAIN", "victim"}}, &w);
  CHECK(w.size() == 1);
}

TEST_CASE("invalid reject value warns once and rejects nothing") {
  for (const char *bad : {"x", "0", "-3", "2x", " 5", "99999999999999999999999"}) {
    CAPTURE(bad);
    std::vector<std::string> w;
    const Settings s = parse({{"FERRUM_RECORD_REJECT", bad}}, &w);
    CHECK(s.reject == RejectMode::none);
    REQUIRE(w.size() == 1);
    CHECK(w[0] == std::string("ferrum-replay recorder: FERRUM_RECORD_REJECT='") + bad +
                      "' is invalid (expected all or a positive integer); not rejecting\n");
  }
  std::vector<std::string> w;
  CHECK(parse({{"FERRUM_RECORD_REJECT", ""}}, &w).reject == RejectMode::none);
  CHECK(w.empty());
}

TEST_CASE("parse_positive_u64") {
  uint64_t v = 0;
  CHECK(parse_positive_u64("18446744073709551615", &v));
  CHECK(v == UINT64_MAX);
  CHECK_FALSE(parse_positive_u64("18446744073709551616", &v));
  CHECK_FALSE(parse_positive_u64("", &v));
  CHECK_FALSE(parse_positive_u64("+1", &v));
}

TEST_CASE("FERRUM_RECORD_MEMORY: a byte count with K, M or G; anything else one warning, 24M") {
  CHECK(parse({}).memory == uint64_t{24} << 20);
  for (const char *zero : {"0", "00", "0K", "000M"}) {
    std::vector<std::string> warnings;
    CHECK_MESSAGE(parse({{"FERRUM_RECORD_MEMORY", zero}}, &warnings).memory == 0, zero);
    CHECK(warnings.empty());
  }
  CHECK(parse({{"FERRUM_RECORD_MEMORY", "05"}}).memory == 5);
  CHECK(parse({{"FERRUM_RECORD_MEMORY", "4096"}}).memory == 4096);
  CHECK(parse({{"FERRUM_RECORD_MEMORY", "512K"}}).memory == 512u * 1024);
  CHECK(parse({{"FERRUM_RECORD_MEMORY", "64m"}}).memory == uint64_t{64} << 20);
  CHECK(parse({{"FERRUM_RECORD_MEMORY", "2G"}}).memory == uint64_t{2} << 30);
  for (const char *bad :
       {"-1", "1.5M", "M", "12T", "17179869184G", "99999999999999999999", " 1M", "1MB", "00x"}) {
    std::vector<std::string> warnings;
    CHECK_MESSAGE(parse({{"FERRUM_RECORD_MEMORY", bad}}, &warnings).memory == uint64_t{24} << 20,
                  std::string(bad));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("FERRUM_RECORD_MEMORY='") != std::string::npos);
    CHECK(warnings[0].back() == '\n');
  }
}

TEST_CASE("a FERRUM_RECORD_* variable the recorder does not read is one sentence") {
  char sentence[640];
  const auto say = [&](const char *entry) {
    return ferrum_replay::common::unknown_setting_sentence(
               entry, kRecordSettingPrefix, kRecordSettingNames, kInternalRecordSettingNames,
               sentence, sizeof sentence)
               ? std::string(sentence)
               : std::string();
  };
  CHECK(say("FERRUM_RECORD_OUTPUT=/tmp/t.json") ==
        "FERRUM_RECORD_OUTPUT is not a setting of this ferrum-replay (did you mean "
        "FERRUM_RECORD_OUT?); ignored");
  CHECK(say("FERRUM_RECORD_MEMROY=1G").find("did you mean FERRUM_RECORD_MEMORY?") !=
        std::string::npos);
  // The wrapper's session marker is known, never suggested.
  CHECK(say("FERRUM_RECORD_SESSION=x").empty());
  CHECK(say("FERRUM_RECORD_SESSIONS=x").find("did you mean") == std::string::npos);
  for (const std::string &name : ferrum_replay::test::split_names(kRecordSettingNames))
    CHECK_MESSAGE(say((name + "=1").c_str()).empty(), name);
  for (const char *other : {"FERRUM_RECORDER_LIB=x", "FERRUM_REPLAY_X=1", "HOME=/root"})
    CHECK_MESSAGE(say(other).empty(), other);
}

TEST_CASE("parse_settings asks for no FERRUM_RECORD_* name the lists lack, and each it has") {
  struct Asked {
    std::vector<std::string> names;
  } asked;
  std::vector<std::string> w;
  (void)parse_settings(
      [](const char *name, void *self) -> const char * {
        static_cast<Asked *>(self)->names.emplace_back(name);
        return "1";  // every setting set: FERRUM_RECORD_REJECT_DOMAIN is read only then
      },
      &asked, &w);
  std::vector<std::string> known = ferrum_replay::test::split_names(kRecordSettingNames);
  CHECK(known.size() == 7);
  known.emplace_back(kInternalRecordSettingNames);
  for (const std::string &name : asked.names)
    if (name.rfind("FERRUM_RECORD_", 0) == 0)
      CHECK_MESSAGE(std::find(known.begin(), known.end(), name) != known.end(), name);
  for (const std::string &name : known)
    CHECK_MESSAGE(std::find(asked.names.begin(), asked.names.end(), name) != asked.names.end(),
                  name);
  // The recorder's pattern setting (common/setting_names.hpp: its %q{NAME} variables are the
  // user's own, never called unknown) is one of its settings.
  for (const std::string &name :
       ferrum_replay::test::split_names(ferrum_replay::common::kPatternSettingNames))
    if (name.rfind("FERRUM_RECORD_", 0) == 0)
      CHECK_MESSAGE(std::find(known.begin(), known.end(), name) != known.end(), name);
}
