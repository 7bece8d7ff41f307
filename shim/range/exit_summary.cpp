#include "range/exit_summary.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c_locale.hpp"
#include "error_text.hpp"
#include "gpu/gpu_engine.hpp"
#include "held_here.hpp"
#include "host_stdout.hpp"
#include "no_cancel.hpp"
#include "output_file.hpp"
#include "own_descriptor.hpp"
#include "own_process.hpp"
#include "range/activation.hpp"
#include "range/exit_order.hpp"
#include "range/graph_registry.hpp"
#include "range/launch_range.hpp"
#include "range/process_files.hpp"
#include "range/replay_numbers.hpp"
#include "stack_room.hpp"
#include "support/exit_work.hpp"
#include "support/log.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

// A growing text buffer on the heap (at exit, allocation is fine).
struct Text {
  char *data = nullptr;
  size_t length = 0, capacity = 0;
  bool failed = false;  // a piece found no memory: the text is incomplete, and is not written

  void append(const char *format, ...) __attribute__((format(printf, 2, 3))) {
    if (failed) return;
    for (;;) {
      va_list args;
      va_start(args, format);
      const int wanted = data ? vsnprintf(data + length, capacity - length, format, args) : -1;
      va_end(args);
      if (wanted >= 0 && length + static_cast<size_t>(wanted) < capacity) {
        length += static_cast<size_t>(wanted);
        return;
      }
      const size_t grown = capacity ? capacity * 2 : 4096;
      char *bigger = static_cast<char *>(realloc(data, grown));
      if (!bigger) {
        failed = true;
        return;
      }
      data = bigger;
      capacity = grown;
    }
  }
  ~Text() { free(data); }
};

// write_exit_summary on a stack with room for it (stack_room.hpp): exit() may come from a
// thread or a signal handler whose stack is far smaller than the summary's buffers.
void write_summary_on_this_thread(void *written) {
  const common::CLocaleScope c_locale;  // per thread: the one that formats the numbers
  *static_cast<bool *>(written) = write_exit_summary();
}

bool write_exit_summary_with_room() {
  bool written = false;
  if (!common::run_with_stack_room(write_summary_on_this_thread, &written,
                                   common::kExitReportStack)) {
    warn_line(
        "too little stack left where exit() was called, and no thread could be made for "
        "the launch summary: not written");
    return false;
  }
  return written;
}

// The shim's own destructor: the hook, unless libferrum-replay-last.so runs it later
// (exit_order.hpp). It runs at the exit of every process, CUDA or not: the phase is read first
// because it sits in the page the loader wrote at start-up (activation.cpp); the flag read
// next is in .bss, whose first read faulted in pages of its own: 7-12 us of /bin/true's
// start-to-exit (docs/performance.md, "Start-up").
__attribute__((destructor)) void summary_at_exit() {
  if (detail::g_phase.load(std::memory_order_acquire) != detail::Phase::active) return;
  // What the exit handler would have done before (exit_work.hpp): in a fork child that had no
  // handler of its own, or a process whose atexit found no memory. Here still before the NVTX
  // tool's destructor (it was loaded later), and before the summary.
  finish_exit_work();
  if (!exit_hook_deferred()) exit_hook();
}

}  // namespace

void exit_hook() {
  // Only a process that activated the shim (one that used CUDA) has anything to say.
  if (detail::g_phase.load(std::memory_order_acquire) != detail::Phase::active) return;
  // A child made without fork handlers (own_process.hpp): the counts are its parent's, and a
  // judge would count them twice; its GPU columns would wait on the parent's reaper. Its marker
  // (named by its own pid) is still removed below: no summary is asked of it.
  const bool own_state = common::state_is_this_process();
  // The exiting thread may have a cancellation request pending: acted on in here, it would end
  // that thread inside exit(), the summary unwritten (no_cancel.hpp).
  const common::NoCancel no_cancel;
  // A call of this thread left by a jump after the atexit handler that settles it had run (from
  // a later atexit handler, a library's destructor): closed here, before the summary.
  settle_thread_calls();
  // The summary the user asked for is written whole, or none was asked for (a child's, whose
  // counts are its parent's, is not asked for).
  bool reported = true;
  if (common::inside_our_lock()) {
    // exit() from a signal handler that interrupted this thread holding a lock of ours, or
    // from a GPU-time sink (called under the sink's lock), which the summary's GPU columns
    // would wait for, for ever (held_here.hpp).
    if (settings().summary[0]) {
      warn_line(
          "exit() was called while this thread held a lock of the shim (from a signal handler "
          "that interrupted the shim, or from a GPU-time sink): no launch summary written");
      reported = false;
    }
  } else if (settings().summary[0] && own_state) {
    reported = write_exit_summary_with_room();
  }
  // A marker that stays makes a judge reading the running directory call this process lost:
  // so it does where the summary is missing (a full disk, ulimit -f, the branch above), whose
  // launches a judge would otherwise not count — where ci-smoke-profile passed without them.
  if (!reported) {
    if (const char *marker = running_marker_path())
      log_line(LogLevel::info,
               "no complete launch summary: the running marker '%s' stays, so that "
               "ci-smoke-profile and check --running-dir report this process",
               message_value(marker).text);
    return;
  }
  if (const MarkerLeft left = remove_running_marker(); left.why)
    log_line(LogLevel::error,
             "the running marker '%s' was not removed: %s; ci-smoke-profile and record will "
             "report this process as lost",
             message_value(left.path).text, left.why);
}

namespace {

// A graph's row, its counters read once: the title's totals are the rows' sums, so that a
// thread still launching as the process exits cannot make the title disagree with the rows.
struct Row {
  const GraphRecord *record;
  uint64_t after_report, launched, failed, rejected;
};

// Rows in ordinal order: records are visited in allocation order, which recycling breaks.
int by_ordinal(const void *a, const void *b) {
  const uint32_t left = static_cast<const Row *>(a)->record->ordinal;
  const uint32_t right = static_cast<const Row *>(b)->record->ordinal;
  // The overflow record (ordinal 0) goes last.
  if ((left == 0) != (right == 0)) return left == 0 ? 1 : -1;
  return left < right ? -1 : left > right;
}

}  // namespace

bool write_exit_summary() {
  const char *target = settings().summary;
  GraphRegistry &registry = graph_registry();
  const GraphRegistry::Recycled recycled = registry.recycled();
  Text text;
  size_t held = 0;
  bool launched_any = recycled.launches != 0;
  registry.for_each([&](const GraphRecord &record) {
    ++held;
    launched_any = launched_any || replay_count(record) != 0;
  });
  // A process that launched nothing says nothing: a CPU-only child forked by a launcher (its
  // counters restarted at the fork) would otherwise add an empty summary to the job's.
  if (!launched_any) return true;
  auto *rows = static_cast<Row *>(calloc(held ? held : 1, sizeof(Row)));
  if (!rows) {
    warn_line("cannot write the summary to '%s': %s", message_value(target).text,
              common::error_text(ENOMEM));
    return false;
  }
  // Each row's counters read once, back to back, the answered ones first: a launch is counted
  // before its push is answered, so the row holds every launch counted here (review SS-2: text
  // formatted between the two reads let launches in that were in neither).
  size_t filled = 0;
  uint64_t launches = recycled.launches, failed = recycled.failed_launches,
           rejected = recycled.rejected_pushes;
  registry.for_each([&](const GraphRecord &record) {
    if (filled == held) return;  // a graph made since the count: not in the rows, nor the title
    Row &row = rows[filled++];
    row.record = &record;
    row.after_report = record.after_tool_report.load(std::memory_order_relaxed);
    row.launched = replay_count(record);
    row.failed = record.failed_launches.load(std::memory_order_relaxed);
    row.rejected = record.rejected_pushes.load(std::memory_order_relaxed);
    launches += row.launched;
    failed += row.failed;
    rejected += row.rejected;
  });
  const size_t graphs = recycled.graphs + filled;
  qsort(rows, filled, sizeof *rows, by_ordinal);
  const bool gpu = gpu::timing_on();
  // The process, as `check` matches it with a trace: its pid, and when it started (a pid alone
  // is every container's program's, pid 1), the key the recorder writes too (output_file.hpp).
  // And the wrapper's session it ran in, if any (output_file.hpp: session_token), which
  // `ferrum-replay nsys` notes beside its tables: `check --nsys-stats` joins that session's only.
  char started[common::kProcessStartKeySize];
  const bool start_known = common::process_start_key(started, sizeof started);
  char session[common::kSessionTokenSize];
  const bool in_session = common::session_token(settings().session, session, sizeof session);
  text.append(
      "ferrum-replay launch summary: %zu graphs, %llu launches, %llu failed, %llu rejected pushes "
      "(pid %d%s%s%s%s)\n",
      graphs, static_cast<unsigned long long>(launches), static_cast<unsigned long long>(failed),
      static_cast<unsigned long long>(rejected), static_cast<int>(getpid()),
      start_known ? ", started " : "", start_known ? started : "", in_session ? ", session " : "",
      in_session ? session : "");
  text.append("  %5s  %10s  %8s  %8s  ", "graph", "launches", "failed", "rejected");
  if (gpu)
    text.append("%8s  %10s  %9s  %9s  %9s  %9s  %9s  ", "gpu n", "gpu tot ms", "mean us", "min us",
                "p50 us", "p99 us", "max us");
  text.append("name\n");
  // The GPU columns need the engine's mutex, which the reaper may hold inside a driver call that
  // never returns (Engine::lock_at_exit): then they are left empty, and the GPU line says why.
  gpu::Engine *const engine = gpu ? &gpu::engine() : nullptr;
  gpu::Engine *timing = engine && engine->lock_at_exit() ? engine : nullptr;
  gpu::GraphStats unlisted;  // timed graphs without a row here (destroyed, records reused)
  auto gpu_columns = [&](const gpu::GraphStats *stats) {
    if (!stats || stats->count == 0) {
      text.append("%8d  %10s  %9s  %9s  %9s  %9s  %9s  ", 0, "-", "-", "-", "-", "-", "-");
      return;
    }
    const double count = static_cast<double>(stats->count);
    text.append("%8llu  %10.3f  %9.3f  %9.3f  %9.3f  %9.3f  %9.3f  ",
                static_cast<unsigned long long>(stats->count),
                static_cast<double>(stats->total_ns) / 1e6,
                static_cast<double>(stats->total_ns) / count / 1e3,
                static_cast<double>(stats->min_ns) / 1e3,
                static_cast<double>(stats->percentile(0.50)) / 1e3,
                static_cast<double>(stats->percentile(0.99)) / 1e3,
                static_cast<double>(stats->max_ns) / 1e3);
  };
  // Launches whose push the NVTX tool answered "after my report" (ferrum_replay.h), by graph:
  // `check` allows for exactly these (a thread still launching as the process exited). One
  // line, after the rows: "launches after the NVTX tool's report: N (graph 1: 5, graph 2: 2,
  // earlier graphs: 1)"; none when there are none.
  Text after;
  uint64_t after_total = 0;
  for (size_t i = 0; i < filled; ++i) {
    const Row &row = rows[i];
    const GraphRecord &record = *row.record;
    const GraphLabel *label = record.label.load(std::memory_order_acquire);
    if (row.after_report) {
      after.append("%sgraph %u: %llu", after_total ? ", " : "", record.ordinal,
                   static_cast<unsigned long long>(row.after_report));
      after_total += row.after_report;
    }
    text.append("  %5u  %10llu  %8llu  %8llu  ", record.ordinal,
                static_cast<unsigned long long>(row.launched),
                static_cast<unsigned long long>(row.failed),
                static_cast<unsigned long long>(row.rejected));
    if (gpu) gpu_columns(timing && record.ordinal ? timing->stats_for(record.ordinal) : nullptr);
    text.append("%s\n", label ? label->text : record.name);
  }
  if (timing)
    timing->for_each_stats_locked([&](const gpu::GraphStats &stats) {
      GraphRecord key;
      key.ordinal = stats.ordinal;
      const Row wanted{&key, 0, 0, 0, 0};
      if (stats.ordinal == 0 || !bsearch(&wanted, rows, filled, sizeof *rows, by_ordinal))
        unlisted.merge(stats);
    });
  free(rows);
  if (recycled.graphs)  // destroyed long ago, their records reused: totals only
    text.append("  %5s  %10llu  %8llu  %8llu  (%llu earlier graphs, destroyed)\n", "-",
                static_cast<unsigned long long>(recycled.launches),
                static_cast<unsigned long long>(recycled.failed_launches),
                static_cast<unsigned long long>(recycled.rejected_pushes),
                static_cast<unsigned long long>(recycled.graphs));
  if (recycled.after_tool_report) {
    after.append("%searlier graphs: %llu", after_total ? ", " : "",
                 static_cast<unsigned long long>(recycled.after_tool_report));
    after_total += recycled.after_tool_report;
  }
  if (after_total) {
    text.append("  launches after the NVTX tool's report: %llu (%s)\n",
                static_cast<unsigned long long>(after_total), after.data ? after.data : "");
    if (after.failed) text.failed = true;  // incomplete: not written (below)
  }
  if (timing) {
    if (unlisted.count) {
      text.append("  %5s  %10s  %8s  %8s  ", "-", "-", "-", "-");
      gpu_columns(&unlisted);
      text.append("(other timed graphs)\n");
    }
    timing->unlock();
  }
  if (engine) {
    if (!timing)
      text.append(
          "  GPU columns not read: the shim's GPU reader was held inside a driver call at exit "
          "(a driver call that did not return, or exit() from a signal handler that "
          "interrupted a CUDA call)\n");
    const gpu::Totals totals = engine->totals();
    text.append("  GPU time: %llu replays timed, %llu not timed, %llu in flight at exit",
                static_cast<unsigned long long>(totals.timed),
                static_cast<unsigned long long>(totals.not_timed),
                static_cast<unsigned long long>(totals.in_flight));
    const char *separator = " (";
    for (unsigned why = 0; why < static_cast<unsigned>(gpu::Untimed::count_); ++why) {
      if (!totals.untimed[why]) continue;
      text.append("%s%llu %s", separator, static_cast<unsigned long long>(totals.untimed[why]),
                  gpu::kUntimedNames[why]);
      separator = ", ";
    }
    text.append("%s; clock aligned within %llu ns; p50/p99 within 6.25 %%\n",
                separator[0] == ',' ? ")" : "",
                static_cast<unsigned long long>(totals.align_error_ns));
  }
  if (text.failed || !text.data) {  // no memory left at exit: not a summary with rows missing
    warn_line("cannot write the summary to '%s': %s", message_value(target).text,
              common::error_text(ENOMEM));
    return false;
  }
  if (strcmp(target, "stderr") == 0) return write_text("/dev/stderr", text.data, text.length);
  char path[common::kMaxExpandedPath + 1], unset[256];
  if (!expand_process_pattern(target, path, sizeof path, unset, sizeof unset)) {
    warn_line("FERRUM_REPLAY_SUMMARY='%s' expands to more than 4095 bytes; no summary written",
              message_value(target).text);
    return false;
  }
  if (unset[0])
    warn_line("FERRUM_REPLAY_SUMMARY: not set: %s (each %%q{NAME} expanded to nothing)", unset);
  // Relative: in the directory the process activated in, not where it has gone (F69).
  if (!make_absolute(path, sizeof path)) {
    warn_line("cannot write the summary to '%s': %s", message_value(path).text,
              common::error_text(ENAMETOOLONG));
    return false;
  }
  return write_text(path, text.data, text.length);
}

namespace {

// An earlier summary of ours: the header line of today's summary, or of older versions'.
const char *const kSummaryHeaders[] = {"ferrum-replay launch summary:", "ferrum-replay: ", nullptr};

bool is_our_summary(const char *path, void *) {
  return common::is_own_file_starting_with(path, kSummaryHeaders);
}

bool write_summary_stream(const char *path, const char *data, size_t length) {
  // A device, FIFO or descriptor: written as the stream it is, nothing created or renamed —
  // after what the program wrote to its stdout (host_stdout.hpp: its own last write met a
  // reader gone, taken away by our lines).
  common::Stream stream;
  int error = common::open_stream(path, &stream);
  if (error == 0) {
    const LibcStdout out = libc_stdout();  // activation.hpp: looked up at activation
    common::let_host_stdout_go_first(out.variable, out.object, stream.fd);
    error = common::stream_write(&stream, data, length);
    common::close_stream(&stream);
  }
  if (error)
    warn_line("cannot write the summary to '%s': %s%s", message_value(path).text,
              common::error_text(error), common::stream_error_note(error));
  return error == 0;
}

}  // namespace

bool write_text(const char *given, const char *data, size_t length) {
  char named[common::kMaxExpandedPath + 64];
  if (!summary_file_path(given, named, sizeof named)) {
    warn_line("cannot write the summary to '%s': %s", message_value(given).text,
              common::error_text(ENAMETOOLONG));
    return false;
  }
  const char *path = named;
  if (common::is_stream_target(path)) return write_summary_stream(path, data, length);
  // A file: written aside first, so that the name never holds half a summary, then given the
  // name by the trace's rule (common::place_output): an earlier summary of ours is replaced; a
  // file written during this run by another process of the job, another program's file, a
  // symbolic link (never followed) or a special file is left alone and the summary goes beside.
  common::remove_dead_temps(path, kSummaryHeaders[0]);
  char tmp[sizeof named + 64];
  const int fd = common::create_temp_beside(path, tmp, sizeof tmp);
  if (fd < 0) {
    warn_line("cannot write the summary to '%s': %s", message_value(path).text,
              common::error_text(-fd));
    return false;
  }
  common::OwnDescriptor file(fd, tmp);  // proved before each use (own_descriptor.hpp)
  int error = file.write_all(data, length);
  if (const int closed = file.close(); closed != 0 && error == 0) error = closed;
  char placed[sizeof tmp];
  common::PlaceResult result;
  int lock = 0;
  if (error == 0) {
    char dir[sizeof named];
    lock = common::directory_of(path, dir, sizeof dir)
               ? common::lock_output_dir(dir, common::kOutputLockWaitMs)
               : -ENAMETOOLONG;
    common::PlaceRequest request;
    request.locked = lock >= 0;
    request.run_start_ns = common::run_start_realtime_ns(settings().session, 0);
    request.ours = is_our_summary;
    error = common::place_output(tmp, path, request, placed, sizeof placed, &result);
    common::unlock_output_dir(lock);
  }
  if (error) unlink(tmp);
  common::temp_finished();
  if (error) {
    warn_line("cannot write the summary to '%s': %s", message_value(path).text,
              common::error_text(error));
    return false;
  }
  if (strcmp(placed, path) == 0) return true;
  if (result.diverted)
    warn_line("'%s' exists and is not a ferrum-replay summary; the summary is in '%s'",
              message_value(path).text, message_value(placed).text);
  else if (result.sibling)
    warn_line(
        "'%s' was written moments ago (by another process of this run, or by a run that "
        "just ended); the summary is in '%s'",
        message_value(path).text, message_value(placed).text);
  else if (lock < 0) {
    char why[256];
    common::describe_lock_failure(lock, common::kOutputLockWaitMs, why, sizeof why);
    warn_line("'%s': %s; the summary is in '%s'", message_value(path).text, why,
              message_value(placed).text);
  }
  return true;  // whole, beside the name
}

}  // namespace ferrum_replay::shim
