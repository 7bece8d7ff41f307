// The two signals the kernel sends the thread whose write fails, both of which end the program by
// default: SIGPIPE (a pipe or socket nobody reads any more) and SIGXFSZ (a regular file grown past
// the process's file size limit, RLIMIT_FSIZE or `ulimit -f`: write, posix_fallocate, truncate).
// A write of ours (a trace, a summary, a marker, a spill file) must fail with its error (EPIPE,
// EFBIG) and nothing else: it must neither end the host nor reach a handler of the host's.
// libstdc++-free, like output_file.hpp.
#pragma once

#include <signal.h>

namespace ferrum_replay::common {

// Holds both signals on this thread for its lifetime. The kernel sends them to the writing thread
// itself, so while held they stay pending there; on destruction each one that became pending
// meanwhile is taken back (sigtimedwait with no wait) before the thread's mask is restored. One
// that was pending already (the host held it itself) is the host's and stays. errno is kept.
// Costs three or four system calls: once per output (and for the running marker, once per
// process at its first launch), never on the launch path otherwise.
class WriteSignalsHeld {
 public:
  WriteSignalsHeld();
  ~WriteSignalsHeld();
  WriteSignalsHeld(const WriteSignalsHeld &) = delete;
  WriteSignalsHeld &operator=(const WriteSignalsHeld &) = delete;

 private:
  sigset_t old_mask_;
  sigset_t pending_before_;
};

}  // namespace ferrum_replay::common
