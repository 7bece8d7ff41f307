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
  return getpid() == g_loaded_in;
}

}  // namespace ferrum_replay::shim
