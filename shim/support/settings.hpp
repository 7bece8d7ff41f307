// The user's FERRUM_REPLAY* settings, parsed once. Pure: no getenv, no output, so that the
// rules are unit-tested; the caller supplies the environment and prints the complaints.
#pragma once

#include <stddef.h>

#include "naming/message_template.hpp"
#include "support/log.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {

// When a graph's call site is taken (FERRUM_REPLAY_SITE).
enum class SiteMode : unsigned char { instantiate, launch, off };

inline constexpr size_t kMaxPathLength = 1024;

struct Settings {
  bool enabled = true;                    // FERRUM_REPLAY=off|0 makes the shim a pass-through
  LogLevel log_level = LogLevel::silent;  // FERRUM_REPLAY_LOG
  char domain[common::kMaxDomainLength + 1] =
      {};  // FERRUM_REPLAY_DOMAIN; common::kDefaultDomainName when unset (read_settings)
  SiteMode site_mode = SiteMode::instantiate;  // FERRUM_REPLAY_SITE
  char site_skip[256] = "";               // FERRUM_REPLAY_SITE_SKIP: comma-separated frame prefixes
  bool content = false;                   // FERRUM_REPLAY_CONTENT: describe graphs by their kernels
  char names_path[kMaxPathLength] = "";   // FERRUM_REPLAY_NAMES: the names file
  MessageTemplate message_template;       // FERRUM_REPLAY_FORMAT, parsed
  char summary[kMaxPathLength] = "";      // FERRUM_REPLAY_SUMMARY: "", "stderr" or a path
  char running_dir[kMaxPathLength] = "";  // FERRUM_REPLAY_RUNNING_DIR: running markers' directory
  // FERRUM_RECORD_SESSION: the session stamp `ferrum-replay record` makes before the program
  // starts (the recorder reads it too): a summary written since by another process is this
  // run's, kept beside, never replaced (common::run_start_realtime_ns).
  char session[4096] = "";
  bool gpu_time = false;        // FERRUM_REPLAY_GPU_TIME: GPU time per replay
  unsigned gpu_time_every = 1;  // FERRUM_REPLAY_GPU_TIME_EVERY: time every Nth replay
};

// FERRUM_REPLAY_GPU_TIME_EVERY's largest value.
inline constexpr unsigned kMaxGpuTimeEvery = 1000000;

// Receives one complete sentence per invalid setting; the default applies after it.
using ComplaintSink = void (*)(const char *sentence, void *context);

// Parses every FERRUM_REPLAY* variable, and FERRUM_RECORD_SESSION. `settings` is filled in place
// (it is large).
void read_settings(Settings &settings, common::EnvLookup lookup, void *lookup_context,
                   ComplaintSink complain, void *complain_context);

// The shim's names for common::say_unknown_settings (common/setting_names.hpp, F257): every
// FERRUM_REPLAY* variable is one of kSettingNames — read_settings' own (unit tests hold the list
// to what it asks for) and the wrapper's (docs/settings.md) — or kInternalSettingNames, set by
// the wrapper and never suggested.
inline constexpr char kSettingPrefix[] = "FERRUM_REPLAY";
extern const char kSettingNames[];
extern const char kInternalSettingNames[];

}  // namespace ferrum_replay::shim
