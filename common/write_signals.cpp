#include "write_signals.hpp"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "errno_kept.hpp"

namespace ferrum_replay::common {
namespace {

sigset_t write_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  sigaddset(&set, SIGXFSZ);
  return set;
}

}  // namespace

WriteSignalsHeld::WriteSignalsHeld() {
  const sigset_t held = write_signals();
  sigemptyset(&old_mask_);
  pthread_sigmask(SIG_BLOCK, &held, &old_mask_);
  sigemptyset(&pending_before_);
  sigpending(&pending_before_);
}

WriteSignalsHeld::~WriteSignalsHeld() {
  const ErrnoKept errno_kept;  // the write's own errno is what its caller reads next
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  const int signals[] = {SIGPIPE, SIGXFSZ};
  for (const int signal : signals) {
    if (sigismember(&pending, signal) != 1 || sigismember(&pending_before_, signal) == 1) continue;
    // Raised by our write: take it back. (A standard signal is pending at most once.)
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signal);
    const timespec zero{0, 0};
    while (sigtimedwait(&only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

}  // namespace ferrum_replay::common
