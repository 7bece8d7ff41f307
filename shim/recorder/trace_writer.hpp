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

// Writes the trace to `path` via a temporary file in the same directory and rename(), so that a
// reader never sees half a trace and an existing file is replaced atomically. The temporary is
// created O_EXCL|O_NOFOLLOW with mode 0644 (minus umask). On failure returns false and sets
// `error` to a strerror text; no temporary file is left behind.
bool write_trace_file(const std::string &path, const Snapshot &snap, std::string *error);

}  // namespace ferrum_replay::recorder
