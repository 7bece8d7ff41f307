// The trace file: Chrome trace-event JSON, which Perfetto and chrome://tracing open directly.
//
//   {"traceEvents": [
//      {"ph":"M","name":"process_name","pid":P,"tid":P,"args":{"name":"comm"}},
//      {"ph":"M","name":"thread_name","pid":P,"tid":T,"args":{"name":"..."}},
//      {"ph":"X","name":"prefill","cat":"ferrum-replay","ts":12.345,"dur":6.789,"pid":P,"tid":T,
//       "args":{"category":0,"categoryName":"prefill","payload":7,"color":"#ff00ff","depth":0}},
//      {"ph":"i","s":"t","name":"token","cat":"serve","ts":..,"pid":P,"tid":T,"args":{..}},
//      {"ph":"b","name":"request","cat":"serve","id":"0x1","ts":..,"pid":P,"tid":T,"args":{..}},
//      {"ph":"e","name":"request","cat":"serve","id":"0x1","ts":..,"pid":P,"tid":T2}, ...],
//    "displayTimeUnit": "ns",
//    "ferrumReplay": {"version":1,"pid":P,"ranges":N,"marks":N,"startEndRanges":N,
//                     "rejectedPushes":N,
//                     "protocolErrors":{"popWithoutPush":N,"popWrongDomain":N,"openAtExit":N,
//                                       "endUnknownId":N,"startOpenAtExit":N},
//                     "shimDomain":{"name":"ferrum-replay","protocolErrors":
//                                   {"popWithoutPush":N,"popWrongDomain":N,"openAtExit":N},
//                                   "droppedInSignalHandlers":N,"droppedBeyondDepth":N},
//                                                                     (each only when N > 0)
//                     "domains":["ferrum-replay","global"],"host":"name",
//                     "processStart":"BOOT+PIDNS+TICKS",
//                     "clock":{"originMonotonicNs":N,"originRealtimeNs":N},
//                     "gpu":{"timed":N,"inFlightAtExit":N,"notTimed":N,"alignErrorNs":N},
//                     "rank":{"variable":"RANK","value":"3"},       (rank only in a job rank)
//                     "output":"/abs/name.json","session":"/tmp/ferrum-replay-stamp.X",
//                     "writer":"ferrum-replay recorder"}}
// ("output": the name the process was asked to write, before any fresh name; "session": the
// wrapper's stamp, only under `ferrum-replay record`; both last, in the 64 KiB tail.
// "shimDomain": of protocolErrors and of the ranges dropped in signal handlers or beyond the
// depth limit, those in the shim's domain
// (FERRUM_REPLAY_DOMAIN), which the judges check the shim's balance and completeness on; the rest
// are the program's own NVTX use (review LL-1, LL-5). Left out where the
// recorder was not told the shim's domain (unit tests).
// "processStart": common::process_start_key, which the shim's launch summary names too, so that
// `check` joins the two files of one run only; left out where /proc/self/stat cannot be read.)
// The file ends with kTraceTrailer, whatever the block holds before it (is_ferrum_trace_file).
//
// GPU time per replay (only when the shim took the recorder's GPU sink; "gpu" then appears in
// ferrumReplay, "timed" counting the GPU events written): one more "X" event per timed replay,
//      {"ph":"X","name":"prefill","cat":"ferrum-replay,gpu","ts":..,"dur":..,"pid":P,"tid":G,
//       "args":{"replay":7,"category":0}}
// on a track of its own per (device, stream): G >= 0x40000000 (never a Linux thread id), named
// by a thread_name event "GPU 0 · stream 0x..." and placed after the threads by a
// thread_sort_index event. cat is the shim's domain followed by ",gpu"; a GPU event is never a
// CPU range (readers leave it out of range counts and nesting). "notTimed" counts the replays
// the shim did not time plus any the recorder could not keep.
//
// ts/dur are microseconds with three decimals (ns resolution), ts relative to the recorder's
// start (clock.originMonotonicNs; originRealtimeNs is the same instant in wall-clock time, both
// integers in ns); cat is the domain name, "global" for NVTX's default domain; payload and color
// appear only when the caller set them; categoryName only when the program named that category
// of that domain (nvtxNameCategory, nvtxDomainNameCategory); depth is the level push returned
// (within the range's domain on its thread; viewers nest across domains). "X" events of one
// thread are in start order with enclosing ranges first; "ranges" counts them. A domain whose
// range would partly overlap another domain's on its thread's track (NVTX's stacks are per
// domain) moves, from that range on, to a track of its own (range_tracks.hpp): tid
// T' >= 0x20000000 (kMovedTrackTidBase), named "THREAD · DOMAIN" by a thread_name event just
// before its first range; every track's ranges nest.
//
// Marks are "i" events (thread scope) with a range's args but no depth. A start/end range is a
// "b" event on the thread that started it and an "e" on the one that ended it, paired by "id"
// (hex, unique in the process), both with the start's name and domain; only complete pairs are
// written ("startEndRanges" counts them). "endUnknownId" counts ends of ids never handed out or
// already ended, "startOpenAtExit" ranges started but not ended.
// The process_name is the command line's (Snapshot::process_name, command_display_name).
#pragma once

#include <cstdint>
#include <string>

#include "output_file.hpp"
#include "snapshot.hpp"

namespace ferrum_replay::recorder {

// Receives the JSON text in pieces; returns false to stop (a write error).
using TraceSink = bool (*)(const char *data, size_t size, void *context);

// Streams the whole document to `sink` in pieces of roughly `chunk` bytes, so that a long run's
// trace is never held in memory twice. Returns false if the sink failed.
bool render_trace(const Snapshot &snap, TraceSink sink, void *context, size_t chunk = 1 << 20);

// Convenience for tests: the whole document as one string.
std::string render_trace(const Snapshot &snap);

// Writing the trace file safely (the rules are common/output_file.hpp's, shared with the
// shim's summary file):
//   - a stream target (a character device such as /dev/null, a FIFO, a socket, /dev/stdout,
//     /dev/fd/N, /proc/self/fd/N) is written as a stream: nothing is created or renamed, a FIFO
//     without a reader is an error (ENXIO) and a reader that makes no room for 2 s ends the
//     write (ETIMEDOUT); `stream` is set;
//   - a symbolic link at the name is not a stream, whatever it points to (lstat);
//   - anything else: the trace is first written to a temporary beside the name
//     (PATH.HOSTTAG.PID.N.tmp, O_EXCL|O_NOFOLLOW, 0644 minus umask; PATH's last component
//     shortened where that would exceed NAME_MAX), so the final name never
//     holds a partial trace; temporaries that dead processes of ours left for this name are
//     removed first. Then, under the directory's output lock (common/output_file.hpp: only
//     ferrum-replay takes it, at most `lock_timeout_ms` of waiting, never the directory
//     itself), the temporary takes its name in one step (common::place_output, the rule the
//     shim's summary follows too). What is at the name decides which:
//       nothing: the name itself (RENAME_NOREPLACE: a file that appears meanwhile is kept);
//       a file written since `run_start_ns` (a sibling process of the same job wrote it):
//         NAME.<pid>.EXT beside it (`sibling`);
//       an earlier ferrum-replay trace (a regular file that starts with {"traceEvents":[ and
//         carries our "ferrumReplay" block): replaced atomically by rename;
//       with `force`, a regular file owned by this user: replaced likewise;
//       a directory: an error (EISDIR);
//       anything else (another program's file, a symbolic link, a FIFO, a device): left alone,
//         not even its time stamp touched; the trace goes to the first free NAME.1.EXT ..
//         NAME.99.EXT and `diverted` is set. A symbolic link is never followed nor replaced.
//     Without the lock (held by another process for the whole wait, or impossible here)
//     nothing is replaced: a taken name sends the trace to NAME.<pid>.EXT, and `unlocked` says
//     why.
// Nothing ever opens a file name for writing except the fresh temporary, so a planted symbolic
// link can never redirect or truncate another file.
struct TraceFileOptions {
  bool force = false;
  uint64_t run_start_ns = 0;                        // CLOCK_REALTIME; 0: no sibling rule
  int lock_timeout_ms = common::kOutputLockWaitMs;  // the longest wait for the output lock
  // The name another process of the same output pattern writes (a %p pattern): the dead ones'
  // temporaries beside it go too (common::remove_dead_temps). None: only this name's.
  common::PathOfPid path_of_pid = nullptr;
  void *path_of_pid_context = nullptr;
};
struct TraceFileOutcome {
  std::string written_path;      // where the trace is, when written
  bool diverted = false;         // the requested name held something that is not our trace
  bool sibling = false;          // the name held a trace written during this run: NAME.<pid>.EXT
  std::string unlocked;          // why the output lock was not had; empty when it was
  bool stream = false;           // written to a stream (device, FIFO, descriptor)
  bool foreign_regular = false;  // diverted from a regular file of this user (FORCE would do)
  std::string error;             // error_text.hpp text, when not written
};
bool write_trace_file(const std::string &path, const Snapshot &snap,
                      const TraceFileOptions &options, TraceFileOutcome *outcome);

// The default options; on failure returns false and sets `error` to an errno text (error_text.hpp).
// No temporary file is left behind either way.
bool write_trace_file(const std::string &path, const Snapshot &snap, std::string *error);

inline constexpr char kTraceTrailer[] = ",\"writer\":\"ferrum-replay recorder\"}}\n";

// Whether `path` is a regular file (not a symbolic link) that holds a ferrum-replay trace.
bool is_ferrum_trace_file(const std::string &path);

// The fresh-name rule (docs/text-rules.md): NAME.EXT -> NAME.N.EXT (NAME.N without an
// extension); the directory part is kept; NAME is shortened where the last component would
// exceed the file system's name limit (common::fresh_name_within).
std::string numbered_path(const std::string &path, unsigned long n);

}  // namespace ferrum_replay::recorder
