// The files of one process of the shim, apart from what it writes at exit: the launch summary's
// path (exit_summary.hpp writes it), and the running marker.
//
// The running marker: a process that launched and then ended without its exit hook — killed
// by a signal, _exit(), or replaced by exec(), none of which runs it — writes neither its
// trace nor its summary, and would be silently missing from what `ferrum-replay record` and
// ci-smoke-profile report. Where FERRUM_REPLAY_RUNNING_DIR names a directory (those wrappers
// set it), the process's first launch (a fork() child's own first) creates
// DIR/ferrum-replay.PID.running (common/output_file.hpp's rule for the name; made absolute, so
// that a change of directory does not lose it; O_EXCL: an earlier image's marker of the same
// pid — it launched, then replaced itself with exec — stays), and the exit hook removes it, if
// it is still the file created, once the launch summary asked for (FERRUM_REPLAY_SUMMARY, which
// ci-smoke-profile sets) is written whole, or when none is asked for. A process whose summary
// is missing (a full disk, ulimit -f, an exit from a signal handler inside the shim) keeps it:
// its launches are in no summary. A marker whose line cannot be written (the same full disk or
// limit) is left empty: it names the process by its pid alone. What is left after a run names
// the processes that were lost, or whose counts are.
#pragma once

#include <stddef.h>

namespace ferrum_replay::shim {

// Expands %p, %h, %q{VAR} and %% of `pattern` (FERRUM_REPLAY_SUMMARY, FERRUM_REPLAY_RUNNING_DIR)
// into `out` (common/text_rules.hpp, this process's pid, host name and environment); false if it
// does not fit or exceeds 4095 bytes. The unset variables' names go to `unset` when given.
bool expand_process_pattern(const char *pattern, char *out, size_t out_size, char *unset = nullptr,
                            size_t unset_size = 0);

// The summary's file for an expanded FERRUM_REPLAY_SUMMARY: the path itself, or
// DIR/ferrum-replay-summary.<pid>.txt for one that ends with '/'. False if it does not fit.
bool summary_file_path(const char *given, char *out, size_t out_size);

// Relative paths (FERRUM_REPLAY_SUMMARY, FERRUM_REPLAY_RUNNING_DIR, expanded) name files in the
// working directory the process had when the shim activated (its first graph call), as the
// recorder's trace does from NVTX's initialisation on: never in whatever directory the program
// has moved to by its exit — a daemon's "/", a directory it removed, a test fixture's temporary
// one (the summary went there, or was lost with a line on stderr and the running marker left:
// F69). One rule, for every path of the shim's.
// At activation, before the running marker or any summary path: notes that directory (nothing
// where it cannot be read: relative paths then stay relative, as before).
void note_working_directory();
// Makes `path` (an expanded pattern, `size` bytes of room) absolute against that directory, in
// place; false, `path` unchanged, where the result does not fit.
bool make_absolute(char *path, size_t size);

// At activation: the FERRUM_REPLAY_RUNNING_DIR value (settings, valid for the process's life;
// "" for none).
void set_running_dir(const char *pattern);

// A launch of this process: its first creates the running marker. Called on the slow path of a
// thread's first launch of a graph (replay_numbers.cpp); after the first, one getpid() and one
// atomic load. Never fails the launch; waits for nothing.
void note_launching_process();

// This process's marker, made and not yet removed; nullptr if none.
const char *running_marker_path();

// The exit hook, once the summary is written: removes this process's marker — waiting (at
// most about 1 s) for another thread that is making it — and no marker is made from then on.
// `why` is null unless the marker had to stay (a program that gave up its user ID: EACCES),
// which the caller says.
struct MarkerLeft {
  const char *why;
  const char *path;
};
MarkerLeft remove_running_marker();

}  // namespace ferrum_replay::shim
