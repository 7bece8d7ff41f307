// FERRUM_REPLAY_SUMMARY=stderr|PATH: at exit, one line per graph — launches, failed
// launches, pushes an NVTX tool rejected, name — so that a run without any NVTX tool still
// tells what ran. PATH expands %p (pid), %h (host name), %q{VAR} and %% (docs/text-rules.md;
// an unset VAR is named in one warning). A device, FIFO or descriptor path (/dev/null,
// /dev/stderr, /proc/self/fd/N) is written as a stream, never created or renamed, with a
// bounded wait (never a blocking write: common/output_file.hpp). A trailing '/' names a
// directory: the summary is ferrum-replay-summary.<pid>.txt inside it. Otherwise the summary is
// written aside and then takes the name by the trace's rule (common::place_output): an earlier
// summary of ours is replaced; another program's file, a symbolic link (never followed) or a
// file written during this run by another process is left alone and the summary goes beside it
// (PATH.1.EXT, PATH.<pid>.EXT), with one line. The summary's path: process_files.hpp.
//
//   ferrum-replay launch summary: 5 graphs, 340 launches, 0 failed, 0 rejected pushes (pid 4242,
//   started 0f5e7d2a-5e43-4b8e-9d0c-4a1f6f7b2c10+4026531836+1234567)
//     graph  launches  failed  rejected  name
//         1        20       0         0  capture_prefill
// (the title is one line; "started" is the process's start key, common/output_file.hpp, also in
// the recorder's trace: `check` joins a summary with the trace of the same run only).
#pragma once

#include <stddef.h>

namespace ferrum_replay::shim {

// Writes `length` bytes to `path` by the summary's rules above: true when they are all there
// (at the name or beside it); false, with one warning line, when they are not.
bool write_text(const char *path, const char *data, size_t length);

// Writes the summary (called from the shim's exit hook; exposed for tests). True when it is
// written whole, or the process launched nothing and has none to write; false, with one
// warning line, when it is missing (no memory, a full disk, a file size limit...): the exit
// hook then leaves the running marker (process_files.hpp), so that the judges name the process.
bool write_exit_summary();

}  // namespace ferrum_replay::shim
