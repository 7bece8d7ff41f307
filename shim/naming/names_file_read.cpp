// Reading FERRUM_REPLAY_NAMES: the user's path, opened so that nothing at that path can stall
// or disturb the program. (The parser, names_file.cpp, stays pure for the fuzzer.)
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errno_kept.hpp"
#include "error_text.hpp"
#include "naming/names_file.hpp"
#include "own_descriptor.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {
namespace {

const char *kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

struct Reader {
  const char *shown;  // the path, quoted for messages
  NamesFileSink say;
  void *context;
  size_t bad_lines = 0;
  char first_bad[512] = "";  // the first bad line's sentence part: "line N: problem"

  void sentence(const char *format, ...) const __attribute__((format(printf, 2, 3))) {
    char text[768];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    say(text, context);
  }
};

// A bad line: the first is kept for the one sentence said after the parse (a bad setting is one
// line, however many lines of it are bad: a file of 60 bad lines printed 21 on the program's
// stderr); each is listed at FERRUM_REPLAY_LOG=info.
void complain_about_line(int line, const char *problem, void *context) {
  auto &reader = *static_cast<Reader *>(context);
  if (++reader.bad_lines == 1)
    snprintf(reader.first_bad, sizeof reader.first_bad, "line %d: %s", line, problem);
  log_line(LogLevel::info, "FERRUM_REPLAY_NAMES='%s' line %d: %s; line ignored", reader.shown, line,
           problem);
}

// Reads at most kMaxNamesFileSize bytes of the regular file `fd`; false when it holds more
// (it may have grown since fstat) or a read fails. With pread: should the program have taken the
// number meanwhile (own_descriptor.hpp), the offset of its file stays where it was.
bool read_all(int fd, char *text, size_t &length) {
  length = 0;
  for (;;) {
    const ssize_t got =
        pread(fd, text + length, kMaxNamesFileSize + 1 - length, static_cast<off_t>(length));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    if (got == 0) return true;
    length += static_cast<size_t>(got);
    if (length > kMaxNamesFileSize) return false;
  }
}

}  // namespace

NameRules read_names_file(const char *path, NamesFileSink say, void *context) {
  if (!path || !*path) return NameRules{};
  const MessageValue shown = message_value(path);
  Reader reader{shown.text, say, context};
  const common::ErrnoKept errno_kept;  // errno_kept.hpp
  NameRules rules;
  // What is at the path is looked at before it is opened: a FIFO with no writer, a terminal or
  // a device must not be opened at all (opening can block, or have effects of its own).
  struct stat named {};
  if (stat(path, &named) != 0) {
    reader.sentence("FERRUM_REPLAY_NAMES='%s' cannot be read (%s); no names file applies",
                    shown.text, common::error_text(errno));
  } else if (!S_ISREG(named.st_mode)) {
    reader.sentence(
        "FERRUM_REPLAY_NAMES='%s' is %s, not a regular file; skipped, no names file "
        "applies",
        shown.text, kind_of(named.st_mode));
  } else if (named.st_size > static_cast<off_t>(kMaxNamesFileSize)) {
    reader.sentence(
        "FERRUM_REPLAY_NAMES='%s' is larger than 1 MiB (%lld bytes); skipped, no "
        "names file applies",
        shown.text, static_cast<long long>(named.st_size));
  } else {
    // Non-blocking and never our controlling terminal, in case something else took the name
    // since; what was opened must still be a regular file.
    // (Not proved against the path: the user's file may be replaced while it is read — an
    // editor's rename — and is then still read whole from the descriptor.)
    common::OwnDescriptor file(open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    const int fd = file.get();
    struct stat opened {};
    char *text = nullptr;
    size_t length = 0;
    if (fd < 0) {
      reader.sentence("FERRUM_REPLAY_NAMES='%s' cannot be read (%s); no names file applies",
                      shown.text, common::error_text(errno));
    } else if (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
      reader.sentence(
          "FERRUM_REPLAY_NAMES='%s' changed while it was opened; skipped, no names "
          "file applies",
          shown.text);
    } else if (!(text = static_cast<char *>(malloc(kMaxNamesFileSize + 1)))) {
      reader.sentence("FERRUM_REPLAY_NAMES='%s': no memory to read it; no names file applies",
                      shown.text);
    } else if (!read_all(fd, text, length)) {
      reader.sentence(
          "FERRUM_REPLAY_NAMES='%s' cannot be read completely (larger than 1 MiB or "
          "a read error); skipped, no names file applies",
          shown.text);
    } else {
      rules = parse_names_file(text, length, complain_about_line, &reader);
      // At info each bad line was listed already: no sentence repeats one of them.
      const bool listed = log_enabled(LogLevel::info);
      if (reader.bad_lines == 1 && !listed)
        reader.sentence("FERRUM_REPLAY_NAMES='%s' %s; line ignored", shown.text, reader.first_bad);
      else if (reader.bad_lines > 1 && !listed)
        reader.sentence(
            "FERRUM_REPLAY_NAMES='%s' %s; line ignored, and %zu more bad line%s, each ignored "
            "(FERRUM_REPLAY_LOG=info lists them)",
            shown.text, reader.first_bad, reader.bad_lines - 1, reader.bad_lines == 2 ? "" : "s");
      log_line(LogLevel::info, "names file '%s': %zu rules", shown.text, rules.count);
    }
    free(text);
  }  // (the names file closed as it goes, if still ours)
  return rules;
}

}  // namespace ferrum_replay::shim
