#include "trace_writer.hpp"

#include <errno.h>
#include <fcntl.h>
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
  for (const ThreadSnapshot &t : snap.threads) {
    for (const Event &e : t.events) {
      out += ",\n";
      append_event(out, snap, t.tid, e);
      if (!flush_if_full()) return false;
    }
  }
  out += "\n],\n\"displayTimeUnit\":\"ns\",\n\"ferrumReplay\":{\"version\":1";
  out += ",\"pid\":" + std::to_string(snap.pid);
  out += ",\"ranges\":" + std::to_string(snap.range_count());
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

bool write_trace_file(const std::string &path, const Snapshot &snap, std::string *error) {
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
    *error = std::strerror(open_errno);
    return false;
  }
  FdSink sink{fd};
  bool ok = render_trace(snap, fd_sink, &sink);
  int err = sink.error;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    *error = std::strerror(err ? err : EIO);
  }
  return ok;
}

}  // namespace ferrum_replay::recorder
