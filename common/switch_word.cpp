#include "switch_word.hpp"

namespace ferrum_replay::common {

// ASCII case folding only: the process's locale (a Turkish dotless i) must not change a word.
bool same_word(const char *value, const char *lower_case_word) {
  if (!value) return false;
  for (;; ++value, ++lower_case_word) {
    char c = *value;
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != *lower_case_word) return false;
    if (c == '\0') return true;
  }
}

namespace {

bool any_of(const char *value, const char *const (&words)[4]) {
  for (const char *word : words)
    if (same_word(value, word)) return true;
  return false;
}

}  // namespace

Switch switch_word(const char *value) {
  static const char *const kOn[4] = {"on", "1", "true", "yes"};
  static const char *const kOff[4] = {"off", "0", "false", "no"};
  if (!value) return Switch::invalid;
  if (any_of(value, kOn)) return Switch::on;
  if (any_of(value, kOff)) return Switch::off;
  return Switch::invalid;
}

}  // namespace ferrum_replay::common
