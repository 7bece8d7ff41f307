#include "settings.hpp"

#include <cstdlib>

namespace ferrum_replay::recorder {

const char *process_env(const char *name, void *) {
  return std::getenv(name);
}

bool parse_positive_u64(std::string_view text, uint64_t *value) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  if (v == 0) return false;
  *value = v;
  return true;
}

namespace {

bool equals_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

}  // namespace

Settings parse_settings(EnvLookup env, void *context, std::vector<std::string> *warnings) {
  Settings s;

  // An empty FERRUM_RECORD_OUT is what `FERRUM_RECORD_OUT= cmd` leaves behind: treat as unset
  // rather than trying to write a file with an empty name.
  if (const char *out = env("FERRUM_RECORD_OUT", context); out && *out) s.out_pattern = out;

  if (const char *table = env("FERRUM_RECORD_TABLE", context)) {
    const std::string_view t(table);
    if (t == "0" || equals_ignore_case(t, "false") || equals_ignore_case(t, "no") ||
        equals_ignore_case(t, "off"))
      s.table = false;
  }

  if (const char *reject = env("FERRUM_RECORD_REJECT", context); reject && *reject) {
    const std::string_view r(reject);
    uint64_t n = 0;
    if (equals_ignore_case(r, "all")) {
      s.reject = RejectMode::all;
    } else if (parse_positive_u64(r, &n)) {
      // Every 1st push is every push: one code path is enough.
      s.reject = n == 1 ? RejectMode::all : RejectMode::every_nth;
      s.reject_every = n;
    } else if (warnings) {
      warnings->push_back("ferrum-replay recorder: FERRUM_RECORD_REJECT='" + std::string(r) +
                          "' is invalid (expected all or a positive integer); not rejecting\n");
    }
  }

  if (const char *dom = env("FERRUM_RECORD_REJECT_DOMAIN", context); dom && *dom) {
    s.reject_domain_only = true;
    s.reject_domain = dom;
  }
  return s;
}

}  // namespace ferrum_replay::recorder
