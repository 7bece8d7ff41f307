// The program's cancellation requests are acted on only where the program expects it. Our code
// runs inside calls that are not cancellation points (a launch, an NVTX call, the exit hooks),
// but it reaches some (open, read, write, close, poll, connect, nanosleep; an NVTX tool's
// initialisation, which may do anything). A thread with a cancellation request pending that
// reached one of ours was cancelled there, in the middle of our work: the forced unwind
// through a noexcept function of ours aborted the process; in an exit hook it ended the thread
// that was exiting (no trace, and a process whose other threads live on never exits); in a
// launch it left the launch half done. One rule for the shim, the recorder and common/: every
// stretch of our code that may reach a cancellation point holds a NoCancel, placed where the
// program's call enters that cold stretch (never on a launch's or a push's fast path); a lock of
// ours taken through held_here.hpp disables cancellation while it is held, so a stretch under
// one needs nothing more. The program's state, and a request still pending, come back with the
// destructor.
#pragma once

#include <pthread.h>

namespace ferrum_replay::common {

class NoCancel {
 public:
  NoCancel() { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &saved_); }
  ~NoCancel() { pthread_setcancelstate(saved_, nullptr); }
  NoCancel(const NoCancel &) = delete;
  NoCancel &operator=(const NoCancel &) = delete;

 private:
  int saved_ = PTHREAD_CANCEL_ENABLE;
};

}  // namespace ferrum_replay::common
