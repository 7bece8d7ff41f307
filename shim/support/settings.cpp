#include "support/settings.hpp"

#include <stdio.h>
#include <string.h>

#include "switch_word.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

// Words in any case by the one rule of common/switch_word.hpp (ASCII only, whatever the locale).
bool equals_any(const char *value, const char *const *choices) {
  for (; *choices; ++choices)
    if (common::same_word(value, *choices)) return true;
  return false;
}

struct Reader {
  common::EnvLookup lookup;
  void *lookup_context;
  ComplaintSink complain;
  void *complain_context;

  // Null for unset or empty: an empty variable is how shells and containers "unset" things.
  const char *get(const char *name) const {
    const char *value = lookup(name, lookup_context);
    return (value && *value) ? value : nullptr;
  }

  void reject(const char *name, const char *value, const char *expected,
              const char *fallback) const {
    char sentence[640];
    snprintf(sentence, sizeof sentence, "%s='%s' is invalid (expected %s); using %s", name,
             message_value(value).text, expected, fallback);
    complain(sentence, complain_context);
  }
};

void read_log_level(const Reader &reader, Settings &settings) {
  const char *value = reader.get("FERRUM_REPLAY_LOG");
  if (!value) return;
  static const char *const kSilent[] = {"silent", "off", "none", "0", nullptr};
  static const char *const kError[] = {"error", "1", nullptr};
  static const char *const kInfo[] = {"info", "2", nullptr};
  static const char *const kDebug[] = {"debug", "3", nullptr};
  if (equals_any(value, kSilent)) {
    settings.log_level = LogLevel::silent;
  } else if (equals_any(value, kError)) {
    settings.log_level = LogLevel::error;
  } else if (equals_any(value, kInfo)) {
    settings.log_level = LogLevel::info;
  } else if (equals_any(value, kDebug)) {
    settings.log_level = LogLevel::debug;
  } else {
    reader.reject("FERRUM_REPLAY_LOG", value, "silent, error, info or debug", "silent");
  }
}

void read_domain(const Reader &reader, Settings &settings) {
  const char *value = reader.get("FERRUM_REPLAY_DOMAIN");
  const char *problem = nullptr;
  const char *name = common::domain_name(value, &problem);  // docs/text-rules.md section 4
  if (problem) reader.reject("FERRUM_REPLAY_DOMAIN", value, problem, name);
  memcpy(settings.domain, name, strlen(name) + 1);
}

bool read_switch(const Reader &reader, const char *name, bool fallback) {
  const char *value = reader.get(name);
  if (!value) return fallback;
  switch (common::switch_word(value)) {  // the words of every switch, common/switch_word.hpp
    case common::Switch::on:
      return true;
    case common::Switch::off:
      return false;
    case common::Switch::invalid:
      break;
  }
  reader.reject(name, value, "on or off", fallback ? "on" : "off");
  return fallback;
}

void read_site_mode(const Reader &reader, Settings &settings) {
  const char *value = reader.get("FERRUM_REPLAY_SITE");
  if (!value) return;
  if (common::same_word(value, "instantiate")) {
    settings.site_mode = SiteMode::instantiate;
  } else if (common::same_word(value, "launch")) {
    settings.site_mode = SiteMode::launch;
  } else if (common::switch_word(value) == common::Switch::off) {  // the switches' off words
    settings.site_mode = SiteMode::off;
  } else {
    reader.reject("FERRUM_REPLAY_SITE", value, "instantiate, launch or off", "instantiate");
  }
}

// A value copied verbatim into a fixed buffer; too long is an error, not a truncation.
void read_text(const Reader &reader, const char *name, char *out, size_t out_size,
               const char *what) {
  const char *value = reader.get(name);
  if (!value) return;
  size_t length = strlen(value);
  if (length >= out_size) {
    reader.reject(name, value, what, "none");
    return;
  }
  memcpy(out, value, length + 1);
}

void read_format(const Reader &reader, Settings &settings) {
  const char *value = reader.get("FERRUM_REPLAY_FORMAT");
  char error[160];
  if (value && parse_message_template(value, settings.message_template, error, sizeof error))
    return;
  if (value) {
    char expected[200];
    snprintf(expected, sizeof expected, "a template such as '{name} #{ordinal}': %s", error);
    reader.reject("FERRUM_REPLAY_FORMAT", value, expected, kDefaultMessageTemplate);
  }
  parse_message_template(kDefaultMessageTemplate, settings.message_template, error, sizeof error);
}

void read_gpu_time_every(const Reader &reader, Settings &settings) {
  const char *value = reader.get("FERRUM_REPLAY_GPU_TIME_EVERY");
  if (!value) return;
  unsigned long long every = 0;
  const char *p = value;
  for (; *p >= '0' && *p <= '9' && every <= kMaxGpuTimeEvery; ++p) every = every * 10 + (*p - '0');
  if (*p || every < 1 || every > kMaxGpuTimeEvery) {
    reader.reject("FERRUM_REPLAY_GPU_TIME_EVERY", value, "a whole number from 1 to 1000000", "1");
    return;
  }
  settings.gpu_time_every = static_cast<unsigned>(every);
}

}  // namespace

// One home for the names (settings.hpp).
const char kSettingNames[] =
    "FERRUM_REPLAY FERRUM_REPLAY_LOG FERRUM_REPLAY_DOMAIN FERRUM_REPLAY_SITE "
    "FERRUM_REPLAY_SITE_SKIP FERRUM_REPLAY_CONTENT FERRUM_REPLAY_NAMES FERRUM_REPLAY_FORMAT "
    "FERRUM_REPLAY_SUMMARY FERRUM_REPLAY_RUNNING_DIR FERRUM_REPLAY_GPU_TIME "
    "FERRUM_REPLAY_GPU_TIME_EVERY "
    // The wrapper's: where the libraries are, whether to build them, its helper's Python.
    "FERRUM_REPLAY_LIBDIR FERRUM_REPLAY_BUILD FERRUM_REPLAY_PYTHON";
// The pid the wrapper hands its helper.
const char kInternalSettingNames[] = "FERRUM_REPLAY_PID";

void read_settings(Settings &settings, common::EnvLookup lookup, void *lookup_context,
                   ComplaintSink complain, void *complain_context) {
  Reader reader{lookup, lookup_context, complain, complain_context};
  settings = Settings{};
  settings.enabled = read_switch(reader, "FERRUM_REPLAY", true);
  read_log_level(reader, settings);
  if (!settings.enabled) {
    // Off is a pure pass-through: no other setting applies, so none is read or complained
    // about (a container that preloads the shim everywhere and turns it off printed a line
    // per bad setting in every process). The domain and the template stay valid all the same.
    const char *name = common::domain_name(nullptr, nullptr);  // the default
    memcpy(settings.domain, name, strlen(name) + 1);
    char error[160];
    parse_message_template(kDefaultMessageTemplate, settings.message_template, error, sizeof error);
    return;
  }
  read_domain(reader, settings);
  read_site_mode(reader, settings);
  read_text(reader, "FERRUM_REPLAY_SITE_SKIP", settings.site_skip, sizeof settings.site_skip,
            "a comma-separated list shorter than 256 bytes");
  settings.content = read_switch(reader, "FERRUM_REPLAY_CONTENT", false);
  read_text(reader, "FERRUM_REPLAY_NAMES", settings.names_path, sizeof settings.names_path,
            "a path shorter than 1024 bytes");
  read_format(reader, settings);
  read_text(reader, "FERRUM_REPLAY_SUMMARY", settings.summary, sizeof settings.summary,
            "stderr or a path shorter than 1024 bytes");
  read_text(reader, "FERRUM_REPLAY_RUNNING_DIR", settings.running_dir, sizeof settings.running_dir,
            "a directory shorter than 1024 bytes");
  // The wrapper's, never the user's: taken silently (a long TMPDIR made every process complain
  // of a setting nobody set: review BB4); one no path can be is left out.
  if (const char *session = reader.get("FERRUM_RECORD_SESSION");
      session && strlen(session) < sizeof settings.session)
    memcpy(settings.session, session, strlen(session) + 1);
  settings.gpu_time = read_switch(reader, "FERRUM_REPLAY_GPU_TIME", false);
  read_gpu_time_every(reader, settings);
}

}  // namespace ferrum_replay::shim
