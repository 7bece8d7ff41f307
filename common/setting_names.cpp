#include "setting_names.hpp"

#include <stdio.h>
#include <string.h>

#include "text_rules.hpp"

namespace ferrum_replay::common {
namespace {

// Longer names are never near a known one (every setting's name is shorter).
constexpr size_t kNameRoom = 64;

// Edit distance (insertions, deletions, replacements) between two names of at most kNameRoom
// bytes; kNameRoom for a longer one. On the stack: no allocation, bounded work.
size_t name_distance(const char *a, size_t a_length, const char *b, size_t b_length) {
  if (a_length > kNameRoom || b_length > kNameRoom) return kNameRoom;
  size_t previous[kNameRoom + 1], current[kNameRoom + 1];
  for (size_t j = 0; j <= b_length; ++j) previous[j] = j;
  for (size_t i = 1; i <= a_length; ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b_length; ++j) {
      size_t best = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      if (previous[j] + 1 < best) best = previous[j] + 1;
      if (current[j - 1] + 1 < best) best = current[j - 1] + 1;
      current[j] = best;
    }
    memcpy(previous, current, (b_length + 1) * sizeof current[0]);
  }
  return previous[b_length];
}

}  // namespace

bool unknown_setting_sentence(const char *entry, const char *prefix, const char *known, char *out,
                              size_t out_size) {
  if (out_size > 0) out[0] = '\0';
  const size_t prefix_length = strlen(prefix);
  if (!entry || strncmp(entry, prefix, prefix_length) != 0) return false;
  const char *equals = strchr(entry, '=');
  const size_t length = equals ? static_cast<size_t>(equals - entry) : strlen(entry);
  const char *closest = nullptr, *longest = nullptr;
  size_t closest_distance = 3;  // within two edits
  size_t closest_length = 0, longest_length = 0;
  for (const char *name = known; *name;) {
    const size_t known_length = strcspn(name, " ");
    if (known_length == length && memcmp(name, entry, length) == 0) return false;
    const size_t distance = name_distance(entry, length, name, known_length);
    if (distance < closest_distance) {
      closest = name;
      closest_length = known_length;
      closest_distance = distance;
    }
    // FERRUM_RECORD_OUTPUT: a known name with more after it (the longest such, unless a
    // name within two edits was found).
    if (known_length > prefix_length && known_length < length &&
        memcmp(name, entry, known_length) == 0 && known_length > longest_length) {
      longest = name;
      longest_length = known_length;
    }
    name += known_length;
    while (*name == ' ') ++name;
  }
  if (!closest) {
    closest = longest;
    closest_length = longest_length;
  }
  char name[kQuotedSize];
  printable_quote(entry, length, kMessageLimit, name, sizeof name);
  if (closest)
    snprintf(out, out_size,
             "%s is not a setting of this ferrum-replay (did you mean %.*s?); ignored", name,
             static_cast<int>(closest_length), closest);
  else
    snprintf(out, out_size,
             "%s is not a setting of this ferrum-replay (docs/settings.md lists them); ignored",
             name);
  return true;
}

}  // namespace ferrum_replay::common
