// The loader's error state is the program's. A program may read dlerror() after a call of its
// own that reached us — the POSIX idiom `dlerror(); p = dlsym(h, name); if (dlerror()) fail;`,
// GLib's g_module_symbol — and a failed dlopen or dlsym of ours inside that call (an NVTX tool
// that is not there, libferrum-replay-last.so not beside the shim, a lookup of a name this
// driver lacks) left its message there: the program's successful lookup of cuGraphLaunch read
// as failed. Every stretch of ours that calls the loader (dlopen, dlsym, dlclose, dlinfo) inside
// a program's call therefore ends holding a LoaderErrorCleared, which clears the error, ours.
//
// Why clearing is exact: the C library resets the pending error at every one of those calls
// (glibc: success clears it, failure sets its own), so once a stretch of ours has called the
// loader, nothing of the program's is pending any more, and "none" is what the program would
// have read. Place it only in stretches that always call the loader, after the point where
// they first do — never where none may have happened (it would read off the program's own).
// A message the program had left unread across its first graph call is lost, as it is across
// the CUDA runtime's first call, which dlopens the driver (docs/reliability.md).
#pragma once

#include <dlfcn.h>

#include "errno_kept.hpp"

namespace ferrum_replay::common {

class LoaderErrorCleared {
 public:
  LoaderErrorCleared() = default;
  ~LoaderErrorCleared() {
    const ErrnoKept errno_kept;
    // Not dlerror(): with an error of ours pending it formats the message, translated through
    // gettext under the C library's locale lock, which fork() does not reset — a fork child
    // whose parent had a thread in setlocale() waited there for ever (F154). A lookup that
    // succeeds clears the pending error as well, formatting nothing: dlsym itself, found in
    // the C library by any process that can call it. (The shim's dlsym with RTLD_DEFAULT goes
    // straight to the C library's: no code of ours, no recursion.)
    (void)dlsym(RTLD_DEFAULT, "dlsym");
  }
  LoaderErrorCleared(const LoaderErrorCleared &) = delete;
  LoaderErrorCleared &operator=(const LoaderErrorCleared &) = delete;
};

}  // namespace ferrum_replay::common
