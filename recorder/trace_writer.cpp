#include "trace_writer.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "error_text.hpp"
#include "json_text.hpp"
#include "name_pages.hpp"
#include "output_file.hpp"
#include "own_descriptor.hpp"
#include "range_tracks.hpp"
#include "spill_file.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::recorder {

namespace {

// The trace is formatted into one buffer that is handed to the sink whenever it holds `chunk`
// bytes: each event asks for room for the most it can take (begin), writes with the write_*
// functions of json_text.hpp, and says where it ended (end). No allocation per event, no printf.
class TraceOut {
 public:
  TraceOut(TraceSink sink, void *context, size_t chunk)
      : sink_(sink), context_(context), chunk_(chunk), buffer_(chunk + kSlack) {}

  // Where to write up to `n` more bytes (a name longer than the buffer grows it).
  char *begin(size_t n) {
    if (buffer_.size() - used_ < n) buffer_.resize(used_ + n);
    return buffer_.data() + used_;
  }
  void end(const char *p) { used_ = static_cast<size_t>(p - buffer_.data()); }

  void text(std::string_view s);
  void string(std::string_view s) { end(write_json_string(begin(json_string_bound(s.size())), s)); }
  void number(uint64_t v) { end(write_u64(begin(kU64Chars), v)); }

  bool flush_if_full() { return used_ < chunk_ || flush(); }
  bool flush() {
    const bool ok = sink_(buffer_.data(), used_, context_);
    used_ = 0;
    return ok;
  }

 private:
  static constexpr size_t kSlack = 64 << 10;
  TraceSink sink_;
  void *context_;
  size_t chunk_;
  std::vector<char> buffer_;
  size_t used_ = 0;
};

// Literal text, its length known at compile time.
template <size_t N>
char *put(char *p, const char (&literal)[N]) {
  std::memcpy(p, literal, N - 1);
  return p + N - 1;
}
char *put(char *p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

void TraceOut::text(std::string_view s) {
  end(put(begin(s.size()), s));
}

// The most an event writes besides its strings and the prepared pieces below.
constexpr size_t kEventRoom = 384;

// Pieces every event of a kind repeats, escaped once per trace instead of once per event.
class Prepared {
 public:
  explicit Prepared(const Snapshot &snap) : snap_(snap), name_pages_(snap.name_blocks) {
    for (const std::string &d : snap.domain_names) cats_.push_back(cat(d));
    unknown_cat_ = cat("?");
    for (const auto &[key, name] : snap.category_names) {
      std::string piece(",\"categoryName\":");
      append_json_string(piece, name);
      piece.shrink_to_fit();  // see cat()
      category_names_.emplace(key, std::move(piece));
    }
  }
  static std::string cat(std::string_view domain) {
    std::string piece(",\"cat\":");
    append_json_string(piece, domain);
    // Escaping reserves room for the worst case (6 bytes a byte): kept for every domain and
    // category name, that was 24 KB for each 4 KB name (+269 MB at exit for 8,192 of them).
    piece.shrink_to_fit();
    return piece;
  }
  // ,"cat":"<domain>"
  const std::string &domain(uint32_t domain_id) const {
    return domain_id < cats_.size() ? cats_[domain_id] : unknown_cat_;
  }
  // ,"categoryName":"<name>", or nullptr when the program named none (Snapshot::category_name).
  // Remembered, found or not, in a small direct-mapped cache: a trace's events use few.
  const std::string *category_name(uint32_t domain_id, uint32_t category) {
    if (category_names_.empty()) return nullptr;
    const std::pair<uint32_t, uint32_t> key{domain_id, category};
    Cached &c = cache_[(category ^ (domain_id * 0x9E3779B1u)) % kCacheSize];
    if (!c.valid || c.key != key) {
      const auto it = category_names_.find(key);
      c = Cached{true, key, it == category_names_.end() ? nullptr : &it->second};
    }
    return c.name;
  }
  // "<name>", escaped: remembered per name pointer in a direct-mapped cache (a name's pointer
  // stands for one text for the whole report: event.hpp, RangeAttrs), since a trace's events
  // repeat few names and escaping is most of what writing one costs. name() says how much room
  // the name needs; put_name() writes it — escaped straight into the output on a miss, then
  // copied into the cache at its exact size when short (a name that is long or never repeats
  // costs what it did without the cache, and the cache at most 4096 x kMaxCachedName bytes).
  struct Name {
    const char *key;
    std::string_view raw;  // set on a miss only
    size_t room;
    bool hit;
  };
  Name name(const char *name) {
    const Named &n = slot(name);
    if (n.valid && n.key == name) return Name{name, {}, n.json.size(), true};
    name_pages_.read(name);
    const std::string_view raw = name ? std::string_view(name) : std::string_view();
    return Name{name, raw, json_string_bound(raw.size()), false};
  }
  char *put_name(char *p, const Name &name) {
    Named &n = slot(name.key);
    if (name.hit) return put(p, n.json);
    char *const end = write_json_string(p, name.raw);
    if (static_cast<size_t>(end - p) <= kMaxCachedName) {
      n.valid = true;
      n.key = name.key;
      n.json.assign(p, end);
    }
    return end;
  }
  // ,"pid":P,"tid":T
  std::string ids(uint32_t tid) const {
    char buf[64];
    char *p = put(buf, ",\"pid\":");
    p = write_i64(p, snap_.pid);
    p = put(p, ",\"tid\":");
    p = write_u64(p, tid);
    return std::string(buf, p);
  }

 private:
  const Snapshot &snap_;
  NamePages name_pages_;  // the pages of names read on a miss go back to their files
  std::vector<std::string> cats_;
  std::string unknown_cat_;
  std::map<std::pair<uint32_t, uint32_t>, std::string> category_names_;
  struct Cached {
    bool valid = false;
    std::pair<uint32_t, uint32_t> key;
    const std::string *name = nullptr;
  };
  static constexpr size_t kCacheSize = 64;
  Cached cache_[kCacheSize];
  struct Named {
    bool valid = false;
    const char *key = nullptr;
    std::string json;
  };
  static constexpr unsigned kNamesBits = 52;     // 2^(64 - 52) = 4096 entries
  static constexpr size_t kMaxCachedName = 512;  // escaped bytes
  Named &slot(const char *name) {
    return names_[(reinterpret_cast<uintptr_t>(name) * 0x9E3779B97F4A7C15u) >> kNamesBits];
  }
  std::vector<Named> names_ = std::vector<Named>(size_t{1} << (64 - kNamesBits));
};

char *write_payload(char *p, const Payload &payload) {
  switch (payload.kind) {
    case PayloadKind::u64:
      return write_u64(p, payload.u);
    case PayloadKind::i64:
      return write_i64(p, payload.i);
    case PayloadKind::f64:
      return write_json_double(p, payload.d);
    case PayloadKind::none:
      break;
  }
  return put(p, "null");
}

void append_metadata(TraceOut &out, const char *what, long pid, uint32_t tid,
                     const std::string &name) {
  out.text("{\"ph\":\"M\",\"name\":\"");
  out.text(what);
  out.text("\",\"pid\":");
  out.end(write_i64(out.begin(kI64Chars), pid));
  out.text(",\"tid\":");
  out.number(tid);
  out.text(",\"args\":{\"name\":");
  out.string(name);
  out.text("}}");
}

char *write_ts(char *p, const Snapshot &snap, uint64_t start_ns) {
  p = put(p, ",\"ts\":");
  return write_micros(p, start_ns >= snap.origin_ns ? start_ns - snap.origin_ns : 0);
}

// The room an event with this name and category takes.
size_t strings_room(const Prepared::Name &name, const std::string *category_name) {
  return kEventRoom + name.room + (category_name ? category_name->size() : 0);
}

// "args" without its closing brace: category (and its name when the program named it), payload
// and colour when the caller set them.
char *write_args(char *p, const RangeAttrs &attrs, const std::string *category_name) {
  p = put(p, ",\"args\":{\"category\":");
  p = write_u64(p, attrs.category);
  if (category_name) p = put(p, *category_name);
  if (attrs.payload.kind != PayloadKind::none) {
    p = put(p, ",\"payload\":");
    p = write_payload(p, attrs.payload);
  }
  if (attrs.has_color) {
    // Alpha is dropped: "#rrggbb" is what every viewer and person understands.
    p = put(p, ",\"color\":\"#");
    p = write_hex(p, attrs.color & 0xFFFFFFu, 6);
    *p++ = '"';
  }
  return p;
}

// A push/pop range ("X") or a mark ("i": an instant on its thread's track, a range's args but
// no depth).
void append_event(TraceOut &out, const Snapshot &snap, Prepared &prepared, const std::string &ids,
                  const Event &e) {
  const bool range = e.kind() == EventKind::range;
  const Prepared::Name name = prepared.name(e.attrs.name);
  const std::string &cat = prepared.domain(e.domain_id);
  const std::string *category_name = prepared.category_name(e.domain_id, e.attrs.category);
  char *p = out.begin(strings_room(name, category_name) + cat.size() + ids.size());
  p = range ? put(p, ",\n{\"ph\":\"X\",\"name\":")
            : put(p, ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":");
  p = prepared.put_name(p, name);
  p = put(p, cat);
  p = write_ts(p, snap, snap.scale.to_ns(e.start));
  if (range) {
    p = put(p, ",\"dur\":");
    p = write_micros(p, snap.scale.span_ns(e.start, e.end));
  }
  p = put(p, ids);
  p = write_args(p, e.attrs, category_name);
  if (range) {
    p = put(p, ",\"depth\":");
    p = write_u64(p, e.depth);
  }
  out.end(put(p, "}}"));
}

// One half of a start/end range: "b" where it started, "e" where it ended (maybe another thread),
// both with the begin's name and domain and the range's id, so that viewers pair them.
void append_async(TraceOut &out, const Snapshot &snap, Prepared &prepared, const std::string &ids,
                  const Event &e, const AsyncRange &range) {
  const bool begin = e.kind() == EventKind::async_begin;
  const Prepared::Name name = prepared.name(range.name);
  const std::string &cat = prepared.domain(range.domain_id);
  const std::string *category_name =
      begin ? prepared.category_name(e.domain_id, e.attrs.category) : nullptr;
  char *p = out.begin(strings_room(name, category_name) + cat.size() + ids.size());
  p = begin ? put(p, ",\n{\"ph\":\"b\",\"name\":") : put(p, ",\n{\"ph\":\"e\",\"name\":");
  p = prepared.put_name(p, name);
  p = put(p, cat);
  p = put(p, ",\"id\":\"0x");
  p = write_hex(p, e.async_id());
  *p++ = '"';
  p = write_ts(p, snap, snap.scale.to_ns(e.start));
  p = put(p, ids);
  if (begin) {
    p = write_args(p, e.attrs, category_name);
    p = put(p, "}}");
  } else {
    *p++ = '}';
  }
  out.end(p);
}

// One GPU replay: its own track (tid) in the process, the CPU range's name, category "<domain>,gpu"
// so that CPU readers that select a domain never mistake it for a range of that domain.
void append_gpu_event(TraceOut &out, const Snapshot &snap, Prepared &prepared,
                      const ThreadSnapshot &track, const std::string &ids, const std::string &cat,
                      uint32_t gpu_domain_id, const Event &e) {
  const Prepared::Name name = prepared.name(e.attrs.name);
  const std::string *category_name = prepared.category_name(gpu_domain_id, e.attrs.category);
  char *p = out.begin(strings_room(name, category_name) + cat.size() + ids.size());
  p = put(p, ",\n{\"ph\":\"X\",\"name\":");
  p = prepared.put_name(p, name);
  p = put(p, cat);
  p = write_ts(p, snap, track.start_ns(snap.scale, e));
  p = put(p, ",\"dur\":");
  p = write_micros(p, track.span_ns(snap.scale, e));
  p = put(p, ids);
  p = put(p, ",\"args\":{\"replay\":");
  p = write_u64(p, e.attrs.payload.u);
  p = put(p, ",\"category\":");
  p = write_u64(p, e.attrs.category);
  if (category_name) p = put(p, *category_name);
  out.end(put(p, "}}"));
}

bool string_sink(const char *data, size_t size, void *context) {
  static_cast<std::string *>(context)->append(data, size);
  return true;
}

// The temporary the trace is written to, proved ours before each write (own_descriptor.hpp): a
// thread of the program that closed our number and opened its own file there got the rest of
// the trace in that file (26 MB of JSON in a program's log).
struct FileSink {
  common::OwnDescriptor file;
  int error = 0;
  bool kept_room = false;  // stopped by SpillFile::Room::trace, not by the file system
};

bool file_sink(const char *data, size_t size, void *context) {
  auto *s = static_cast<FileSink *>(context);
  // Never the file system's last room (SpillFile::Room::trace): a long run's trace (108 bytes a
  // mark, gigabytes in all) filled it while the program and its neighbours wrote there too.
  s->error =
      s->file.ours() ? SpillFile::room_on(s->file.get(), size, SpillFile::Room::trace) : EBADF;
  s->kept_room = s->error == ENOSPC;
  if (s->error == 0) s->error = s->file.write_all(data, size);
  return s->error == 0;
}

}  // namespace

bool render_trace(const Snapshot &snap, TraceSink sink, void *context, size_t chunk) {
  TraceOut out(sink, context, chunk);
  Prepared prepared(snap);

  out.text("{\"traceEvents\":[\n");
  append_metadata(out, "process_name", snap.pid, static_cast<uint32_t>(snap.pid),
                  snap.process_name);
  for (const ThreadSnapshot &t : snap.threads) {
    out.text(",\n");
    append_metadata(out, "thread_name", snap.pid, t.tid, t.name);
  }
  // GPU tracks: named like threads, listed after them (sort index), one per (device, stream).
  for (const ThreadSnapshot &t : snap.gpu_tracks) {
    out.text(",\n");
    append_metadata(out, "thread_name", snap.pid, t.tid, t.name);
    out.text(",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\"");
    out.text(prepared.ids(t.tid));
    out.text(",\"args\":{\"sort_index\":");
    out.number(t.tid);
    out.text("}}");
  }
  // The footer's count is the events written above, never a figure from elsewhere: a trace's
  // counts always equal what it holds.
  uint64_t written = 0, marks = 0, async_written = 0;
  // A start/end range is written only when both halves are known, its end once
  // (AsyncRange::end_written: cleared first, for a snapshot rendered again).
  for (const auto &entry : snap.async_ranges) entry.second.end_written = false;
  uint32_t next_moved_tid = kMovedTrackTidBase;
  for (const ThreadSnapshot &t : snap.threads) {
    const std::string ids = prepared.ids(t.tid);
    // Ranges of a domain that do not nest with the thread's others go to tracks of their own
    // (range_tracks.hpp): their ids by track, [0] the thread's.
    RangeTracks tracks;
    std::vector<std::string> track_ids{ids};
    MergedEvents events(snap, t);
    while (const Event *e = events.next()) {
      switch (e->kind()) {
        case EventKind::range: {
          // The times as the trace writes them (write_ts, and the duration after it).
          const uint64_t start_ns = snap.scale.to_ns(e->start);
          const uint64_t ts = start_ns >= snap.origin_ns ? start_ns - snap.origin_ns : 0;
          const RangeTracks::Placement placed =
              tracks.place(e->domain_id, ts, ts + snap.scale.span_ns(e->start, e->end));
          if (placed.is_new) {
            const uint32_t tid = next_moved_tid++;
            track_ids.push_back(prepared.ids(tid));
            const uint32_t domain_id = tracks.domain_of(placed.track);
            out.text(",\n");
            append_metadata(out, "thread_name", snap.pid, tid,
                            t.name + " \xC2\xB7 " +
                                (domain_id < snap.domain_names.size() ? snap.domain_names[domain_id]
                                                                      : std::string("?")));
          }
          append_event(out, snap, prepared, track_ids[placed.track], *e);
          ++written;
          break;
        }
        case EventKind::mark:
          append_event(out, snap, prepared, ids, *e);
          ++marks;
          break;
        case EventKind::async_begin:
        case EventKind::async_end: {
          const AsyncRange *range = snap.async_range(e->async_id());
          if (!range || !range->complete()) break;
          if (e->kind() == EventKind::async_end) {
            if (range->end_written) break;
            range->end_written = true;
          } else {
            ++async_written;
          }
          append_async(out, snap, prepared, ids, *e, *range);
          break;
        }
      }
      if (!out.flush_if_full()) return false;
    }
  }
  uint64_t gpu_written = 0;
  const std::string gpu_cat = Prepared::cat(snap.gpu_domain + ",gpu");
  uint32_t gpu_domain_id = UINT32_MAX;
  for (uint32_t id = 0; id < snap.domain_names.size(); ++id)
    if (snap.domain_names[id] == snap.gpu_domain) gpu_domain_id = id;
  for (const ThreadSnapshot &t : snap.gpu_tracks) {
    const std::string ids = prepared.ids(t.tid);
    GpuReplays replays(snap, t);
    while (const Event *e = replays.next()) {
      append_gpu_event(out, snap, prepared, t, ids, gpu_cat, gpu_domain_id, *e);
      ++gpu_written;
      if (!out.flush_if_full()) return false;
    }
  }
  out.text("\n],\n\"displayTimeUnit\":\"ns\",\n\"ferrumReplay\":{\"version\":1,\"pid\":");
  out.end(write_i64(out.begin(kI64Chars), snap.pid));
  const auto field = [&out](std::string_view key, uint64_t value) {
    out.text(key);
    out.number(value);
  };
  field(",\"ranges\":", written);
  field(",\"marks\":", marks);
  field(",\"startEndRanges\":", async_written);
  field(",\"rejectedPushes\":", snap.rejected_pushes);
  if (snap.reentrant_drops) field(",\"droppedInSignalHandlers\":", snap.reentrant_drops);
  if (snap.memory_drops) field(",\"droppedForMemory\":", snap.memory_drops);
  if (snap.depth_drops) field(",\"droppedBeyondDepth\":", snap.depth_drops);
  if (snap.async_beyond_room) field(",\"droppedStartEndBeyondPairing\":", snap.async_beyond_room);
  field(",\"protocolErrors\":{\"popWithoutPush\":", snap.errors.pop_without_push);
  field(",\"popWrongDomain\":", snap.errors.pop_wrong_domain);
  field(",\"openAtExit\":", snap.errors.open_at_exit);
  field(",\"endUnknownId\":", snap.errors.end_unknown_id);
  field(",\"startOpenAtExit\":", snap.errors.start_open_at_exit);
  out.text("}");
  // Of those, the shim's own (its domain's push/pop errors): what `check` judges the shim's
  // balance on, the program's own NVTX habits (an outer range left open at exit) being its own.
  if (snap.shim_domain_known) {
    out.text(",\"shimDomain\":{\"name\":");
    out.string(snap.gpu_domain);
    field(",\"protocolErrors\":{\"popWithoutPush\":", snap.shim_errors.pop_without_push);
    field(",\"popWrongDomain\":", snap.shim_errors.pop_wrong_domain);
    field(",\"openAtExit\":", snap.shim_errors.open_at_exit);
    out.text("}");
    if (snap.shim_reentrant_drops)
      field(",\"droppedInSignalHandlers\":", snap.shim_reentrant_drops);
    if (snap.shim_depth_drops) field(",\"droppedBeyondDepth\":", snap.shim_depth_drops);
    // Launches a running thread was still inside when the report was taken: no range of theirs
    // here, and no protocol error either (Snapshot::shim_in_flight).
    if (snap.shim_in_flight) field(",\"launchesInFlightAtExit\":", snap.shim_in_flight);
    out.text("}");
  }
  out.text(",\"domains\":[");
  bool first = true;
  for (const std::string &d : snap.used_domains()) {
    if (!first) out.text(",");
    first = false;
    out.string(d);
  }
  out.text("]");
  // Where and when: lets `ferrum-replay merge` put several processes' traces on one time line
  // (monotonic origins on one host, wall-clock origins across hosts) and name them by rank.
  out.text(",\"host\":");
  out.string(snap.host);
  if (!snap.process_start.empty()) {
    out.text(",\"processStart\":");
    out.string(snap.process_start);
  }
  field(",\"clock\":{\"originMonotonicNs\":", snap.origin_ns);
  field(",\"originRealtimeNs\":", snap.origin_realtime_ns);
  out.text("},\"clockSource\":\"");
  out.text(snap.clock_source);
  out.text("\"");
  if (snap.gpu.registered) {
    field(",\"gpu\":{\"timed\":", gpu_written);
    field(",\"inFlightAtExit\":", snap.gpu.in_flight);
    field(",\"notTimed\":", snap.gpu.not_timed + snap.gpu.dropped);
    field(",\"alignErrorNs\":", snap.gpu.align_error_ns);
    out.text("}");
  }
  if (!snap.rank_variable.empty()) {
    out.text(",\"rank\":{\"variable\":");
    out.string(snap.rank_variable);
    out.text(",\"value\":");
    out.string(snap.rank_value);
    out.text("}");
  }
  // Last before the trailer, within the 64 KiB that is_ferrum_trace_file reads: the wrapper
  // reads them from there (scripts/ferrum_replay_traces.py, written_for).
  if (!snap.output_path.empty()) {
    out.text(",\"output\":");
    out.string(snap.output_path);
  }
  if (!snap.session.empty()) {
    out.text(",\"session\":");
    out.string(snap.session);
  }
  out.text(kTraceTrailer);
  return out.flush();
}

std::string render_trace(const Snapshot &snap) {
  std::string out;
  render_trace(snap, string_sink, &out);
  return out;
}

bool is_ferrum_trace_file(const std::string &path) {
  common::OwnDescriptor file(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
                             path.c_str());
  if (!file) return false;
  const int fd = file.get();  // read with pread only: a number the program took meanwhile
                              // keeps its offset; the bytes read are then judged, not harmed
  bool ours = false;
  struct stat st;
  // Another user's trace is theirs, as another user's summary is (is_own_file_starting_with):
  // in a directory several users write to, a run replaced a colleague's trace.
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
    static constexpr char kHead[] = "{\"traceEvents\":[";
    static constexpr char kMarker[] = "\"ferrumReplay\":{\"version\":";
    char head[sizeof kHead - 1];
    // Our block is at the very end, after the event list. It ends with kTraceTrailer; traces
    // written before the trailer existed (and `merge`'s) have the block's start in their last
    // 64 KiB. The start alone is not enough: the block's list of domain names has no fixed
    // length, and a process with 64 KiB of domain names found its own earlier trace "not a
    // ferrum-replay trace" and wrote a new copy beside it on every run.
    std::string tail(st.st_size < 65536 ? static_cast<size_t>(st.st_size) : 65536, '\0');
    const std::string_view trailer(kTraceTrailer);
    if (::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
        std::memcmp(head, kHead, sizeof head) == 0 &&
        ::pread(fd, tail.data(), tail.size(), st.st_size - static_cast<off_t>(tail.size())) ==
            static_cast<ssize_t>(tail.size()))
      ours = std::string_view(tail).substr(tail.size() - std::min(tail.size(), trailer.size())) ==
                 trailer ||
             tail.find(kMarker) != std::string::npos;
  }
  return ours && file.ours();  // (closed as it goes, if still ours)
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

bool stream_sink(const char *data, size_t size, void *context) {
  auto *s = static_cast<StreamSink *>(context);
  s->error = common::stream_write(&s->stream, data, size);
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
  outcome->error = common::error_text(err);
  std::string note = common::stream_error_note(err);
  if (err == ETIMEDOUT) note.insert(note.size() - 1, "; the trace is incomplete");  // in the ()
  outcome->error += note;
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
    outcome->error = common::error_text(path.empty() ? ENOENT : EISDIR);
    return done(false);
  }
  if (common::is_stream_target(path.c_str())) return done(write_trace_stream(path, snap, outcome));

  static constexpr char kHeader[] = "{\"traceEvents\":[";
  common::remove_dead_temps(path.c_str(), kHeader, options.path_of_pid,
                            options.path_of_pid_context);
  char tmp_name[8192];
  const int fd = common::create_temp_beside(path.c_str(), tmp_name, sizeof tmp_name);
  if (fd < 0) {
    outcome->error = common::error_text(-fd);
    return done(false);
  }
  const std::string tmp = tmp_name;
  FileSink sink{common::OwnDescriptor(fd, tmp_name)};
  sink.file.move_high();  // held for the whole rendering: out of reach of the program's opens
  bool ok = false;
  try {
    ok = render_trace(snap, file_sink, &sink);
  } catch (const std::bad_alloc &) {  // the host's memory ran out: no trace, and no temporary
    sink.error = ENOMEM;
  }
  int err = sink.error;
  if (const int closed = sink.file.close(); closed != 0 && ok) {
    ok = false;
    err = closed;
  }
  if (ok) {
    char dir[8192];
    const int lock = common::directory_of(path.c_str(), dir, sizeof dir)
                         ? common::lock_output_dir(dir, options.lock_timeout_ms)
                         : -ENAMETOOLONG;
    if (lock < 0) {
      char why[256];
      common::describe_lock_failure(lock, options.lock_timeout_ms, why, sizeof why);
      outcome->unlocked = why;
    }
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
    outcome->error = common::error_text(err ? err : EIO);
    if (err == EBADF)
      outcome->error +=
          " (a thread of the program closed the temporary's descriptor while the "
          "trace was written; nothing was written into whatever it opened since)";
    else if (sink.kept_room)
      outcome->error +=
          " (the trace stops short of the file system's last 10 % or 256 MiB, whichever is "
          "less: room its other writers need; FERRUM_RECORD_OUT elsewhere)";
  }
  common::temp_finished();
  return done(ok);
}

bool write_trace_file(const std::string &path, const Snapshot &snap, std::string *error) {
  TraceFileOutcome outcome;
  const bool ok = write_trace_file(path, snap, TraceFileOptions{}, &outcome);
  if (!ok) *error = outcome.error;
  return ok;
}

}  // namespace ferrum_replay::recorder
