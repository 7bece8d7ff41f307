// The C library's non-local jumps, exported: longjmp, _longjmp, siglongjmp and __longjmp_chk
// (what longjmp and siglongjmp become with _FORTIFY_SOURCE). A jump that leaves this thread's
// open graph call (a watchdog's siglongjmp out of a launch, from a signal handler) marks it left
// (range/launch_range.hpp note_jump, F160); then the C library's own jump, with the program's
// arguments unchanged. Nothing else: a jump with no call open costs one thread-local load.
#include <stdlib.h>

#include "range/launch_range.hpp"
#include "resolve/libc_symbols.hpp"

namespace {

// The real jump never returns. Resolved at the first jump of the process (the C library's
// definition after the shim, read without the loader's lock: libc_symbols.hpp).
[[noreturn]] void jump(ferrum_replay::shim::LibcJump which, void *env, int value) {
  ferrum_replay::shim::note_jump(env);
  ferrum_replay::shim::JumpFunction real = ferrum_replay::shim::libc_jump(which);
  if (real) real(env, value);
  abort();  // no C library jump is loaded: nowhere to go
}

}  // namespace

// Exported under the C library's names (asm labels: <setjmp.h>'s declarations are not ours).
extern "C" {
[[noreturn]] __attribute__((visibility("default"))) void ferrum_longjmp(void *,
                                                                        int) __asm__("longjmp");
[[noreturn]] __attribute__((visibility("default"))) void ferrum_underscore_longjmp(
    void *, int) __asm__("_longjmp");
[[noreturn]] __attribute__((visibility("default"))) void ferrum_siglongjmp(void *, int) __asm__(
    "siglongjmp");
[[noreturn]] __attribute__((visibility("default"))) void ferrum_longjmp_chk(void *, int) __asm__(
    "__longjmp_chk");

void ferrum_longjmp(void *env, int value) {
  jump(ferrum_replay::shim::LibcJump::longjmp, env, value);
}
void ferrum_underscore_longjmp(void *env, int value) {
  jump(ferrum_replay::shim::LibcJump::underscore_longjmp, env, value);
}
void ferrum_siglongjmp(void *env, int value) {
  jump(ferrum_replay::shim::LibcJump::siglongjmp, env, value);
}
void ferrum_longjmp_chk(void *env, int value) {
  jump(ferrum_replay::shim::LibcJump::longjmp_chk, env, value);
}
}  // extern "C"
