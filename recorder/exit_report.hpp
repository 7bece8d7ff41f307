// What the recorder does when the process exits: snapshot, trace file, stderr summary.
#pragma once

#include <string>
#include <string_view>

#include "recorder.hpp"
#include "settings.hpp"

namespace ferrum_replay::recorder {

// Writes the trace named by settings.out_pattern (relative paths resolved against `cwd`, the
// working directory when the recorder was initialised, i.e. at the process's first NVTX call;
// see write_trace_file for what happens when that name is taken) and, unless disabled, prints
// the summary table on stderr. A process that recorded nothing (no range, no rejected push, no
// protocol error) writes nothing and prints nothing. A trace that cannot be written, or that
// went to another name, is one line on stderr, paths quoted and cut at 200 bytes
// (docs/text-rules.md); an unset %q{VAR} is named in one line. Never prints on stdout, never
// throws, never aborts the exit, never waits more than a few seconds (trace_writer.hpp).
// `gpu_flush`: the shim's ferrum_replay_gpu_flush when the recorder registered its GPU sink
// (null otherwise): called first, so that the replays completed by now reach the trace, and its
// status goes into the trace's "gpu" block. `exiting_tid`: the thread that called exit(), when
// another thread writes the report for it (stack_room.hpp); 0: this one.
void write_exit_report(Recorder &recorder, const Settings &settings, const std::string &cwd,
                       ferrum_replay_gpu_flush_fn gpu_flush = nullptr, uint32_t exiting_tid = 0);

// Writes to stderr as a stream (common/output_file.hpp): at most 2 s of waiting on a full pipe,
// no SIGPIPE; one write(2) for up to 4 KiB, so a report from a dying process stays in one
// piece even when other processes share the terminal.
void write_stderr(std::string_view text);

}  // namespace ferrum_replay::recorder
