#include "support/log.hpp"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

namespace ferrum_replay::shim {
namespace {

std::atomic<LogLevel> g_level{LogLevel::silent};

// The host's stderr is the host's: a line of ours must neither kill the program with SIGPIPE
// (its reader went away) nor wait without a bound (a full pipe nobody reads). So: at most 2 s
// for room (a pipe that polls writable takes a line of up to PIPE_BUF bytes without blocking),
// and SIGPIPE blocked for this thread during the write, the one it raised taken back — unless
// one was pending already, which is the program's. The descriptor's flags are never touched.
void write_to_stderr(const char *line, size_t length) {
  pollfd room{STDERR_FILENO, POLLOUT, 0};
  if (poll(&room, 1, 2000) != 1 || !(room.revents & POLLOUT)) return;  // closed, broken, full
  sigset_t pipe_signal, previous, pending;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  if (pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous) != 0) return;
  sigemptyset(&pending);
  const bool already_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  const ssize_t written = write(STDERR_FILENO, line, length);
  if (written < 0 && errno == EPIPE && !already_pending) {
    const timespec no_wait{0, 0};
    sigtimedwait(&pipe_signal, nullptr, &no_wait);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
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
  int saved_errno = errno;  // the host program may be between a call and its errno check
  write_to_stderr(line, length);
  errno = saved_errno;
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
