#include "exit_report.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "output_path.hpp"
#include "summary_table.hpp"
#include "trace_writer.hpp"

namespace ferrum_replay::recorder {

void write_stderr(const std::string &text) {
  const char *p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

namespace {

// When this process started, in CLOCK_REALTIME ns (0 if unknown): /proc/self/stat's starttime
// (clock ticks after boot; a forked child's is the fork) moved onto the wall clock.
uint64_t process_start_realtime_ns() {
  FILE *f = std::fopen("/proc/self/stat", "re");
  if (!f) return 0;
  char buf[1024] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Fields after the command name, which may itself hold spaces and parentheses.
  const char *p = std::strrchr(buf, ')');
  if (!p) return 0;
  // p + 2 is field 3 (state); starttime is field 22.
  p += 2;
  for (int field = 3; field < 22 && *p; ++field) {
    p = std::strchr(p, ' ');
    if (!p) return 0;
    ++p;
  }
  const unsigned long long ticks = std::strtoull(p, nullptr, 10);
  const long hz = sysconf(_SC_CLK_TCK);
  timespec boot{}, real{};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0 ||
      clock_gettime(CLOCK_REALTIME, &real) != 0)
    return 0;
  const auto ns = [](const timespec &t) {
    return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
  };
  const uint64_t since_boot = static_cast<uint64_t>(ticks) * (1000000000u / hz);
  const uint64_t uptime = ns(boot);
  return uptime >= since_boot ? ns(real) - (uptime - since_boot) : 0;
}

// `path` with ".<pid>" before the extension of its last component.
std::string with_pid(const std::string &path, long pid) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = "." + std::to_string(pid);
  return has_ext ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

uint64_t mtime_ns(const struct stat &st) {
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000u +
         static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

// The earliest of: this process's start, the recorder's start (a forked child inherits its
// parent's), the session's start (FERRUM_RECORD_SESSION). 0 if none is known.
uint64_t run_start_ns(uint64_t origin_realtime_ns, const std::string &session_file) {
  uint64_t start = 0;
  const auto earliest = [&start](uint64_t t) {
    if (t != 0 && (start == 0 || t < start)) start = t;
  };
  earliest(process_start_realtime_ns());
  earliest(origin_realtime_ns);
  struct stat session {};
  if (!session_file.empty() && ::stat(session_file.c_str(), &session) == 0)
    earliest(mtime_ns(session));
  return start;
}

// A pattern without %p gives every process of a job the same file name (a forked child, the
// ranks of a launcher). The last process to exit must not erase the others' traces: when the
// file was written since this run started, it belongs to a sibling, and this process writes
// beside it (".<pid>" before the extension). An older file is a previous run's and is
// replaced, as always. File time stamps lag by up to a kernel tick (<= 10 ms), hence the
// margin; the start time, in clock ticks, is rounded down, which only errs towards keeping a
// file. The choice is made under an flock of the directory and claimed at once (a placeholder
// is created, or the old file's time stamp refreshed), so processes that exit at the same
// moment choose one after the other. Returns the path to write; *created is set when a
// placeholder was created (to be removed if the trace cannot be written), *claimed when the
// file at the returned path may be replaced (the placeholder, or an earlier trace of ours).
// An older file that is not a ferrum-replay trace is neither touched nor claimed unless
// `force`: write_trace_file then leaves it alone and writes NAME.1.EXT (trace_writer.hpp).
std::string claim_output(const std::string &absolute, long pid, uint64_t start, bool force,
                         bool *created, bool *claimed) {
  *created = false;
  *claimed = false;
  const size_t slash = absolute.rfind('/');
  const std::string dir = slash == 0 ? "/" : absolute.substr(0, slash);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return absolute;  // writing will fail and say why
  while (::flock(dir_fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  std::string chosen = absolute;
  struct stat st {};
  if (::lstat(absolute.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {  // a directory: an error
    constexpr uint64_t kMarginNs = 10'000'000;
    if (start != 0 && mtime_ns(st) + kMarginNs >= start) {
      chosen = with_pid(absolute, pid);  // a sibling's trace: keep it
    } else if (force || is_ferrum_trace_file(absolute)) {
      ::utimensat(AT_FDCWD, absolute.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);  // ours now
      *claimed = true;
    }
  }
  if (chosen != absolute || ::lstat(chosen.c_str(), &st) != 0) {
    const int fd =
        ::open(chosen.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      *created = *claimed = true;
    }
  }
  ::flock(dir_fd, LOCK_UN);
  ::close(dir_fd);
  return chosen;
}

// One line per message, whatever bytes the path holds (it may come from %q{VAR}).
std::string one_line(const std::string &text) {
  std::string out;
  for (char c : text) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) ? '?' : c;
  return out;
}

}  // namespace

void write_exit_report(Recorder &recorder, const Settings &settings, const std::string &cwd) {
  Snapshot snap = recorder.snapshot_for_report();

  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  snap.host = host;
  std::string path = expand_output_path(settings.out_pattern, snap.pid, host, process_env, nullptr);
  std::string absolute = absolute_path(path, cwd);
  bool placeholder = false;
  bool claimed = false;
  if (const std::string chosen = claim_output(
          absolute, snap.pid, run_start_ns(snap.origin_realtime_ns, settings.session_file),
          settings.force, &placeholder, &claimed);
      chosen != absolute) {
    path = with_pid(path, snap.pid);
    absolute = chosen;
  }

  TraceFileOptions options;
  options.force = settings.force || claimed;
  TraceFileOutcome outcome;
  const bool written = write_trace_file(absolute, snap, options, &outcome);
  if (!written && placeholder) ::unlink(absolute.c_str());
  if (!written)
    write_stderr("ferrum-replay recorder: cannot write trace to " + one_line(path) + ": " +
                 outcome.error + "\n");
  else if (outcome.diverted)
    write_stderr("ferrum-replay recorder: " + one_line(absolute) +
                 " exists and is not a ferrum-replay trace; left it alone and wrote " +
                 one_line(outcome.written_path) + " (FERRUM_RECORD_FORCE=1 replaces it)\n");

  if (settings.table)
    write_stderr(format_summary(snap, aggregate(snap),
                                written ? one_line(outcome.written_path) : std::string()));
}

}  // namespace ferrum_replay::recorder
