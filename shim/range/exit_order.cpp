#include "range/exit_order.hpp"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <atomic>

#include "loader_error.hpp"
#include "resolve/libc_symbols.hpp"

namespace ferrum_replay::shim {
namespace {

std::atomic<bool> g_deferred{false};
std::atomic<bool> g_tried{false};

}  // namespace

void defer_exit_hook() {
  if (g_tried.exchange(true, std::memory_order_acq_rel)) return;
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void *>(&defer_exit_hook), &self) || !self.dli_fname) return;
  // Only an absolute name says where the shim is. The loader keeps the name it was given: a
  // relative LD_PRELOAD (shim/libferrum-replay.so) is relative to the directory the process
  // started in, and a dlopen of it now is resolved against the working directory of the moment,
  // where any file of that name may be (a program that moved elsewhere loaded it). Nothing is
  // loaded then: the hook runs from the shim's own destructor.
  if (self.dli_fname[0] != '/') return;
  const char *slash = strrchr(self.dli_fname, '/');
  char path[4096];
  const int n = snprintf(path, sizeof path, "%.*s/libferrum-replay-last.so",
                         static_cast<int>(slash - self.dli_fname), self.dli_fname);
  if (n < 0 || static_cast<size_t>(n) >= sizeof path) return;
  // RTLD_NODELETE: never unloaded, so the hook it holds runs at exit whatever a program
  // dlcloses. RTLD_LOCAL: its one symbol stays out of the program's scope.
  DlopenFunction open = libc_dlopen();
  DlsymFunction lookup = libc_dlsym();
  if (!open || !lookup) return;
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: the library may be absent
  void *last = open(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!last) return;
  using RunAtExit = void (*)(void (*)());
  auto run_at_exit = reinterpret_cast<RunAtExit>(lookup(last, "ferrum_replay_run_at_exit"));
  if (!run_at_exit) return;
  run_at_exit(exit_hook);
  g_deferred.store(true, std::memory_order_release);
}

bool exit_hook_deferred() {
  return g_deferred.load(std::memory_order_acquire);
}

}  // namespace ferrum_replay::shim
