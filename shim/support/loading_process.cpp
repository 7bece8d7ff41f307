#include "support/loading_process.hpp"

#include <unistd.h>

namespace ferrum_replay::shim {
namespace {

// Noted by the shim's one load-time constructor: one getpid() in every process (a shell, a
// compiler), no lock. Kept beside the activation phase (activation.cpp), in initialised data
// whose page the loader writes at start-up anyway: a write to .bss would fault in a page of its
// own (docs/performance.md, "Start-up").
[[gnu::section(".data.ferrum_replay_phase")]] pid_t g_loaded_in = -1;

__attribute__((constructor)) void note_loading_process() {
  g_loaded_in = getpid();
}

}  // namespace

bool in_loading_process() {
  // Before the constructor has run — a constructor of a library the program links, which the
  // C library runs before a preloaded one's, that makes CUDA calls — this is the loading
  // process (F155's review: its graphs lost their call sites, its exit handler was not made).
  const pid_t loaded_in = g_loaded_in;
  return loaded_in < 0 || getpid() == loaded_in;
}

}  // namespace ferrum_replay::shim
