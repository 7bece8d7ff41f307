// The words a switch setting accepts, one list for every part of ferrum-replay (the shim's
// FERRUM_REPLAY* and the recorder's FERRUM_RECORD_*): on, 1, true, yes and off, 0, false, no, in
// any case (ASCII case only, whatever the locale). libstdc++-free like text_rules.hpp.
#pragma once

namespace ferrum_replay::common {

enum class Switch { on, off, invalid };

// What `value` says; null or any other word is Switch::invalid.
Switch switch_word(const char *value);

// Whether `value` is `lower_case_word` in any case. The one rule for every word-valued setting
// (switches, FERRUM_REPLAY_LOG, FERRUM_REPLAY_SITE, FERRUM_RECORD_CLOCK, ...): ASCII case only, so
// that the program's locale (a Turkish dotless i after setlocale) cannot change a word.
bool same_word(const char *value, const char *lower_case_word);

}  // namespace ferrum_replay::common
