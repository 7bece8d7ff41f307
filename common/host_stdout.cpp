#include "host_stdout.hpp"

#include "errno_kept.hpp"

namespace ferrum_replay::common {

void let_host_stdout_go_first(FILE *const *stdout_variable, FILE *libc_object) {
  if (!stdout_variable || !libc_object) return;
  FILE *const out = *stdout_variable;
  if (out != libc_object) return;  // the program's own FILE in its place: never followed
  const ErrnoKept errno_kept;
  if (ftrylockfile(out) != 0) return;  // another thread holds it: its write goes on, we do not wait
  fflush_unlocked(out);
  funlockfile(out);
}

}  // namespace ferrum_replay::common
