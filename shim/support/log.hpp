// Diagnostics of the shim: one line per message, written straight to stderr with write(2).
//
// Why not stdio: the host program owns stdout/stderr buffering, and a preloaded library
// that touches FILE* state (or allocates for it) can change what the program prints.
// A single write() of a complete line also keeps lines whole when threads log at once.
#pragma once

#include <stddef.h>

#include "text_rules.hpp"

namespace ferrum_replay::shim {

enum class LogLevel : unsigned char { silent = 0, error = 1, info = 2, debug = 3 };

// The level chosen by FERRUM_REPLAY_LOG; `silent` until settings are read.
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);

// Formats printf-style into a bounded stack buffer and writes "ferrum-replay: <text>\n".
// Never called on the launch hot path with a level that is disabled by default.
void log_line(LogLevel level, const char *format, ...) __attribute__((format(printf, 2, 3)));

// Unconditional line: the user gave an invalid setting, which must be said even when silent.
void warn_line(const char *format, ...) __attribute__((format(printf, 1, 2)));

// A user value (a setting, a path, a name) as a message shows it (docs/text-rules.md, section
// 3, implemented by common/text_rules.hpp's printable_quote): printable UTF-8, at most 200
// bytes, cut at a character boundary with "..." appended — so that it can neither garble a
// terminal nor forge a second line. The message puts it in single quotes: "NAME='%s' ...".
inline constexpr size_t kMessageValueLimit = common::kMessageLimit;
struct MessageValue {
  char text[common::kQuotedSize];
};
MessageValue message_value(const char *value);
MessageValue message_value(const char *value, size_t length);

}  // namespace ferrum_replay::shim
