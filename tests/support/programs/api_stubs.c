/* A program's own fallback definitions of ferrum-replay's API, exported (the program is linked
 * with -rdynamic), as a program carries them to link and run where the shim is not loaded: a
 * naming function that names nothing, and GPU-time hand-off functions that must never be called
 * as if they were the shim's (each aborts the program). None of this makes the program a copy of
 * the shim (common/shim_identity.hpp): taken for one, it switched the shim off (review CP-5), and
 * a tool took its hand-off for the shim's (CP-3). Prototypes from the public header. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferrum_replay/ferrum_replay.h"

int ferrum_replay_name_graph_exec(void *graph_exec, const char *name) {
  (void)graph_exec;
  (void)name;
  return -ENOSYS;
}

int ferrum_replay_set_gpu_sink_sized(ferrum_replay_gpu_sink_fn sink, void *context,
                                     size_t replay_size) {
  (void)sink;
  (void)context;
  (void)replay_size;
  fputs("api_stubs: the program's own ferrum_replay_set_gpu_sink_sized was called\n", stderr);
  abort();
}

int ferrum_replay_gpu_flush(ferrum_replay_gpu_status *status) {
  (void)status;
  fputs("api_stubs: the program's own ferrum_replay_gpu_flush was called\n", stderr);
  abort();
}
