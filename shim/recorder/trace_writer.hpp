// The trace file: Chrome trace-event JSON, which Perfetto and chrome://tracing open directly.
//
//   {"traceEvents": [
//      {"ph":"M","name":"process_name","pid":P,"tid":P,"args":{"name":"comm"}},
//      {"ph":"M","name":"thread_name","pid":P,"tid":T,"args":{"name":"..."}},
//      {"ph":"X","name":"prefill","cat":"ferrum-replay","ts":12.345,"dur":6.789,"pid":P,"tid":T,
//       "args":{"category":0,"payload":7,"color":"#ff00ff","depth":0}}, ...],
//    "displayTimeUnit": "ns",
//    "ferrumReplay": {"version":1,"pid":P,"ranges":N,"rejectedPushes":N,
//                     "protocolErrors":{"popWithoutPush":N,"popWrongDomain":N,"openAtExit":N},
//                     "domains":["ferrum-replay","global"],"host":"name",
//                     "clock":{"originMonotonicNs":N,"originRealtimeNs":N},
//                     "rank":{"variable":"RANK","value":"3"}}}      (rank only in a job rank)
//
// ts/dur are microseconds with three decimals (ns resolution), ts relative to the recorder's
// start (clock.originMonotonicNs; originRealtimeNs is the same instant in wall-clock time, both
// integers in ns); cat is the domain name, "global" for NVTX's default domain; payload and color
// appear only when the caller set them; depth is the level push returned. "X" events of one
// thread are in start order with enclosing ranges first.
#pragma once

#include <string>

#include "snapshot.hpp"

namespace ferrum_replay::recorder {

// Receives the JSON text in pieces; returns false to stop (a write error).
using TraceSink = bool (*)(const std::string &piece, void *context);

// Streams the whole document to `sink` in pieces of roughly `chunk` bytes, so that a long run's
// trace is never held in memory twice. Returns false if the sink failed.
bool render_trace(const Snapshot &snap, TraceSink sink, void *context, size_t chunk = 1 << 20);

// Convenience for tests: the whole document as one string.
std::string render_trace(const Snapshot &snap);

// Writing the trace file safely. The trace goes to a temporary file in the same directory
// (created O_EXCL|O_NOFOLLOW, mode 0644 minus umask), which then takes the requested name in one
// step, so that a reader never sees half a trace. What is at that name decides how:
//   - nothing: the temporary is renamed with RENAME_NOREPLACE (or hard-linked), so a file that
//     appears meanwhile is never clobbered;
//   - an earlier ferrum-replay trace (a regular file that starts with {"traceEvents":[ and
//     carries our "ferrumReplay" block): replaced atomically by rename;
//   - a directory: an error (EISDIR);
//   - anything else (another program's file, a symbolic link, a FIFO, a device): left alone;
//     the trace goes to the first free name of NAME.1.EXT, NAME.2.EXT, ... and `diverted` is set.
//     With force (FERRUM_RECORD_FORCE=1) an existing regular file or symbolic link is replaced
//     instead; the link itself is replaced, never followed. Special files are never replaced.
// Nothing ever opens the requested name for writing, so a planted symbolic link can never
// redirect or truncate another file.
struct TraceFileOptions {
  bool force = false;
};
struct TraceFileOutcome {
  std::string written_path;  // where the trace is, when written
  bool diverted = false;     // the requested name held something that is not our trace
  std::string error;         // strerror text, when not written
};
bool write_trace_file(const std::string &path, const Snapshot &snap,
                      const TraceFileOptions &options, TraceFileOutcome *outcome);

// The default options; on failure returns false and sets `error` to a strerror text. No
// temporary file is left behind either way.
bool write_trace_file(const std::string &path, const Snapshot &snap, std::string *error);

// Whether `path` is a regular file (not a symbolic link) that holds a ferrum-replay trace.
bool is_ferrum_trace_file(const std::string &path);

// NAME.EXT -> NAME.N.EXT (NAME.N without an extension); the directory part is kept.
std::string numbered_path(const std::string &path, unsigned n);

}  // namespace ferrum_replay::recorder
