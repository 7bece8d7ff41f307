#include "resolve/real_functions.hpp"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "errno_kept.hpp"
#include "loader_error.hpp"
#include "resolve/libc_symbols.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {
namespace {

// The file name of the library that owns the real driver, copied. No handle is kept: a
// reference of ours would keep the driver loaded after the program's own dlclose. A lookup
// takes a dlopen(RTLD_NOLOAD) reference for the time of one dlsym only. (GPU timing, once on,
// keeps one for good: keep_loaded.)
char g_driver_path[4096];
std::atomic<int> g_driver_path_state{0};  // 0: unknown, 1: being written, 2: known

const void *own_base() {
  static std::atomic<const void *> base{nullptr};
  const void *known = base.load(std::memory_order_acquire);
  if (!known) {
    Dl_info self{};
    if (dladdr(reinterpret_cast<void *>(&is_own_address), &self)) known = self.dli_fbase;
    base.store(known, std::memory_order_release);
  }
  return known;
}

}  // namespace

bool is_own_address(const void *address) {
  Dl_info owner{};
  if (!address || !dladdr(address, &owner)) return false;
  return owner.dli_fbase == own_base();
}

void note_driver_library(const void *real_driver_function) {
  if (g_driver_path_state.load(std::memory_order_acquire) != 0) return;
  Dl_info owner{};
  // The main program has an empty name: nothing to open by name there.
  if (!dladdr(real_driver_function, &owner) || !owner.dli_fname || !owner.dli_fname[0]) return;
  const size_t length = strlen(owner.dli_fname);
  if (length >= sizeof g_driver_path) return;
  int expected = 0;
  if (!g_driver_path_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
  memcpy(g_driver_path, owner.dli_fname, length + 1);
  g_driver_path_state.store(2, std::memory_order_release);
  log_line(LogLevel::debug, "driver library: '%s'", message_value(g_driver_path).text);
}

bool keep_loaded(const void *function) {
  Dl_info owner{};
  link_map *map = nullptr;
  if (!function || !dladdr1(function, &owner, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP) ||
      !map)
    return false;
  if (!map->l_name || !map->l_name[0]) return true;  // the main program: never unloaded
  if (!owner.dli_fname || !owner.dli_fname[0]) return false;
  DlopenFunction libc_open = libc_dlopen();
  if (!libc_open) return false;
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: a NOLOAD that fails
  void *handle = libc_open(owner.dli_fname, RTLD_NOLOAD | RTLD_LAZY | RTLD_LOCAL);
  if (!handle) return false;
  // The same path may name another instance (the function's own is in another namespace).
  link_map *opened = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &opened) != 0 || opened != map) {
    dlclose(handle);
    return false;
  }
  log_line(LogLevel::debug, "'%s' kept loaded", message_value(owner.dli_fname).text);
  return true;  // the handle is never closed
}

void *find_next_definition(const char *name) {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the loader's lookups, a log line
  DlsymFunction libc_lookup = libc_dlsym();
  if (!libc_lookup) return nullptr;
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: RTLD_NEXT may miss
  // Called from here, libc's dlsym resolves RTLD_NEXT relative to the shim.
  void *address = libc_lookup(RTLD_NEXT, name);
  if (address && is_own_address(address)) address = nullptr;
  if (!address && g_driver_path_state.load(std::memory_order_acquire) == 2) {
    // RTLD_NOLOAD: only while the driver is still loaded, never a new load; the reference is
    // dropped at once (the program may unload the driver whenever it likes).
    DlopenFunction libc_open = libc_dlopen();
    if (void *driver = libc_open ? libc_open(g_driver_path, RTLD_LAZY | RTLD_NOLOAD) : nullptr) {
      address = libc_lookup(driver, name);
      if (address && is_own_address(address)) address = nullptr;
      dlclose(driver);
    }
  }
  log_line(LogLevel::debug, "real %s resolved to %p", name, address);
  return address;
}

}  // namespace ferrum_replay::shim
