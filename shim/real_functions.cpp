#include "real_functions.hpp"

#include <dlfcn.h>

#include "libc_symbols.hpp"
#include "log.hpp"

namespace ferrum {
namespace {

std::atomic<void *> g_driver_library{nullptr};  // a dlopen(RTLD_NOLOAD) handle

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
  if (g_driver_library.load(std::memory_order_acquire)) return;
  Dl_info owner{};
  if (!dladdr(real_driver_function, &owner) || !owner.dli_fname) return;
  DlopenFunction libc_open = libc_dlopen();
  // RTLD_NOLOAD: only a reference to the already-loaded library, never a new load.
  void *handle = libc_open ? libc_open(owner.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
  if (!handle) return;
  void *expected = nullptr;
  if (g_driver_library.compare_exchange_strong(expected, handle, std::memory_order_acq_rel))
    log_line(LogLevel::debug, "driver library: '%s'", message_value(owner.dli_fname).text);
  else
    dlclose(handle);
}

void *find_next_definition(const char *name) {
  DlsymFunction libc_lookup = libc_dlsym();
  if (!libc_lookup) return nullptr;
  // Called from here, libc's dlsym resolves RTLD_NEXT relative to the shim.
  void *address = libc_lookup(RTLD_NEXT, name);
  if (address && is_own_address(address)) address = nullptr;
  if (!address) {
    if (void *driver = g_driver_library.load(std::memory_order_acquire)) {
      address = libc_lookup(driver, name);
      if (address && is_own_address(address)) address = nullptr;
    }
  }
  log_line(LogLevel::debug, "real %s resolved to %p", name, address);
  return address;
}

}  // namespace ferrum
