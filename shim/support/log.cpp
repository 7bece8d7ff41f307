#include "support/log.hpp"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <atomic>

#include "errno_kept.hpp"
#include "no_cancel.hpp"
#include "output_file.hpp"

namespace ferrum_replay::shim {
namespace {

std::atomic<LogLevel> g_level{LogLevel::silent};

// The host's stderr is the host's: a line of ours must neither kill the program with SIGPIPE
// (its reader went away) nor wait without a bound (a full pipe, a terminal nobody reads). It
// is written as the stream it is, by the one rule for host streams (common/output_file.hpp:
// our own non-blocking description, at most 2 s without progress, SIGPIPE never raised, the
// host's descriptor flags untouched) — the rule the recorder's lines and the summary follow.
void write_to_stderr(const char *line, size_t length) {
  const common::NoCancel no_cancel;  // no_cancel.hpp: open, poll, write and close follow
  common::Stream stream;
  if (common::open_stream("/dev/stderr", &stream) != 0) return;
  common::stream_write(&stream, line, length);
  common::close_stream(&stream);
}

void write_line(const char *format, va_list args) {
  constexpr char kPrefix[] = "ferrum-replay: ";
  char line[1024];
  int used = snprintf(line, sizeof line, "%s", kPrefix);
  int body = vsnprintf(line + used, sizeof line - used - 1, format, args);
  if (body < 0) return;
  size_t length = static_cast<size_t>(used) + static_cast<size_t>(body);
  if (length > sizeof line - 2) length = sizeof line - 2;  // truncated: still end the line
  line[length++] = '\n';
  const common::ErrnoKept errno_kept;  // errno_kept.hpp
  write_to_stderr(line, length);
}

}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(level, std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) {
  return level != LogLevel::silent && level <= g_level.load(std::memory_order_relaxed);
}

void log_line(LogLevel level, const char *format, ...) {
  if (!log_enabled(level)) return;
  va_list args;
  va_start(args, format);
  write_line(format, args);
  va_end(args);
}

void warn_line(const char *format, ...) {
  va_list args;
  va_start(args, format);
  write_line(format, args);
  va_end(args);
}

MessageValue message_value(const char *value, size_t length) {
  MessageValue shown;
  common::printable_quote(value ? value : "", value ? length : 0, kMessageValueLimit, shown.text,
                          sizeof shown.text);
  return shown;
}

MessageValue message_value(const char *value) {
  return message_value(value, value ? strlen(value) : 0);
}

}  // namespace ferrum_replay::shim
