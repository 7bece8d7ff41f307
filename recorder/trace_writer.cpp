#include "trace_writer.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "json_text.hpp"
#include "output_file.hpp"
#include "text_rules.hpp"

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

void append_ts(std::string &out, const Snapshot &snap, uint64_t ticks) {
  out += ",\"ts\":";
  const uint64_t start_ns = snap.scale.to_ns(ticks);
  append_micros(out, start_ns >= snap.origin_ns ? start_ns - snap.origin_ns : 0);
}

void append_cat(std::string &out, const Snapshot &snap, uint32_t domain_id) {
  out += ",\"cat\":";
  append_json_string(
      out, domain_id < snap.domain_names.size() ? snap.domain_names[domain_id] : std::string("?"));
}

// "args" without its closing brace: category (and its name when the program named it), payload
// and colour when the caller set them.
void append_args(std::string &out, const Snapshot &snap, uint32_t domain_id,
                 const RangeAttrs &attrs) {
  out += ",\"args\":{\"category\":" + std::to_string(attrs.category);
  if (const std::string *name = snap.category_name(domain_id, attrs.category)) {
    out += ",\"categoryName\":";
    append_json_string(out, *name);
  }
  if (attrs.payload.kind != PayloadKind::none) {
    out += ",\"payload\":";
    append_payload(out, attrs.payload);
  }
  if (attrs.has_color) {
    out += ",\"color\":";
    append_color(out, attrs.color);
  }
}

void append_event(std::string &out, const Snapshot &snap, uint32_t tid, const Event &e) {
  out += "{\"ph\":\"X\",\"name\":";
  append_json_string(out, e.attrs.name ? e.attrs.name : "");
  append_cat(out, snap, e.domain_id);
  append_ts(out, snap, e.start);
  out += ",\"dur\":";
  append_micros(out, snap.scale.span_ns(e.start, e.end));
  out += ",\"pid\":" + std::to_string(snap.pid) + ",\"tid\":" + std::to_string(tid);
  append_args(out, snap, e.domain_id, e.attrs);
  out += ",\"depth\":" + std::to_string(e.depth) + "}}";
}

// A mark: an instant on its thread's track.
void append_mark(std::string &out, const Snapshot &snap, uint32_t tid, const Event &e) {
  out += "{\"ph\":\"i\",\"s\":\"t\",\"name\":";
  append_json_string(out, e.attrs.name ? e.attrs.name : "");
  append_cat(out, snap, e.domain_id);
  append_ts(out, snap, e.start);
  out += ",\"pid\":" + std::to_string(snap.pid) + ",\"tid\":" + std::to_string(tid);
  append_args(out, snap, e.domain_id, e.attrs);
  out += "}}";
}

// One half of a start/end range: "b" where it started, "e" where it ended (maybe another thread),
// both with the begin's name and domain and the range's id, so that viewers pair them.
void append_async(std::string &out, const Snapshot &snap, uint32_t tid, const Event &e,
                  const AsyncRange &range) {
  const bool begin = e.kind() == EventKind::async_begin;
  out += begin ? "{\"ph\":\"b\",\"name\":" : "{\"ph\":\"e\",\"name\":";
  append_json_string(out, range.name ? range.name : "");
  append_cat(out, snap, range.domain_id);
  char id[32];
  std::snprintf(id, sizeof id, ",\"id\":\"0x%llx\"", static_cast<unsigned long long>(e.async_id()));
  out += id;
  append_ts(out, snap, e.start);
  out += ",\"pid\":" + std::to_string(snap.pid) + ",\"tid\":" + std::to_string(tid);
  if (begin) {
    append_args(out, snap, e.domain_id, e.attrs);
    out += "}}";
  } else {
    out += "}";
  }
}

// One GPU replay: its own track (tid) in the process, the CPU range's name, category "<domain>,gpu"
// so that CPU readers that select a domain never mistake it for a range of that domain.
void append_gpu_event(std::string &out, const Snapshot &snap, const ThreadSnapshot &track,
                      const std::string &cat, uint32_t gpu_domain_id, const Event &e) {
  out += "{\"ph\":\"X\",\"name\":";
  append_json_string(out, e.attrs.name ? e.attrs.name : "");
  out += ",\"cat\":";
  append_json_string(out, cat);
  out += ",\"ts\":";
  const uint64_t start_ns = track.start_ns(snap.scale, e);
  append_micros(out, start_ns >= snap.origin_ns ? start_ns - snap.origin_ns : 0);
  out += ",\"dur\":";
  append_micros(out, track.span_ns(snap.scale, e));
  out += ",\"pid\":" + std::to_string(snap.pid) + ",\"tid\":" + std::to_string(track.tid);
  out += ",\"args\":{\"replay\":" + std::to_string(e.attrs.payload.u) +
         ",\"category\":" + std::to_string(e.attrs.category);
  if (const std::string *name = snap.category_name(gpu_domain_id, e.attrs.category)) {
    out += ",\"categoryName\":";
    append_json_string(out, *name);
  }
  out += "}}";
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
  s->error = common::write_all(s->fd, piece.data(), piece.size());
  return s->error == 0;
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
  // GPU tracks: named like threads, listed after them (sort index), one per (device, stream).
  for (const ThreadSnapshot &t : snap.gpu_tracks) {
    out += ",\n";
    append_metadata(out, "thread_name", snap.pid, t.tid, t.name);
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + std::to_string(snap.pid) +
           ",\"tid\":" + std::to_string(t.tid) +
           ",\"args\":{\"sort_index\":" + std::to_string(t.tid) + "}}";
  }
  // The footer's count is the events written above, never a figure from elsewhere: a trace's
  // counts always equal what it holds.
  uint64_t written = 0, marks = 0, async_written = 0;
  // A start/end range is written only when both halves are known, its end once.
  std::vector<bool> end_written(snap.async_ranges.size(), false);
  for (const ThreadSnapshot &t : snap.threads) {
    MergedEvents events(snap, t);
    while (const Event *e = events.next()) {
      switch (e->kind()) {
        case EventKind::range:
          out += ",\n";
          append_event(out, snap, t.tid, *e);
          ++written;
          break;
        case EventKind::mark:
          out += ",\n";
          append_mark(out, snap, t.tid, *e);
          ++marks;
          break;
        case EventKind::async_begin:
        case EventKind::async_end: {
          const uint64_t id = e->async_id();
          if (id >= snap.async_ranges.size() || !snap.async_ranges[id].complete()) break;
          if (e->kind() == EventKind::async_end) {
            if (end_written[id]) break;
            end_written[id] = true;
          } else {
            ++async_written;
          }
          out += ",\n";
          append_async(out, snap, t.tid, *e, snap.async_ranges[id]);
          break;
        }
      }
      if (!flush_if_full()) return false;
    }
  }
  uint64_t gpu_written = 0;
  const std::string gpu_cat = snap.gpu_domain + ",gpu";
  uint32_t gpu_domain_id = UINT32_MAX;
  for (uint32_t id = 0; id < snap.domain_names.size(); ++id)
    if (snap.domain_names[id] == snap.gpu_domain) gpu_domain_id = id;
  for (const ThreadSnapshot &t : snap.gpu_tracks) {
    GpuReplays replays(snap, t);
    while (const Event *e = replays.next()) {
      out += ",\n";
      append_gpu_event(out, snap, t, gpu_cat, gpu_domain_id, *e);
      ++gpu_written;
      if (!flush_if_full()) return false;
    }
  }
  out += "\n],\n\"displayTimeUnit\":\"ns\",\n\"ferrumReplay\":{\"version\":1";
  out += ",\"pid\":" + std::to_string(snap.pid);
  out += ",\"ranges\":" + std::to_string(written);
  out += ",\"marks\":" + std::to_string(marks);
  out += ",\"startEndRanges\":" + std::to_string(async_written);
  out += ",\"rejectedPushes\":" + std::to_string(snap.rejected_pushes);
  out += ",\"protocolErrors\":{\"popWithoutPush\":" + std::to_string(snap.errors.pop_without_push) +
         ",\"popWrongDomain\":" + std::to_string(snap.errors.pop_wrong_domain) +
         ",\"openAtExit\":" + std::to_string(snap.errors.open_at_exit) +
         ",\"endUnknownId\":" + std::to_string(snap.errors.end_unknown_id) +
         ",\"startOpenAtExit\":" + std::to_string(snap.errors.start_open_at_exit) + "}";
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
         ",\"originRealtimeNs\":" + std::to_string(snap.origin_realtime_ns) +
         "},\"clockSource\":\"" + snap.clock_source + "\"";
  if (snap.gpu.registered)
    out += ",\"gpu\":{\"timed\":" + std::to_string(gpu_written) +
           ",\"inFlightAtExit\":" + std::to_string(snap.gpu.in_flight) +
           ",\"notTimed\":" + std::to_string(snap.gpu.not_timed + snap.gpu.dropped) +
           ",\"alignErrorNs\":" + std::to_string(snap.gpu.align_error_ns) + "}";
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

std::string numbered_path(const std::string &path, unsigned long n) {
  std::string out(path.size() + 24, '\0');
  if (!common::fresh_name_within(path.c_str(), n, out.data(), out.size())) return path;
  out.resize(std::strlen(out.c_str()));
  return out;
}

namespace {

struct StreamSink {
  common::Stream stream;
  int error = 0;
};

bool stream_sink(const std::string &piece, void *context) {
  auto *s = static_cast<StreamSink *>(context);
  s->error = common::stream_write(&s->stream, piece.data(), piece.size());
  return s->error == 0;
}

bool write_trace_stream(const std::string &path, const Snapshot &snap, TraceFileOutcome *outcome) {
  outcome->stream = true;
  StreamSink sink;
  int err = common::open_stream(path.c_str(), &sink.stream);
  if (err == 0) {
    render_trace(snap, stream_sink, &sink);
    err = sink.error;
    common::close_stream(&sink.stream);
  }
  if (err == 0) {
    outcome->written_path = path;
    return true;
  }
  outcome->error = std::strerror(err);
  if (err == ETIMEDOUT)
    outcome->error += " (its reader made no room for 2 s; the trace is incomplete)";
  else
    outcome->error += common::stream_error_note(err);
  return false;
}

bool is_our_trace(const char *path, void *) {
  return is_ferrum_trace_file(path);
}

}  // namespace

bool write_trace_file(const std::string &path, const Snapshot &snap,
                      const TraceFileOptions &options, TraceFileOutcome *result) {
  // Filled locally: `path` may be result->written_path of an earlier call.
  TraceFileOutcome local;
  TraceFileOutcome *outcome = &local;
  const auto done = [&](bool ok) {
    *result = std::move(local);
    return ok;
  };
  if (path.empty() || path.back() == '/') {
    outcome->error = std::strerror(path.empty() ? ENOENT : EISDIR);
    return done(false);
  }
  if (common::is_stream_target(path.c_str())) return done(write_trace_stream(path, snap, outcome));

  static constexpr char kHeader[] = "{\"traceEvents\":[";
  common::remove_dead_temps(path.c_str(), kHeader);
  char tmp_name[8192];
  const int fd = common::create_temp_beside(path.c_str(), tmp_name, sizeof tmp_name);
  if (fd < 0) {
    outcome->error = std::strerror(-fd);
    return done(false);
  }
  const std::string tmp = tmp_name;
  FdSink sink{fd};
  bool ok = render_trace(snap, fd_sink, &sink);
  int err = sink.error;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok) {
    char dir[8192];
    const int lock = common::directory_of(path.c_str(), dir, sizeof dir)
                         ? common::lock_output_dir(dir, options.lock_timeout_ms)
                         : -1;
    outcome->unlocked = lock < 0;
    common::PlaceRequest request;
    request.force = options.force;
    request.locked = lock >= 0;
    request.run_start_ns = options.run_start_ns;
    request.ours = is_our_trace;
    common::PlaceResult placed_as;
    char placed[8192];
    err =
        common::place_output(tmp.c_str(), path.c_str(), request, placed, sizeof placed, &placed_as);
    common::unlock_output_dir(lock);
    if (err == 0) outcome->written_path = placed;
    outcome->diverted = placed_as.diverted;
    outcome->sibling = placed_as.sibling;
    outcome->foreign_regular = placed_as.foreign_regular;
    ok = err == 0;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    outcome->written_path.clear();
    outcome->error = std::strerror(err ? err : EIO);
  }
  return done(ok);
}

bool write_trace_file(const std::string &path, const Snapshot &snap, std::string *error) {
  TraceFileOutcome outcome;
  const bool ok = write_trace_file(path, snap, TraceFileOptions{}, &outcome);
  if (!ok) *error = outcome.error;
  return ok;
}

}  // namespace ferrum_replay::recorder
