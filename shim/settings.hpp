// The user's FERRUM_REPLAY* settings, parsed once. Pure: no getenv, no output, so that the
// rules are unit-tested; the caller supplies the environment and prints the complaints.
#pragma once

#include <stddef.h>

#include "message_template.hpp"
#include "text_rules.hpp"

namespace ferrum {

enum class LogLevel : unsigned char { silent = 0, error = 1, info = 2, debug = 3 };

inline constexpr size_t kMaxDomainLength = 63;
inline constexpr char kDefaultDomain[] = "ferrum-replay";

// When a graph's call site is taken (FERRUM_REPLAY_SITE).
enum class SiteMode : unsigned char { instantiate, launch, off };

inline constexpr size_t kMaxPathLength = 1024;

struct Settings {
  bool enabled = true;                    // FERRUM_REPLAY=off|0 makes the shim a pass-through
  LogLevel log_level = LogLevel::silent;  // FERRUM_REPLAY_LOG
  char domain[kMaxDomainLength + 1] = "ferrum-replay";  // FERRUM_REPLAY_DOMAIN
  SiteMode site_mode = SiteMode::instantiate;           // FERRUM_REPLAY_SITE
  char site_skip[256] = "";              // FERRUM_REPLAY_SITE_SKIP: comma-separated frame prefixes
  bool content = false;                  // FERRUM_REPLAY_CONTENT: describe graphs by their kernels
  char names_path[kMaxPathLength] = "";  // FERRUM_REPLAY_NAMES: the names file
  MessageTemplate message_template;      // FERRUM_REPLAY_FORMAT, parsed
  char summary[kMaxPathLength] = "";     // FERRUM_REPLAY_SUMMARY: "", "stderr" or a path
};

// Looks a variable up (getenv in the shim, a table in tests); null when unset.
using EnvLookup = const char *(*)(const char *name, void *context);
// Receives one complete sentence per invalid setting; the default applies after it.
using ComplaintSink = void (*)(const char *sentence, void *context);

// Parses every FERRUM_REPLAY* variable. `settings` is filled in place (it is large).
void read_settings(Settings &settings, EnvLookup lookup, void *lookup_context,
                   ComplaintSink complain, void *complain_context);

const char *log_level_name(LogLevel level);

// A user value (a setting, a path, a name) as a message shows it (docs/text-rules.md, section
// 3): printable UTF-8 (control bytes, malformed sequences -> '?'), at most 200 bytes, cut at a
// character boundary with "..." appended — so that it can neither garble a terminal nor forge
// a second line. The message puts it in single quotes: "FERRUM_REPLAY_NAMES='%s' ...".
// The rule itself is common/text_rules.hpp's printable_quote; this is the shim's spelling of it.
inline constexpr size_t kMessageValueLimit = ferrum_common::kMessageLimit;
struct MessageValue {
  char text[ferrum_common::kQuotedSize];
};
MessageValue message_value(const char *value);
MessageValue message_value(const char *value, size_t length);

}  // namespace ferrum
