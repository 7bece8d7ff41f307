#include "setting_names.hpp"

#include <stdio.h>
#include <string.h>

#include "startup_env.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::common {
namespace {

// The number of names of a list (setting_names.hpp), at compile time.
constexpr size_t count_names(const char *list) {
  size_t count = 0;
  for (const char *p = list; *p; ++p)
    if (*p != ' ' && (p == list || p[-1] == ' ')) ++count;
  return count;
}

// What both tools' settings begin with (FERRUM_REPLAY*, FERRUM_RECORD_*): no other variable is
// ever called unknown, so a pattern's other variables need no room in its table.
constexpr char kOurPrefix[] = "FERRUM_";
constexpr size_t kOurPrefixLength = sizeof kOurPrefix - 1;

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

// The length of an environment entry's name: the bytes before its '=' (all of a bare name).
size_t name_length(const char *entry) {
  const char *equals = strchr(entry, '=');
  return equals ? static_cast<size_t>(equals - entry) : strlen(entry);
}

// Calls `visit(item, item_length)` for each name of a list (setting_names.hpp).
template <typename Visit>
void each_name(const char *list, Visit &&visit) {
  for (const char *item = list; *item;) {
    const size_t item_length = strcspn(item, " ");
    visit(item, item_length);
    item += item_length;
    while (*item == ' ') ++item;
  }
}

// Whether `name` (`length` bytes) is one of `list`.
bool listed(const char *name, size_t length, const char *list) {
  bool found = false;
  each_name(list, [&](const char *item, size_t item_length) {
    found = found || (item_length == length && memcmp(item, name, length) == 0);
  });
  return found;
}

// A known name to suggest for `name`, or null; its length in *suggested_length.
const char *suggestion(const char *name, size_t length, size_t prefix_length, const char *known,
                       size_t *suggested_length) {
  size_t own = length - prefix_length;  // what the user wrote after the prefix
  for (const char *p = name + prefix_length; own > 0 && *p == '_'; ++p) --own;
  const size_t most_edits = own / 3 < 2 ? own / 3 : 2;
  const char *closest = nullptr, *within = nullptr, *beyond = nullptr;
  size_t closest_distance = most_edits + 1, within_length = 0, beyond_length = 0,
         closest_length = 0;
  each_name(known, [&](const char *item, size_t item_length) {
    const size_t distance = name_distance(name, length, item, item_length);
    if (distance < closest_distance) {
      closest = item;
      closest_length = item_length;
      closest_distance = distance;
    }
    // Names that share a beginning, counted only past the prefix and 3 bytes into it.
    const size_t shared = item_length < length ? item_length : length;
    if (shared >= prefix_length + 3 && memcmp(item, name, shared) == 0) {
      if (item_length < length && item_length > within_length) {
        within = item;  // FERRUM_RECORD_OUTPUT begins with FERRUM_RECORD_OUT
        within_length = item_length;
      } else if (item_length > length && (!beyond || item_length < beyond_length)) {
        beyond = item;  // FERRUM_REPLAY_GPU_TIME begins with FERRUM_REPLAY_GPU
        beyond_length = item_length;
      }
    }
  });
  if (closest) {
    *suggested_length = closest_length;
    return closest;
  }
  *suggested_length = within ? within_length : beyond_length;
  return within ? within : beyond;
}

}  // namespace

bool unknown_setting(const char *entry, const char *prefix, const char *known,
                     const char *internal) {
  if (!entry || strncmp(entry, prefix, strlen(prefix)) != 0) return false;
  const size_t length = name_length(entry);
  return !listed(entry, length, known) && !listed(entry, length, internal);
}

bool unknown_setting_sentence(const char *entry, const char *prefix, const char *known,
                              const char *internal, char *out, size_t out_size) {
  if (out_size > 0) out[0] = '\0';
  if (!unknown_setting(entry, prefix, known, internal)) return false;
  const size_t prefix_length = strlen(prefix);
  const size_t length = name_length(entry);
  char name[kQuotedSize];
  printable_quote(entry, length, kMessageLimit, name, sizeof name);
  size_t suggested_length = 0;
  if (const char *suggested = suggestion(entry, length, prefix_length, known, &suggested_length))
    snprintf(out, out_size,
             "%s is not a setting of this ferrum-replay (did you mean %.*s?); ignored", name,
             static_cast<int>(suggested_length), suggested);
  else
    snprintf(out, out_size,
             "%s is not a setting of this ferrum-replay (docs/settings.md lists them); ignored",
             name);
  return true;
}

void say_unknown_settings(const char *prefix, const char *known, const char *internal,
                          void (*say)(const char *sentence, void *context), void *context) {
  // The variables the pattern settings' values read (setting_names.hpp); their names point
  // into the start-up environment, which lives as long as the process (startup_env.hpp).
  struct Patterns {
    struct Variable {
      const char *name;
      size_t length;
    } variables[kMostPatternVariables];
    unsigned count;
    const char *walked[8];  // the settings met: room for each name of the list (below)
    unsigned walked_count;

    bool holds(const char *name, size_t length) const {
      for (unsigned i = 0; i < count; ++i)
        if (variables[i].length == length && memcmp(variables[i].name, name, length) == 0)
          return true;
      return false;
    }
  } patterns{};
  static_assert(count_names(kPatternSettingNames) <= sizeof patterns.walked / sizeof(const char *),
                "Patterns::walked must have room for every pattern setting");
  each_startup_env_entry(
      [](const char *entry, void *state) {
        auto &p = *static_cast<Patterns *>(state);
        const size_t length = name_length(entry);
        const char *value = entry + length;
        if (*value != '=' || !listed(entry, length, kPatternSettingNames)) return;
        for (unsigned i = 0; i < p.walked_count; ++i)
          if (strncmp(p.walked[i], entry, length + 1) == 0) return;  // a second value of it
        if (p.walked_count < sizeof p.walked / sizeof p.walked[0])
          p.walked[p.walked_count++] = entry;
        if (strlen(value + 1) > kMostPatternLength) return;  // no reader takes it
        each_pattern_variable(
            value + 1,
            [](const char *name, size_t name_length, void *state) {
              auto &q = *static_cast<Patterns *>(state);
              if (q.count < kMostPatternVariables && name_length > kOurPrefixLength &&
                  memcmp(name, kOurPrefix, kOurPrefixLength) == 0 && !q.holds(name, name_length))
                q.variables[q.count++] = {name, name_length};
            },
            &p);
      },
      &patterns);
  struct Walk {
    const char *prefix, *known, *internal;
    const Patterns *patterns;
    void (*say)(const char *, void *);
    void *context;
    unsigned found;
    bool unknown(const char *entry) const {
      if (!unknown_setting(entry, prefix, known, internal)) return false;
      const size_t length = name_length(entry);
      return !patterns->holds(entry, length);
    }
  } walk{prefix, known, internal, &patterns, say, context, 0};
  each_startup_env_entry(
      [](const char *entry, void *state) {
        auto &w = *static_cast<Walk *>(state);
        if (!w.unknown(entry)) return;
        if (w.found >= kMostUnknownSettingLines) {  // past the cap: only counted
          ++w.found;
          return;
        }
        char sentence[640];
        if (unknown_setting_sentence(entry, w.prefix, w.known, w.internal, sentence,
                                     sizeof sentence)) {
          ++w.found;
          w.say(sentence, w.context);
        }
      },
      &walk);
  if (walk.found > kMostUnknownSettingLines) {
    char sentence[200];
    snprintf(sentence, sizeof sentence,
             "%u more %s* variables are not settings of this ferrum-replay; ignored",
             walk.found - kMostUnknownSettingLines, prefix);
    say(sentence, context);
  }
}

}  // namespace ferrum_replay::common
