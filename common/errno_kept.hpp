// The program's errno, kept across our own system calls and allocations: the program may be
// between a call of its own and the check of its errno when it reaches us (a launch, an NVTX call,
// a signal handler's range that interrupted it), and a failed attempt of ours that we recovered
// from (O_TMPFILE before mkostemp, ENOMEM before a dropped event) must not show there. One rule
// for the shim, the recorder and common/: every such stretch is a scope holding an ErrnoKept,
// placed where the program's call enters that cold stretch (as NoCancel is, no_cancel.hpp: a
// launch's registration, activation, a graph's naming or destruction, GPU timing's set-up), and
// around the calls a launch makes on its own beside the real one (the NVTX tool's push and pop,
// GPU timing's events: with errno's address kept per thread), never around the real function the
// program called — its errno is the program's to see.
#pragma once

#include <errno.h>

namespace ferrum_replay::common {

class ErrnoKept {
 public:
  ErrnoKept() : where_(&errno), saved_(*where_) {}  // errno's address: one call, not two
  // With errno's address already known (a hot path that keeps it per thread: &errno is a call
  // into the C library).
  explicit ErrnoKept(int *where) : where_(where), saved_(*where) {}
  ~ErrnoKept() { *where_ = saved_; }
  ErrnoKept(const ErrnoKept &) = delete;
  ErrnoKept &operator=(const ErrnoKept &) = delete;

 private:
  int *const where_;
  const int saved_;
};

}  // namespace ferrum_replay::common
