#include "settings.hpp"

#include "setting_names.hpp"
#include "switch_word.hpp"

namespace ferrum_replay::recorder {

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

bool parse_byte_count(std::string_view text, uint64_t *value) {
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        scale = uint64_t{1} << 10;
        break;
      case 'm':
      case 'M':
        scale = uint64_t{1} << 20;
        break;
      case 'g':
      case 'G':
        scale = uint64_t{1} << 30;
        break;
      default:
        break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  uint64_t n = 0;
  if (!text.empty() && text.find_first_not_of('0') == std::string_view::npos) {  // 0, 00, 0K
    *value = 0;
    return true;
  }
  if (!parse_positive_u64(text, &n) || n > UINT64_MAX / scale) return false;
  *value = n * scale;
  return true;
}

namespace {

// A user's value, quoted back in a warning: printable by the one rule of docs/text-rules.md
// (common/text_rules.hpp), so that a hostile or binary value can neither garble the terminal
// nor make the warning more than one line, and at most 200 bytes.
std::string quoted(std::string_view value) {
  char out[common::kQuotedSize];
  common::printable_quote(value.data(), value.size(), common::kMessageLimit, out, sizeof out);
  return out;
}

// A rank is a short decimal number; anything else (empty, a path, a word) is not used in a file
// name.
bool is_rank(const char *value) {
  if (!value || !*value) return false;
  size_t n = 0;
  for (const char *p = value; *p; ++p, ++n)
    if (*p < '0' || *p > '9' || n >= 9) return false;
  return true;
}

// A 1/0 setting (common::switch_word's words). Unset or empty keeps `*value`; anything else
// keeps it too, with one warning that ends in `otherwise`.
void read_switch(common::EnvLookup env, void *context, const char *name, bool *value,
                 const char *otherwise, std::vector<std::string> *warnings) {
  const char *text = env(name, context);
  if (!text || !*text) return;
  const common::Switch word = common::switch_word(text);
  if (word != common::Switch::invalid) {
    *value = word == common::Switch::on;
  } else if (warnings) {
    warnings->push_back("ferrum-replay recorder: " + std::string(name) + "='" + quoted(text) +
                        "' is invalid (expected on or off); " + otherwise + "\n");
  }
}

}  // namespace

std::string default_out_name(common::EnvLookup env, void *context, Settings *settings) {
  // Global ranks first: a local rank repeats on every node, so its name also carries the host.
  for (const char *var : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "LOCAL_RANK"}) {
    const char *value = env(var, context);
    if (!is_rank(value)) continue;
    settings->rank_variable = var;
    settings->rank_value = value;
    // The value read now, not %q{VAR}: the program may change its environment before exit.
    return std::string(var) == "LOCAL_RANK"
               ? "ferrum-replay.%h.localrank" + settings->rank_value + ".%p.json"
               : "ferrum-replay.rank" + settings->rank_value + ".%p.json";
  }
  return "ferrum-replay.%p.json";
}

Settings parse_settings(common::EnvLookup env, void *context, std::vector<std::string> *warnings) {
  Settings s;

  // An empty FERRUM_RECORD_OUT is what `FERRUM_RECORD_OUT= cmd` leaves behind: treat as unset
  // rather than trying to write a file with an empty name.
  s.out_pattern = default_out_name(env, context, &s);
  if (const char *out = env("FERRUM_RECORD_OUT", context); out && *out) {
    const std::string_view o(out);
    // A directory: the default name inside it.
    s.out_pattern = o.back() == '/' ? std::string(o) + s.out_pattern : std::string(o);
  }

  if (const char *session = env("FERRUM_RECORD_SESSION", context); session && *session)
    s.session_file = session;

  read_switch(env, context, "FERRUM_RECORD_TABLE", &s.table, "printing the table", warnings);

  const char *reject = env("FERRUM_RECORD_REJECT", context);
  if (reject && *reject) {
    const std::string_view r(reject);
    uint64_t n = 0;
    if (common::same_word(reject, "all")) {
      s.reject = RejectMode::all;
    } else if (parse_positive_u64(r, &n)) {
      // Every 1st push is every push: one code path is enough.
      s.reject = n == 1 ? RejectMode::all : RejectMode::every_nth;
      s.reject_every = n;
    } else if (warnings) {
      warnings->push_back("ferrum-replay recorder: FERRUM_RECORD_REJECT='" + quoted(r) +
                          "' is invalid (expected all or a positive integer); not rejecting\n");
    }
  }

  read_switch(env, context, "FERRUM_RECORD_FORCE", &s.force,
              "not replacing files that are not ferrum-replay traces", warnings);

  if (const char *clock = env("FERRUM_RECORD_CLOCK", context); clock && *clock) {
    const std::string_view c(clock);
    if (common::same_word(clock, "monotonic")) {
      s.cpu_counter = false;
    } else if (!common::same_word(clock, "auto") && warnings) {
      warnings->push_back("ferrum-replay recorder: FERRUM_RECORD_CLOCK='" + quoted(c) +
                          "' is invalid (expected auto or monotonic); using auto\n");
    }
  }

  if (const char *memory = env("FERRUM_RECORD_MEMORY", context); memory && *memory) {
    const std::string_view m(memory);
    if (!parse_byte_count(m, &s.memory)) {
      s.memory = Settings::kDefaultMemory;
      if (warnings)
        warnings->push_back("ferrum-replay recorder: FERRUM_RECORD_MEMORY='" + quoted(m) +
                            "' is invalid (expected a byte count such as 0, 512K, 24M or 1G); "
                            "using 24M\n");
    }
  }

  if (const char *dom = env("FERRUM_RECORD_REJECT_DOMAIN", context); dom && *dom) {
    s.reject_domain_only = true;
    s.reject_domain = dom;
    if (!(reject && *reject) && warnings)
      warnings->push_back("ferrum-replay recorder: FERRUM_RECORD_REJECT_DOMAIN='" + quoted(dom) +
                          "' limits FERRUM_RECORD_REJECT, which is not set; rejecting nothing\n");
  }
  return s;
}

const char kRecordSettingNames[] =
    "FERRUM_RECORD_OUT FERRUM_RECORD_TABLE FERRUM_RECORD_REJECT FERRUM_RECORD_FORCE "
    "FERRUM_RECORD_CLOCK FERRUM_RECORD_MEMORY FERRUM_RECORD_REJECT_DOMAIN";
const char kInternalRecordSettingNames[] = "FERRUM_RECORD_SESSION";  // the wrapper's

void say_unknown_settings(std::vector<std::string> *warnings) {
  common::say_unknown_settings(
      kRecordSettingPrefix, kRecordSettingNames, kInternalRecordSettingNames,
      [](const char *sentence, void *lines) {
        static_cast<std::vector<std::string> *>(lines)->push_back(
            std::string("ferrum-replay recorder: ") + sentence + "\n");
      },
      warnings);
}

}  // namespace ferrum_replay::recorder
