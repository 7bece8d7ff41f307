// Secure execution: a process the kernel started with more privileges than the user who ran it
// (a set-user-ID or set-group-ID program, or one with file capabilities; the kernel then passes
// AT_SECURE = 1, and the C library's secure_getenv returns null). Its environment is the less
// privileged user's, so nothing it says may be acted on with the process's privileges — the C
// library ignores LD_PRELOAD paths and LD_LIBRARY_PATH there for the same reason.
//
// What that means for us (one rule, used by the shim and the recorder):
//   - The shim can still be in such a process (a container's /etc/ld.so.preload). It passes every
//     launch through and makes no NVTX call: its first NVTX call would make NVTX load whatever
//     library NVTX_INJECTION64_PATH names, into a program that may never have used NVTX itself.
//     It opens, writes and starts nothing (no summary, names file, running marker, GPU timing).
//   - The recorder, loaded by a program's own NVTX through that variable, records nothing: its
//     output path and settings come from the same environment. It refuses NVTX's initialisation
//     (so NVTX runs the program without a tool) with one line on stderr saying why.
// To profile such a program, run a copy without the set-ID bits or capabilities.
#pragma once

#include <sys/auxv.h>

namespace ferrum_replay::common {

// True in a process started in secure-execution mode (AT_SECURE). One call into the C library,
// made once per process by each caller (at activation, at the recorder's initialisation).
inline bool secure_execution() {
  return getauxval(AT_SECURE) != 0;
}

}  // namespace ferrum_replay::common
