// When the shim's exit hook runs (libferrum-replay-last.so, shim/exit_last/exit_last.c, says
// why): the C library calls ELF destructors in load order, and the preloaded shim's comes before
// those of every library the program links — a launch from one of them was counted by the
// recorder, not by the summary (F70). At activation, where an NVTX tool is attached (activation.cpp
// says why only there), the shim loads that small library from its own directory (after the
// program's libraries and the NVTX tool) and the hook runs from its destructor; elsewhere, or
// where it cannot be loaded (not installed beside the shim, or the shim preloaded by a relative
// path, which no longer says where it is once the program changes directory), from the shim's
// own destructor, as before.
#pragma once

namespace ferrum_replay::shim {

// The exit hook: the launch summary and the running marker (defined in exit_summary.cpp).
void exit_hook();

// At activation, where the hook has work (a summary or a running marker asked for): loads the
// library and hands it the hook. Once per process image (a fork child keeps its parent's).
void defer_exit_hook();

// Whether the hook runs from that library's destructor (the shim's must then do nothing).
bool exit_hook_deferred();

}  // namespace ferrum_replay::shim
