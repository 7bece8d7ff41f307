// FERRUM_REPLAY_SUMMARY=stderr|PATH: at exit, one line per graph — launches, failed
// launches, pushes an NVTX tool rejected, name — so that a run without any NVTX tool still
// tells what ran. PATH expands %p (pid), %h (host name), %q{VAR} and %%; an existing file
// is never replaced: the summary goes to PATH.1, PATH.2, ... and says so.
//
//   ferrum-replay: 5 graphs, 340 launches, 0 failed, 0 rejected pushes (pid 4242)
//     graph  launches  failed  rejected  name
//         1        20       0         0  capture_prefill
#pragma once

#include <stddef.h>

namespace ferrum {

// Expands %p, %h, %q{VAR} and %% of `pattern` into `out`; false if it does not fit.
bool expand_output_path(const char *pattern, char *out, size_t out_size);

// Writes the summary (called from the shim's exit hook; exposed for tests).
void write_exit_summary();

}  // namespace ferrum
