// One rule for a variable of ours that nothing reads (F257): FERRUM_REPLAY_SUMARY, a misspelt
// FERRUM_REPLAY_SUMMARY, silently gave no summary. The shim (FERRUM_REPLAY_*) and the recorder
// (FERRUM_RECORD_*) each say so in one sentence, as for a value they cannot take, naming the
// known name closest to it. Pure: the caller walks the environment and prints.
#pragma once

#include <stddef.h>

namespace ferrum_replay::common {

// When `entry` (`NAME=value`, or a bare name) has a name that begins with `prefix` and is not
// one of `known` (names separated by single spaces: one string, no table of pointers for the
// loader to relocate at every start of the shim), writes the sentence saying so into `out`
// (terminated; cut where it does not fit) and returns true; else returns false. The name is shown
// by the rule for a value in a message (printable_quote). The suggestion: the known name within two
// edits, else the longest known name the name begins with (FERRUM_RECORD_OUTPUT:
// FERRUM_RECORD_OUT).
bool unknown_setting_sentence(const char *entry, const char *prefix, const char *known, char *out,
                              size_t out_size);

}  // namespace ferrum_replay::common
