// Unwinding support, so that a launch range's destructor runs when something unwinds through
// an intercepted launch (a C++ exception from a layer below us, pthread_cancel's forced
// unwind) and the range is still popped.
//
// Why our own: g++ names __gxx_personality_v0 (libstdc++) in the unwind tables of any
// function with a destructor to run, and its landing pads call _Unwind_Resume (libgcc_s).
// Linking either would load it into every process the shim is preloaded into — shells and
// compilers included: libgcc_s alone adds ~0.2 ms to starting /bin/true here (docs/performance.md).
// But both are only needed *while* an unwind runs, and then the unwinder (libgcc_s) is
// loaded by definition. So these two hidden definitions find the real ones lazily at that
// moment and forward to them. The shim's frames only ever need cleanups (it never catches),
// which GCC's C personality, __gcc_personality_v0, handles from the same LSDA format.
#include <dlfcn.h>
#include <unwind.h>

#include <atomic>

#include "loader_error.hpp"

namespace {

using Personality = _Unwind_Reason_Code (*)(int, _Unwind_Action, _Unwind_Exception_Class,
                                            _Unwind_Exception *, _Unwind_Context *);
using Resume = void (*)(_Unwind_Exception *);

std::atomic<Personality> g_personality{nullptr};
std::atomic<Resume> g_resume{nullptr};

// Both from the same library, so the personality and the resume share one unwinder.
void find_unwinder() {
  if (g_resume.load(std::memory_order_acquire)) return;
  const ferrum_replay::common::LoaderErrorCleared
      loader_error;  // loader_error.hpp: NOLOAD may find none
  void *found_personality = nullptr;
  void *found_resume = nullptr;
  // glibc loads libgcc_s privately (RTLD_LOCAL) for pthread_cancel, so a global lookup can
  // miss it; ask for the already-loaded library by name first.
  if (void *libgcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NOLOAD)) {
    found_personality = dlsym(libgcc, "__gcc_personality_v0");
    found_resume = dlsym(libgcc, "_Unwind_Resume");
    dlclose(libgcc);  // only drops the reference NOLOAD took
  }
  if (!found_personality || !found_resume) {
    found_personality = dlsym(RTLD_DEFAULT, "__gcc_personality_v0");
    found_resume = dlsym(RTLD_DEFAULT, "_Unwind_Resume");
  }
  if (!found_personality || !found_resume) return;
  g_personality.store(reinterpret_cast<Personality>(found_personality), std::memory_order_release);
  g_resume.store(reinterpret_cast<Resume>(found_resume), std::memory_order_release);
}

}  // namespace

extern "C" {

__attribute__((visibility("hidden"))) _Unwind_Reason_Code __gxx_personality_v0(
    int version, _Unwind_Action actions, _Unwind_Exception_Class exception_class,
    _Unwind_Exception *exception, _Unwind_Context *context) {
  find_unwinder();
  Personality personality = g_personality.load(std::memory_order_acquire);
  // Without it we cannot run the cleanup, but unwinding must go on: skip our frame.
  if (!personality) return _URC_CONTINUE_UNWIND;
  return personality(version, actions, exception_class, exception, context);
}

// Called only from our landing pads, i.e. after __gxx_personality_v0 found the unwinder.
// The real _Unwind_Resume continues from its caller's frame; this frame has ordinary unwind
// info and no personality, so the unwinder passes through it on the way out.
// Default visibility as <unwind.h> declares it; the version script keeps it local.
void _Unwind_Resume(_Unwind_Exception *exception) {
  find_unwinder();
  if (Resume resume = g_resume.load(std::memory_order_acquire)) resume(exception);
  __builtin_trap();  // unreachable: a landing pad ran, so the unwinder exists
}

}  // extern "C"
