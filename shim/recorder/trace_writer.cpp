#include "trace_writer.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "json_text.hpp"

namespace ferrum_replay::recorder {

namespace {

void append_payload(std::string &out, const Payload &p) {
  switch (p.kind) {
    case PayloadKind::u64:
      out += std::to_string(p.u);
      break;
    case PayloadKind::i64:
      out += std::to_string(p.i);
      break;
    case PayloadKind::f64:
      append_json_double(out, p.d);
      break;
    case PayloadKind::none:
      out += "null";
      break;
  }
}

void append_color(std::string &out, uint32_t argb) {
  // Alpha is dropped: "#rrggbb" is what every viewer and person understands.
  char buf[16];
  std::snprintf(buf, sizeof buf, "\"#%06x\"", static_cast<unsigned>(argb & 0xFFFFFFu));
  out += buf;
}

void append_metadata(std::string &out, const char *what, long pid, uint32_t tid,
                     const std::string &name) {
  out += "{\"ph\":\"M\",\"name\":\"";
  out += what;
  out += "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"name\":";
  append_json_string(out, name);
  out += "}}";
}

void append_event(std::string &out, const Snapshot &snap, uint32_t tid, const Event &e) {
  out += "{\"ph\":\"X\",\"name\":";
  append_json_string(out, e.attrs.name ? e.attrs.name : "");
  out += ",\"cat\":";
  append_json_string(out, e.domain_id < snap.domain_names.size() ? snap.domain_names[e.domain_id]
                                                                 : std::string("?"));
  out += ",\"ts\":";
  append_micros(out, e.start_ns >= snap.origin_ns ? e.start_ns - snap.origin_ns : 0);
  out += ",\"dur\":";
  append_micros(out, e.end_ns >= e.start_ns ? e.end_ns - e.start_ns : 0);
  out += ",\"pid\":" + std::to_string(snap.pid) + ",\"tid\":" + std::to_string(tid);
  out += ",\"args\":{\"category\":" + std::to_string(e.attrs.category);
  if (e.attrs.payload.kind != PayloadKind::none) {
    out += ",\"payload\":";
    append_payload(out, e.attrs.payload);
  }
  if (e.attrs.has_color) {
    out += ",\"color\":";
    append_color(out, e.attrs.color);
  }
  out += ",\"depth\":" + std::to_string(e.depth) + "}}";
}

bool string_sink(const std::string &piece, void *context) {
  static_cast<std::string *>(context)->append(piece);
  return true;
}

struct FdSink {
  int fd;
  int error = 0;
};

bool fd_sink(const std::string &piece, void *context) {
  auto *s = static_cast<FdSink *>(context);
  const char *p = piece.data();
  size_t left = piece.size();
  while (left > 0) {
    const ssize_t n = ::write(s->fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      s->error = errno;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool render_trace(const Snapshot &snap, TraceSink sink, void *context, size_t chunk) {
  std::string out;
  out.reserve(chunk + 4096);
  const auto flush_if_full = [&]() {
    if (out.size() < chunk) return true;
    const bool ok = sink(out, context);
    out.clear();
    return ok;
  };

  out += "{\"traceEvents\":[\n";
  append_metadata(out, "process_name", snap.pid, static_cast<uint32_t>(snap.pid),
                  snap.process_name);
  for (const ThreadSnapshot &t : snap.threads) {
    out += ",\n";
    append_metadata(out, "thread_name", snap.pid, t.tid, t.name);
  }
  // The footer's count is the events written above, never a figure from elsewhere: a trace's
  // counts always equal what it holds.
  uint64_t written = 0;
  for (const ThreadSnapshot &t : snap.threads) {
    MergedEvents events(snap, t);
    while (const Event *e = events.next()) {
      out += ",\n";
      append_event(out, snap, t.tid, *e);
      ++written;
      if (!flush_if_full()) return false;
    }
  }
  out += "\n],\n\"displayTimeUnit\":\"ns\",\n\"ferrumReplay\":{\"version\":1";
  out += ",\"pid\":" + std::to_string(snap.pid);
  out += ",\"ranges\":" + std::to_string(written);
  out += ",\"rejectedPushes\":" + std::to_string(snap.rejected_pushes);
  out += ",\"protocolErrors\":{\"popWithoutPush\":" + std::to_string(snap.errors.pop_without_push) +
         ",\"popWrongDomain\":" + std::to_string(snap.errors.pop_wrong_domain) +
         ",\"openAtExit\":" + std::to_string(snap.errors.open_at_exit) + "}";
  out += ",\"domains\":[";
  bool first = true;
  for (const std::string &d : snap.used_domains()) {
    if (!first) out += ",";
    first = false;
    append_json_string(out, d);
  }
  out += "]";
  // Where and when: lets `ferrum-replay merge` put several processes' traces on one time line
  // (monotonic origins on one host, wall-clock origins across hosts) and name them by rank.
  out += ",\"host\":";
  append_json_string(out, snap.host);
  out += ",\"clock\":{\"originMonotonicNs\":" + std::to_string(snap.origin_ns) +
         ",\"originRealtimeNs\":" + std::to_string(snap.origin_realtime_ns) + "}";
  if (!snap.rank_variable.empty()) {
    out += ",\"rank\":{\"variable\":";
    append_json_string(out, snap.rank_variable);
    out += ",\"value\":";
    append_json_string(out, snap.rank_value);
    out += "}";
  }
  out += "}}\n";
  return sink(out, context);
}

std::string render_trace(const Snapshot &snap) {
  std::string out;
  render_trace(snap, string_sink, &out);
  return out;
}

namespace {

// Gives `tmp` the name `target` unless something already has it. EEXIST if something does.
int link_no_replace(const std::string &tmp, const std::string &target) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return errno;
  // A file system without RENAME_NOREPLACE: link() is just as exclusive.
  if (::link(tmp.c_str(), target.c_str()) != 0) return errno;
  ::unlink(tmp.c_str());
  return 0;
}

}  // namespace

bool is_ferrum_trace_file(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  bool ours = false;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    static constexpr char kHead[] = "{\"traceEvents\":[";
    static constexpr char kMarker[] = "\"ferrumReplay\":{\"version\":";
    char head[sizeof kHead - 1];
    // Our block is at the very end, after the event list: the last 64 KiB hold it.
    std::string tail(st.st_size < 65536 ? static_cast<size_t>(st.st_size) : 65536, '\0');
    if (::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
        std::memcmp(head, kHead, sizeof head) == 0 &&
        ::pread(fd, tail.data(), tail.size(), st.st_size - static_cast<off_t>(tail.size())) ==
            static_cast<ssize_t>(tail.size()))
      ours = tail.find(kMarker) != std::string::npos;
  }
  ::close(fd);
  return ours;
}

std::string numbered_path(const std::string &path, unsigned n) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.rfind('.');
  // A leading dot names a hidden file, not an extension.
  if (dot == std::string::npos || dot <= base) dot = path.size();
  return path.substr(0, dot) + "." + std::to_string(n) + path.substr(dot);
}

bool write_trace_file(const std::string &path, const Snapshot &snap,
                      const TraceFileOptions &options, TraceFileOutcome *result) {
  // Filled locally: `path` may be result->written_path of an earlier call.
  TraceFileOutcome local;
  TraceFileOutcome *outcome = &local;
  if (path.empty() || path.back() == '/') {
    outcome->error = std::strerror(path.empty() ? ENOENT : EISDIR);
    *result = std::move(local);
    return false;
  }
  // A per-process name plus O_EXCL: two processes writing the same path never share a temporary,
  // and a leftover from a crashed run (or a planted symlink) is skipped instead of followed.
  int fd = -1;
  std::string tmp;
  int open_errno = 0;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = path + "." + std::to_string(getpid()) + "." + std::to_string(attempt) + ".tmp";
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    open_errno = errno;
    if (fd < 0 && open_errno != EEXIST) break;
  }
  if (fd < 0) {
    outcome->error = std::strerror(open_errno);
    *result = std::move(local);
    return false;
  }
  FdSink sink{fd};
  bool ok = render_trace(snap, fd_sink, &sink);
  int err = sink.error;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok) {
    err = link_no_replace(tmp, path);
    if (err == 0) {
      outcome->written_path = path;
    } else if (err == EEXIST) {
      struct stat st;
      const bool exists = ::lstat(path.c_str(), &st) == 0;
      const bool replaceable =
          exists && ((S_ISREG(st.st_mode) && (options.force || is_ferrum_trace_file(path))) ||
                     (S_ISLNK(st.st_mode) && options.force));
      if (exists && S_ISDIR(st.st_mode)) {
        err = EISDIR;  // a directory is a mistake in the setting, not a file to step around
      } else if (replaceable) {
        // rename() replaces the directory entry itself: a symbolic link is never followed.
        err = ::rename(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
        if (err == 0) outcome->written_path = path;
      } else {
        outcome->diverted = true;
        for (unsigned n = 1; n <= 1000 && err == EEXIST; ++n) {
          const std::string candidate = numbered_path(path, n);
          err = link_no_replace(tmp, candidate);
          if (err == 0) outcome->written_path = candidate;
        }
      }
    }
    ok = err == 0;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    outcome->error = std::strerror(err ? err : EIO);
  }
  *result = std::move(local);
  return ok;
}

bool write_trace_file(const std::string &path, const Snapshot &snap, std::string *error) {
  TraceFileOutcome outcome;
  const bool ok = write_trace_file(path, snap, TraceFileOptions{}, &outcome);
  if (!ok) *error = outcome.error;
  return ok;
}

}  // namespace ferrum_replay::recorder
