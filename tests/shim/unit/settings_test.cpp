// FERRUM_REPLAY* parsing: what a user who sets a variable gets, and what is said when the
// value is wrong (one sentence, then the default).
#include <doctest/doctest.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "../../support/name_list.hpp"
#include "setting_names.hpp"
#include "startup_env.hpp"
#include "support/settings.hpp"
#include "text_rules.hpp"

namespace {

struct Environment {
  std::map<std::string, std::string> values;
  std::vector<std::string> complaints;

  ferrum_replay::shim::Settings read() {
    ferrum_replay::shim::Settings settings;
    ferrum_replay::shim::read_settings(
        settings,
        [](const char *name, void *self) -> const char * {
          auto &values = static_cast<Environment *>(self)->values;
          auto found = values.find(name);
          return found == values.end() ? nullptr : found->second.c_str();
        },
        this,
        [](const char *sentence, void *self) {
          static_cast<Environment *>(self)->complaints.emplace_back(sentence);
        },
        this);
    return settings;
  }
};

}  // namespace

TEST_CASE("defaults: on, silent, domain ferrum-replay, nothing said") {
  Environment env;
  ferrum_replay::shim::Settings settings = env.read();
  CHECK(settings.enabled);
  CHECK(settings.log_level == ferrum_replay::shim::LogLevel::silent);
  CHECK(std::string(settings.domain) == "ferrum-replay");
  CHECK(env.complaints.empty());
}

TEST_CASE("FERRUM_REPLAY switches the shim off with off, 0, false or no, any case") {
  for (const char *off : {"off", "0", "false", "no", "OFF", "False"}) {
    Environment env;
    env.values["FERRUM_REPLAY"] = off;
    CHECK_MESSAGE(!env.read().enabled, off);
    CHECK(env.complaints.empty());
  }
  for (const char *on : {"on", "1", "true", "yes", "ON"}) {
    Environment env;
    env.values["FERRUM_REPLAY"] = on;
    CHECK_MESSAGE(env.read().enabled, on);
  }
}

TEST_CASE("off is a pass-through: the other settings are not read, nor complained about") {
  // A container that preloads the shim everywhere and switches it off printed a line per bad
  // setting in every process.
  Environment env;
  env.values["FERRUM_REPLAY"] = "off";
  env.values["FERRUM_REPLAY_GPU_TIME"] = "maybe";
  env.values["FERRUM_REPLAY_FORMAT"] = "{x";
  env.values["FERRUM_REPLAY_DOMAIN"] = "MPI";
  env.values["FERRUM_REPLAY_LOG"] = "loud";  // the one read: it says whether to say "off"
  ferrum_replay::shim::Settings settings = env.read();
  CHECK(!settings.enabled);
  CHECK(!settings.gpu_time);
  CHECK(std::string(settings.domain) == "ferrum-replay");  // unread, still a valid name
  REQUIRE(env.complaints.size() == 1);
  CHECK(env.complaints[0].find("FERRUM_REPLAY_LOG") != std::string::npos);
}

TEST_CASE("an empty variable counts as unset") {
  Environment env;
  env.values["FERRUM_REPLAY"] = "";
  env.values["FERRUM_REPLAY_DOMAIN"] = "";
  ferrum_replay::shim::Settings settings = env.read();
  CHECK(settings.enabled);
  CHECK(std::string(settings.domain) == "ferrum-replay");
  CHECK(env.complaints.empty());
}

TEST_CASE("an invalid FERRUM_REPLAY is one sentence naming variable, value and fallback") {
  Environment env;
  env.values["FERRUM_REPLAY"] = "maybe";
  CHECK(env.read().enabled);
  REQUIRE(env.complaints.size() == 1);
  CHECK(env.complaints[0] == "FERRUM_REPLAY='maybe' is invalid (expected on or off); using on");
}

TEST_CASE("log levels by name or number; an unknown one stays silent and is reported") {
  const std::pair<const char *, ferrum_replay::shim::LogLevel> cases[] = {
      {"error", ferrum_replay::shim::LogLevel::error},
      {"info", ferrum_replay::shim::LogLevel::info},
      {"debug", ferrum_replay::shim::LogLevel::debug},
      {"3", ferrum_replay::shim::LogLevel::debug},
      {"off", ferrum_replay::shim::LogLevel::silent},
      {"silent", ferrum_replay::shim::LogLevel::silent}};
  for (auto [text, level] : cases) {
    Environment env;
    env.values["FERRUM_REPLAY_LOG"] = text;
    CHECK_MESSAGE(env.read().log_level == level, text);
  }
  Environment env;
  env.values["FERRUM_REPLAY_LOG"] = "verbose";
  CHECK(env.read().log_level == ferrum_replay::shim::LogLevel::silent);
  REQUIRE(env.complaints.size() == 1);
  CHECK(env.complaints[0].find("FERRUM_REPLAY_LOG='verbose'") == 0);
}

TEST_CASE("domain: any printable name up to 63 bytes, UTF-8 included") {
  Environment env;
  env.values["FERRUM_REPLAY_DOMAIN"] = "décodeur graphs";
  CHECK(std::string(env.read().domain) == "décodeur graphs");
  CHECK(env.complaints.empty());
}

TEST_CASE("domain: too long, control bytes, MPI or global fall back to the default with one line") {
  for (std::string bad : {std::string(64, 'x'), std::string("tab\there"), std::string("MPI"),
                          std::string("global")}) {
    Environment env;
    env.values["FERRUM_REPLAY_DOMAIN"] = bad;
    CHECK(std::string(env.read().domain) == "ferrum-replay");
    REQUIRE(env.complaints.size() == 1);
    // The quoted value never carries a control byte.
    for (char c : env.complaints[0]) CHECK(static_cast<unsigned char>(c) >= 0x20);
  }
}

TEST_CASE("every echoed value: printable, quoted, cut at 200 bytes on a character boundary") {
  // docs/text-rules.md, section 3, as the shim's messages apply it.
  CHECK(std::string(ferrum_replay::shim::message_value("plain").text) == "plain");
  CHECK(std::string(ferrum_replay::shim::message_value("a\nb\x1b[31m\x7f").text) == "a?b?[31m?");
  CHECK(std::string(ferrum_replay::shim::message_value(std::string(200, 'b').c_str()).text) ==
        std::string(200, 'b'));
  CHECK(std::string(ferrum_replay::shim::message_value(std::string(201, 'b').c_str()).text) ==
        std::string(200, 'b') + "...");
  std::string accents = "a";
  for (int i = 0; i < 150; ++i) accents += "\xc3\xa9";  // 2 bytes each: 'a' + 99 fit in 200
  std::string expected = "a";
  for (int i = 0; i < 99; ++i) expected += "\xc3\xa9";
  CHECK(std::string(ferrum_replay::shim::message_value(accents.c_str()).text) == expected + "...");
  // Settings that are echoed when refused: the same rule, never a second line.
  for (const char *name :
       {"FERRUM_REPLAY_NAMES", "FERRUM_REPLAY_SUMMARY", "FERRUM_REPLAY_RUNNING_DIR",
        "FERRUM_REPLAY_LOG", "FERRUM_REPLAY_SITE_SKIP", "FERRUM_REPLAY_FORMAT"}) {
    Environment env;
    env.values[name] = "x\n\x1b[32mferrum-replay: all good" + std::string(2000, 'y');
    env.read();
    REQUIRE_MESSAGE(env.complaints.size() == 1, name);
    const std::string &line = env.complaints[0];
    CHECK(line.find(std::string(name) + "='x??[32mferrum-replay: all good" +
                    std::string(200 - 30, 'y') + "...' is invalid") == 0);
    for (char c : line) CHECK(static_cast<unsigned char>(c) >= 0x20);
  }
}

// F67: the settings' environment is the one the process started with (common/startup_env.hpp).
TEST_CASE("settings come from the start-up environment, not from setenv or clearenv later") {
  // FERRUM_TEST_RANK=3 is in the environment meson starts this test with.
  REQUIRE(ferrum_replay::common::startup_env("FERRUM_TEST_RANK") != nullptr);
  CHECK(std::string(ferrum_replay::common::startup_env("FERRUM_TEST_RANK")) == "3");
  setenv("FERRUM_TEST_RANK", "9", 1);
  setenv("FERRUM_TEST_SET_LATER", "1", 1);
  CHECK(std::string(ferrum_replay::common::startup_env("FERRUM_TEST_RANK")) == "3");
  CHECK(ferrum_replay::common::startup_env("FERRUM_TEST_SET_LATER") == nullptr);
  unsetenv("FERRUM_TEST_RANK");
  CHECK(std::string(ferrum_replay::common::startup_env("FERRUM_TEST_RANK")) == "3");
  setenv("FERRUM_TEST_RANK", "3", 1);
  unsetenv("FERRUM_TEST_SET_LATER");
}

TEST_CASE("the start-up environment's parsing: names whole, an area rewritten is refused") {
  using ferrum_replay::common::startup_env_lookup;
  using ferrum_replay::common::startup_env_plausible;
  static const char kArea[] = "A=1\0AB=2\0EMPTY=\0C=x=y";  // the literal's NUL ends the area
  const unsigned long size = sizeof kArea;
  CHECK(startup_env_plausible(kArea, size));
  CHECK(std::string(startup_env_lookup(kArea, size, "A")) == "1");
  CHECK(std::string(startup_env_lookup(kArea, size, "AB")) == "2");
  CHECK(std::string(startup_env_lookup(kArea, size, "EMPTY")).empty());
  CHECK(std::string(startup_env_lookup(kArea, size, "C")) == "x=y");
  CHECK(startup_env_lookup(kArea, size, "B") == nullptr);
  CHECK(startup_env_lookup(kArea, size, "") == nullptr);
  CHECK(startup_env_lookup(kArea, size, "A=1") == nullptr);
  CHECK(startup_env_plausible("", 0));  // an empty environment
  // A process title written over the area (setproctitle): NULs, text without '='.
  static const char kTitle[] = "ray::worker\0\0\0";
  CHECK_FALSE(startup_env_plausible(kTitle, sizeof kTitle));
  static const char kZeros[8] = {};
  CHECK_FALSE(startup_env_plausible(kZeros, sizeof kZeros));
  CHECK_FALSE(startup_env_plausible("A=1", 3));  // no final NUL
}

namespace {

// What the shim says of one environment entry: its line, or nothing.
std::vector<std::string> name_complaints(const char *entry) {
  char sentence[640];
  if (!ferrum_replay::common::unknown_setting_sentence(
          entry, ferrum_replay::shim::kSettingPrefix, ferrum_replay::shim::kSettingNames,
          ferrum_replay::shim::kInternalSettingNames, sentence, sizeof sentence))
    return {};
  return {sentence};
}

// The name suggested for `entry`'s, or "" for none.
std::string suggested(const char *entry) {
  const std::vector<std::string> said = name_complaints(entry);
  REQUIRE(said.size() == 1);
  const size_t at = said[0].find("did you mean ");
  if (at == std::string::npos) return "";
  const size_t from = at + 13;
  return said[0].substr(from, said[0].find('?', from) - from);
}

}  // namespace

TEST_CASE("a FERRUM_REPLAY* variable nothing reads is one sentence, naming the closest one") {
  auto said = name_complaints("FERRUM_REPLAY_SUMARY=/tmp/s.txt");
  REQUIRE(said.size() == 1);
  CHECK(said[0] ==
        "FERRUM_REPLAY_SUMARY is not a setting of this ferrum-replay (did you mean "
        "FERRUM_REPLAY_SUMMARY?); ignored");
  said = name_complaints("FERRUM_REPLAY_VERBOSE=1");
  REQUIRE(said.size() == 1);
  CHECK(said[0] ==
        "FERRUM_REPLAY_VERBOSE is not a setting of this ferrum-replay (docs/settings.md lists "
        "them); ignored");
  // Misspelt, shortened, lengthened, the underscore after the prefix lost.
  CHECK(suggested("FERRUM_REPLAY_GPU_TIMES=on") == "FERRUM_REPLAY_GPU_TIME");
  CHECK(suggested("FERRUM_REPLAY_DOMIAN=x") == "FERRUM_REPLAY_DOMAIN");
  CHECK(suggested("FERRUM_REPLAY_LOGS=info") == "FERRUM_REPLAY_LOG");
  CHECK(suggested("FERRUM_REPLAY_GPU=on") == "FERRUM_REPLAY_GPU_TIME");
  CHECK(suggested("FERRUM_REPLAY_SUMMARY_FILE=x") == "FERRUM_REPLAY_SUMMARY");
  CHECK(suggested("FERRUM_REPLAYSUMMARY=x") == "FERRUM_REPLAY_SUMMARY");
  CHECK(suggested("FERRUM_REPLAY_LIB=/opt") == "FERRUM_REPLAY_LIBDIR");
  // Short names are not near whatever is two edits away (no PID for DIR, no SITE for TIME), and
  // the wrapper's internal FERRUM_REPLAY_PID is never suggested.
  for (const char *far : {"FERRUM_REPLAY_DIR=x", "FERRUM_REPLAY_TIME=x", "FERRUM_REPLAY_ON=1",
                          "FERRUM_REPLAY_PIDS=1", "FERRUM_REPLAY_=1"})
    CHECK_MESSAGE(suggested(far) == "", far);
  // A name no terminal should print as it is: quoted by the one rule for values.
  said = name_complaints("FERRUM_REPLAY_\x1b[2J=1");
  REQUIRE(said.size() == 1);
  CHECK(said[0].find('\x1b') == std::string::npos);
  // A name far longer than any setting: cut at 200 bytes, no suggestion, no overrun.
  const std::string huge = "FERRUM_REPLAY_" + std::string(5000, 'X') + "=1";
  said = name_complaints(huge.c_str());
  REQUIRE(said.size() == 1);
  CHECK(said[0].find("did you mean") == std::string::npos);
  CHECK(said[0].size() < 300);
}

TEST_CASE("a variable a pattern names (%q{NAME}) is told apart by the pattern rule itself") {
  // The variables the pattern reads, as the rule finds them, in order.
  const auto variables = [](const char *pattern) {
    std::vector<std::string> found;
    ferrum_replay::common::each_pattern_variable(
        pattern,
        [](const char *name, size_t length, void *context) {
          static_cast<std::vector<std::string> *>(context)->emplace_back(name, length);
        },
        &found);
    return found;
  };
  const auto reads = [&](const char *pattern, const std::string &name) {
    const auto found = variables(pattern);
    return std::find(found.begin(), found.end(), name) != found.end();
  };
  CHECK(reads("out/%q{FERRUM_REPLAY_RUN}.txt", "FERRUM_REPLAY_RUN"));
  CHECK(reads("%q{A}%q{FERRUM_REPLAY_RUN}", "FERRUM_REPLAY_RUN"));
  CHECK(reads("%%%q{FERRUM_REPLAY_RUN}", "FERRUM_REPLAY_RUN"));  // %% then %q{...}
  CHECK(reads("%p/%h/%q{X}/", "X"));
  // Not a longer or shorter name, not one %% makes literal, not a %q{ the rule keeps as text.
  CHECK_FALSE(reads("out/%q{FERRUM_REPLAY_RUN}.txt", "FERRUM_REPLAY_RU"));
  CHECK_FALSE(reads("out/%q{FERRUM_REPLAY_RUN}.txt", "FERRUM_REPLAY_RUNS"));
  CHECK_FALSE(reads("%%q{FERRUM_REPLAY_RUN}", "FERRUM_REPLAY_RUN"));
  CHECK_FALSE(reads("%q{FERRUM_REPLAY_RUN", "FERRUM_REPLAY_RUN"));
  CHECK_FALSE(reads("%q{FERRUM-REPLAY}", "FERRUM"));
  CHECK_FALSE(reads("FERRUM_REPLAY_RUN", "FERRUM_REPLAY_RUN"));
  CHECK_FALSE(reads(nullptr, "X"));
  // All of them, in order.
  CHECK(variables("%q{A}/%%q{B}/%q{C}%q{D}%q{A}") == std::vector<std::string>{"A", "C", "D", "A"});
  // The pattern settings are settings: the shim's are among the names it reads.
  for (const std::string &name :
       ferrum_replay::test::split_names(ferrum_replay::common::kPatternSettingNames)) {
    if (name.rfind("FERRUM_REPLAY", 0) != 0) continue;  // FERRUM_RECORD_OUT: recorder unit
    const auto known = ferrum_replay::test::split_names(ferrum_replay::shim::kSettingNames);
    CHECK_MESSAGE(std::find(known.begin(), known.end(), name) != known.end(), name);
  }
}

TEST_CASE("known names, empty values, other prefixes and non-entries are not complained of") {
  for (const std::string &known :
       ferrum_replay::test::split_names(ferrum_replay::shim::kSettingNames)) {
    CHECK_MESSAGE(name_complaints((known + "=x").c_str()).empty(), known);
    CHECK_MESSAGE(name_complaints((known + "=").c_str()).empty(), known);
    CHECK_MESSAGE(name_complaints(known.c_str()).empty(), known);  // no '=' at all
  }
  for (const char *other :
       {"FERRUM_REPLAY_PID=1", "FERRUM_RECORD_OUT=x", "FERRUM_SHIM=x", "PATH=/bin", "FERRUM_REPL=1",
        "ferrum_replay_summary=x", "=FERRUM_REPLAY_X", ""})
    CHECK_MESSAGE(name_complaints(other).empty(), other);
}

TEST_CASE("read_settings asks for no FERRUM_REPLAY* name the lists lack, and each it has") {
  struct Asked {
    std::vector<std::string> names;
  } asked;
  ferrum_replay::shim::Settings settings;
  ferrum_replay::shim::read_settings(
      settings,
      [](const char *name, void *self) -> const char * {
        static_cast<Asked *>(self)->names.emplace_back(name);
        return nullptr;
      },
      &asked, [](const char *, void *) {}, nullptr);
  const std::vector<std::string> known =
      ferrum_replay::test::split_names(ferrum_replay::shim::kSettingNames);
  CHECK(known.size() == 15);
  for (const std::string &name : asked.names) {
    if (name.rfind("FERRUM_REPLAY", 0) != 0) continue;  // FERRUM_RECORD_SESSION: the recorder's
    CHECK_MESSAGE(std::find(known.begin(), known.end(), name) != known.end(), name);
  }
  for (const std::string &name : known) {
    const bool wrapper = name == "FERRUM_REPLAY_LIBDIR" || name == "FERRUM_REPLAY_BUILD" ||
                         name == "FERRUM_REPLAY_PYTHON";
    CHECK_MESSAGE(
        wrapper == (std::find(asked.names.begin(), asked.names.end(), name) == asked.names.end()),
        name);
  }
}
