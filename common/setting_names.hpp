// One rule for a variable of ours that nothing reads (F257): FERRUM_REPLAY_SUMARY, a misspelt
// FERRUM_REPLAY_SUMMARY, silently gave no summary. The shim (FERRUM_REPLAY*) and the recorder
// (FERRUM_RECORD_*) each say so in one line per variable, as for a value they cannot take,
// naming the known name it is closest to where one is close.
#pragma once

#include <stddef.h>

#include "text_rules.hpp"

namespace ferrum_replay::common {

// A list of names: one string, the names separated by single spaces (no table of pointers for
// the loader to relocate at every start of the shim).
//
// When `entry` (`NAME=value`, or a bare name) has a name that begins with `prefix` and is none of
// `known` or `internal` (names set by our wrapper that a user should not set: never suggested),
// writes the sentence saying so into `out` (terminated; cut where it does not fit) and returns
// true; else returns false. The name is shown by the rule for a value in a message
// (printable_quote). The suggestion, where there is one: the known name fewest edits away — at
// most two, and at most a third of the name's length after `prefix` (no PID for DIR) — else the
// longest known name the name begins with (FERRUM_RECORD_OUTPUT: FERRUM_RECORD_OUT), else the
// shortest one beginning with the name (FERRUM_REPLAY_GPU: FERRUM_REPLAY_GPU_TIME).
bool unknown_setting_sentence(const char *entry, const char *prefix, const char *known,
                              const char *internal, char *out, size_t out_size);

// Whether unknown_setting_sentence would say something of `entry` (no sentence, no suggestion:
// the variables past the lines' cap are only counted).
bool unknown_setting(const char *entry, const char *prefix, const char *known,
                     const char *internal);

// The settings, of either tool, whose values are output patterns (docs/text-rules.md section 1):
// a `%q{NAME}` in one may read a variable of the user's own that begins with our prefix.
inline constexpr char kPatternSettingNames[] =
    "FERRUM_REPLAY_SUMMARY FERRUM_REPLAY_RUNNING_DIR FERRUM_RECORD_OUT";
// The longest pattern value looked at: the longest any reader takes (the recorder's
// FERRUM_RECORD_OUT, up to an expansion's length; the shim refuses its paths from 1024 bytes,
// saying so, and the names such a refused value reads are then not called unknown either).
inline constexpr size_t kMostPatternLength = kMaxExpandedPath;
// The variables remembered: distinct names beginning with FERRUM_ (no other name can be called
// unknown), all patterns together, in a table on the stack of the thread that makes the
// program's first graph call — a bound, not a need. Only the first value of a setting the
// environment holds twice is walked: the one every reader takes (startup_env.hpp).
inline constexpr unsigned kMostPatternVariables = 32;

// The lines a process says about its start-up environment (startup_env.hpp; none where it
// cannot be read): one `say` per unknown variable as above, at most kMostUnknownSettingLines,
// then one counting the rest. A variable that a `%q{NAME}` of a pattern setting's value reads
// (`FERRUM_REPLAY_SUMMARY=out/%q{FERRUM_REPLAY_RUN}.txt`) is the user's own, not a misspelt
// setting: not said, not counted (review RG-4) — within the bounds above. Each pattern is
// walked once; an unknown variable is then compared with at most kMostPatternVariables names.
inline constexpr unsigned kMostUnknownSettingLines = 8;
void say_unknown_settings(const char *prefix, const char *known, const char *internal,
                          void (*say)(const char *sentence, void *context), void *context);

}  // namespace ferrum_replay::common
