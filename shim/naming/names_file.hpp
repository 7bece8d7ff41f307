// FERRUM_REPLAY_NAMES: a file that names graphs without touching the program. Pure parser
// and lookup, unit-tested and fuzzed; the shim reads the file once, at activation.
//
//   # comment
//   3 = prefill                       graph number 3 (instantiation order)
//   site:*capture_decode* = decode    graphs instantiated from a matching call site
//   content:*flash_fwd* = attention   graphs whose content description matches
//
// Patterns are shell globs (fnmatch). The first matching line wins. A bad line is reported
// with its number and skipped; the others still apply.
#pragma once

#include <stddef.h>

namespace ferrum_replay::shim {

struct NameRule {
  enum class Kind : unsigned char { ordinal, site, content } kind;
  unsigned ordinal;
  int line;
  char pattern[128];
  char name[128];
};

struct NameRules {
  NameRule *rules = nullptr;  // malloc'd; owned
  size_t count = 0;
};

// Receives "line N: <what is wrong>" for each bad line.
using NamesFileComplaint = void (*)(int line, const char *problem, void *context);

// Parses `length` bytes of `text` (not necessarily terminated). Returns the valid rules.
NameRules parse_names_file(const char *text, size_t length, NamesFileComplaint complain,
                           void *context);
void free_name_rules(NameRules &rules);

// The largest names file read (a names file is a few lines); a larger one is skipped whole.
inline constexpr size_t kMaxNamesFileSize = size_t{1} << 20;

// Reads and parses the names file at `path` (names_file_read.cpp). The path is the user's: it
// is looked at before it is opened, and read only when it is a regular file of at most
// kMaxNamesFileSize bytes — a FIFO, a device, a directory or a larger file are skipped, never
// opened or waited for. Each problem is one sentence to `say` (a ComplaintSink, settings.hpp:
// `void (*)(const char *sentence, void *context)`), the path quoted as docs/text-rules.md
// says: the file cannot be read or was skipped, or it has bad lines (one sentence: the first,
// and the count of the rest; each is listed at FERRUM_REPLAY_LOG=info).
using NamesFileSink = void (*)(const char *sentence, void *context);
NameRules read_names_file(const char *path, NamesFileSink say, void *context);

// The name the first matching rule gives, or null. `site`/`content` may be null or "".
const char *find_rule_name(const NameRules &rules, unsigned ordinal, const char *site,
                           const char *content);

}  // namespace ferrum_replay::shim
