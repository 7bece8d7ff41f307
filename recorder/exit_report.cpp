#include "exit_report.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "error_text.hpp"
#include "host_stdout.hpp"
#include "output_file.hpp"
#include "output_path.hpp"
#include "summary_table.hpp"
#include "text_rules.hpp"
#include "trace_writer.hpp"

// The C library's own stdout object (glibc), which `stdout` is compared with (host_stdout.hpp).
// Weak: a C library without it leaves the flush undone. (The recorder is loaded only by programs
// that use NVTX: binding data symbols at its load costs the others nothing.)
extern "C" FILE _IO_2_1_stdout_ __attribute__((weak));

namespace ferrum_replay::recorder {

void write_stderr(std::string_view text) {
  // As a stream: a full or closed stderr pipe costs at most 2 s and never a SIGPIPE.
  common::Stream stream;
  if (common::open_stream("/dev/stderr", &stream) != 0) return;
  common::stream_write(&stream, text.data(), text.size());
  common::close_stream(&stream);
}

std::string quoted_for_message(const std::string &text) {
  char out[common::kQuotedSize];
  common::printable_quote(text.data(), text.size(), common::kMessageLimit, out, sizeof out);
  return std::string("'") + out + "'";
}

namespace {

// What the trace's name would be for another process of the same pattern, host and directory.
struct OtherProcessName {
  const std::string &pattern;
  const char *host;
  const std::string &cwd;
};

bool name_of_other_process(long pid, char *out, size_t out_size, void *context) {
  const auto &other = *static_cast<const OtherProcessName *>(context);
  const ExpandedPath expanded =
      expand_output_pattern(other.pattern, pid, other.host, common::process_env, nullptr);
  if (expanded.too_long) return false;
  const std::string absolute = absolute_path(expanded.path, other.cwd);
  if (absolute.size() >= out_size) return false;
  memcpy(out, absolute.c_str(), absolute.size() + 1);
  return true;
}

// What was recorded deserves a file: a range, a mark, a start/end range, a rejected push, a
// protocol error or a launch in flight. A process
// that never launched a graph nor used NVTX itself (a CPU-only worker forked by a launcher)
// leaves no file and prints no table, and the job's chosen name goes to a process that has data.
bool recorded_anything(const Snapshot &snap) {
  return snap.event_count() != 0 || snap.gpu_replay_count() != 0 || snap.rejected_pushes != 0 ||
         snap.memory_drops != 0 || snap.depth_drops != 0 || snap.async_beyond_room != 0 ||
         !snap.errors.none() || snap.shim_in_flight != 0;
}

}  // namespace

void write_exit_report(Recorder &recorder, const Settings &settings, const std::string &cwd,
                       ferrum_replay_gpu_flush_fn gpu_flush, uint32_t exiting_tid) {
  if (gpu_flush) {
    ferrum_replay_gpu_status status{};
    status.size = sizeof status;
    GpuStatus gpu;
    gpu.registered = true;
    if (gpu_flush(&status) == 0) {
      gpu.in_flight = status.in_flight;
      gpu.not_timed = status.not_timed;
      gpu.align_error_ns = status.align_error_ns;
    }
    recorder.set_gpu_status(gpu);
  }
  Snapshot snap = recorder.snapshot_for_report(/*last=*/true, exiting_tid);
  if (!recorded_anything(snap)) return;

  char host[256];
  common::host_name(host, sizeof host);
  snap.host = host;
  char started[common::kProcessStartKeySize];
  if (common::process_start_key(started, sizeof started)) snap.process_start = started;
  const ExpandedPath expanded =
      expand_output_pattern(settings.out_pattern, snap.pid, host, common::process_env, nullptr);
  const bool nothing = !expanded.too_long && expanded.path.empty();
  if (nothing)  // one line: an empty name is no directory to be told about
    write_stderr("ferrum-replay recorder: cannot write trace: FERRUM_RECORD_OUT=" +
                 quoted_for_message(settings.out_pattern) + " expands to an empty name" +
                 (expanded.unset.empty() ? std::string() : " (not set: " + expanded.unset + ")") +
                 "\n");
  else if (!expanded.unset.empty())
    write_stderr("ferrum-replay recorder: FERRUM_RECORD_OUT: not set: " + expanded.unset +
                 " (each %q{NAME} expanded to nothing)\n");

  TraceFileOutcome outcome;
  bool written = false;
  if (expanded.too_long) {
    outcome.error = "the expanded name is longer than 4095 bytes";
  } else if (!nothing) {
    const std::string absolute = absolute_path(expanded.path, cwd);
    snap.output_path = absolute;
    snap.session = settings.session_file;
    TraceFileOptions options;
    options.force = settings.force;
    options.run_start_ns =
        common::run_start_realtime_ns(settings.session_file.c_str(), snap.origin_realtime_ns);
    // A %p pattern: each process's name is its own, and a process killed while it wrote left a
    // temporary under a name no later run takes. Those of dead processes of this pattern, in the
    // same directory, go too (their checks: remove_dead_temps).
    OtherProcessName other{settings.out_pattern, host, cwd};
    if (settings.out_pattern.find("%p") != std::string::npos) {
      options.path_of_pid = name_of_other_process;
      options.path_of_pid_context = &other;
    }
    written = write_trace_file(absolute, snap, options, &outcome);
    if (!written) {
      // The path tried, absolute: a relative name is resolved against where the process was
      // at its first NVTX call, which may not be where the user looks (the shim's summary
      // line says the same).
      write_stderr("ferrum-replay recorder: cannot write trace to " + quoted_for_message(absolute) +
                   ": " + outcome.error + "\n");
    } else if (outcome.diverted) {
      write_stderr("ferrum-replay recorder: " + quoted_for_message(absolute) +
                   " exists and is not a ferrum-replay trace; left it alone and wrote " +
                   quoted_for_message(outcome.written_path) +
                   (outcome.foreign_regular
                        ? " (FERRUM_RECORD_FORCE=1 replaces a regular file of yours)\n"
                        : " (a symbolic link or special file is never replaced)\n"));
    } else if (!outcome.unlocked.empty() && !outcome.sibling && outcome.written_path != absolute) {
      write_stderr("ferrum-replay recorder: " + quoted_for_message(absolute) + ": " +
                   outcome.unlocked + "; replaced nothing and wrote " +
                   quoted_for_message(outcome.written_path) + "\n");
    }
  }
  if (expanded.too_long)
    write_stderr("ferrum-replay recorder: cannot write trace: FERRUM_RECORD_OUT=" +
                 quoted_for_message(settings.out_pattern) + " expands to more than 4095 bytes\n");

  if (snap.memory_drops)
    write_stderr("ferrum-replay recorder: " + std::to_string(snap.memory_drops) +
                 " pushes, ranges, marks or GPU replays not recorded: out of memory, or beyond "
                 "FERRUM_RECORD_MEMORY with nowhere to spill, or made where the recorder could "
                 "not take its lock (a signal or fork handler inside it) (droppedForMemory)\n");
  if (snap.async_beyond_room)
    write_stderr("ferrum-replay recorder: " + std::to_string(snap.async_beyond_room) +
                 " start/end range halves (nvtxRangeStart/End) not in the trace: more start/end "
                 "ranges than the exit pairs within FERRUM_RECORD_MEMORY (" +
                 std::to_string(async_ranges_room(settings.memory)) +
                 "); raise it to keep them (droppedStartEndBeyondPairing)\n");
  // Spilling is tried only beyond the budget: if it failed, what came after was dropped (or its
  // name lost) rather than let memory grow past FERRUM_RECORD_MEMORY.
  if (const SpillFile &spill = recorder.spill_file(); spill.failed())
    write_stderr("ferrum-replay recorder: no spill file could be made in " +
                 quoted_for_message(spill.directory()) + ": " +
                 common::error_text(spill.failure()) +
                 "; what did not fit in FERRUM_RECORD_MEMORY (" + std::to_string(settings.memory) +
                 " bytes) was not recorded: set TMPDIR to a writable directory with room, or "
                 "raise FERRUM_RECORD_MEMORY\n");
  if (const uint64_t refused = recorder.names().refused())
    write_stderr("ferrum-replay recorder: " + std::to_string(refused) +
                 " thread, category or registered-string names not kept: beyond the " +
                 std::to_string(NameRegistry::kNamesBudget >> 20) +
                 " MiB kept for names with no room elsewhere, or given by a signal or fork "
                 "handler that interrupted the recorder\n");
  if (recorder.names().domains_shared())
    write_stderr("ferrum-replay recorder: the program made more than " +
                 std::to_string(NameRegistry::kMaxDomains) +
                 " NVTX domains: the later ones share one, '" +
                 std::string(NameRegistry::kMoreDomainsName) +
                 "', whose ranges are paired as one domain's\n");
  if (snap.depth_drops)
    write_stderr("ferrum-replay recorder: " + std::to_string(snap.depth_drops) +
                 " ranges not recorded: the oldest open on one thread in one domain, given up at " +
                 std::to_string(kMaxOpenFrames) +
                 " open there, or when the room all threads' open ranges share (" +
                 std::to_string(kSharedStackRoom) + " frames beyond " +
                 std::to_string(kOwnStackRoom) + " each) was full (droppedBeyondDepth)\n");

  if (settings.table) {
    std::string shown;
    if (written) {
      char out[common::kQuotedSize];
      common::printable_quote(outcome.written_path.data(), outcome.written_path.size(),
                              common::kMessageLimit, out, sizeof out);
      shown = out;
    }
    OtherNames other;
    const std::vector<RangeStats> rows = aggregate(snap, &other);
    // After the trace is written: the program's buffered stdout before the table where both
    // go to one file (`2>&1 | head -1`), and only where that cannot change the program's fate
    // (host_stdout.hpp).
    common::let_host_stdout_go_first(&stdout, &_IO_2_1_stdout_, STDERR_FILENO);
    write_stderr(format_summary(snap, rows, shown, kSummaryRows, other));
  }
}

}  // namespace ferrum_replay::recorder
