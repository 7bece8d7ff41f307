// The program's errno, kept across our own system calls and allocations: the program may be
// between a call of its own and the check of its errno when it reaches us (a launch, an NVTX call,
// a signal handler's range that interrupted it), and a failed attempt of ours that we recovered
// from (O_TMPFILE before mkostemp, ENOMEM before a dropped event) must not show there. One rule
// for the shim, the recorder and common/: every such stretch is a scope holding an ErrnoKept.
#pragma once

#include <errno.h>

namespace ferrum_replay::common {

class ErrnoKept {
 public:
  ErrnoKept() : saved_(errno) {}
  ~ErrnoKept() { errno = saved_; }
  ErrnoKept(const ErrnoKept &) = delete;
  ErrnoKept &operator=(const ErrnoKept &) = delete;

 private:
  const int saved_;
};

}  // namespace ferrum_replay::common
