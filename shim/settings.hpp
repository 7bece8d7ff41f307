// The user's FERRUM_REPLAY* settings, parsed once. Pure: no getenv, no output, so that the
// rules are unit-tested; the caller supplies the environment and prints the complaints.
#pragma once

#include <stddef.h>

namespace ferrum {

enum class LogLevel : unsigned char { silent = 0, error = 1, info = 2, debug = 3 };

inline constexpr size_t kMaxDomainLength = 63;
inline constexpr char kDefaultDomain[] = "ferrum-replay";

struct Settings {
  bool enabled = true;                    // FERRUM_REPLAY=off|0 makes the shim a pass-through
  LogLevel log_level = LogLevel::silent;  // FERRUM_REPLAY_LOG
  char domain[kMaxDomainLength + 1] = "ferrum-replay";  // FERRUM_REPLAY_DOMAIN
};

// Looks a variable up (getenv in the shim, a table in tests); null when unset.
using EnvLookup = const char *(*)(const char *name, void *context);
// Receives one complete sentence per invalid setting; the default applies after it.
using ComplaintSink = void (*)(const char *sentence, void *context);

Settings read_settings(EnvLookup lookup, void *lookup_context, ComplaintSink complain,
                       void *complain_context);

const char *log_level_name(LogLevel level);

}  // namespace ferrum
