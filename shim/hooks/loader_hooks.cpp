#include "hooks/loader_hooks.hpp"

#include <dlfcn.h>
#include <string.h>

#include <atomic>

#include "range/activation.hpp"
#include "resolve/cuda_libraries.hpp"
#include "resolve/libc_symbols.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {
namespace {

// Whether a library loaded with RTLD_DEEPBIND could bind its graph launches past the shim:
// NVIDIA's libraries and the frameworks that launch graphs through them.
bool launches_graphs(const char *file) {
  return file &&
         (is_nvidia_library(file) || strncmp(file_base_name(file), "libtorch_cuda", 13) == 0);
}

}  // namespace
}  // namespace ferrum_replay::shim

namespace {
std::atomic<bool> g_deepbind_reported{false};
}  // namespace

extern "C" {

__attribute__((visibility("hidden"))) void *ferrum_libc_dlsym_address() {
  return reinterpret_cast<void *>(ferrum_replay::shim::libc_dlsym());
}

__attribute__((visibility("hidden"))) void *ferrum_libc_dlvsym_address() {
  return reinterpret_cast<void *>(ferrum_replay::shim::libc_dlvsym());
}

__attribute__((visibility("hidden"))) void *ferrum_dlopen_prologue(const char *file, int mode) {
  if ((mode & RTLD_DEEPBIND) && ferrum_replay::shim::launches_graphs(file) &&
      !g_deepbind_reported.exchange(true, std::memory_order_relaxed)) {
    (void)ferrum_replay::shim::settings();  // the log level
    ferrum_replay::shim::log_line(
        ferrum_replay::shim::LogLevel::error,
        "dlopen('%s', RTLD_DEEPBIND): a library loaded with RTLD_DEEPBIND binds to "
        "its own dependencies first, so graph launches it makes may bypass "
        "ferrum-replay and have no range",
        ferrum_replay::shim::message_value(file).text);
  }
  return reinterpret_cast<void *>(ferrum_replay::shim::libc_dlopen());
}

__attribute__((visibility("hidden"))) void *ferrum_dlsym_on_handle(void *handle, const char *name) {
  ferrum_replay::shim::DlsymFunction real = ferrum_replay::shim::libc_dlsym();
  if (!real) return nullptr;
  void *found = real(handle, name);
  return found ? ferrum_replay::shim::wrap_loaded_symbol(name, found) : found;
}

__attribute__((visibility("hidden"))) void *ferrum_dlvsym_on_handle(void *handle, const char *name,
                                                                    const char *version) {
  ferrum_replay::shim::DlvsymFunction real = ferrum_replay::shim::libc_dlvsym();
  if (!real) return nullptr;
  void *found = real(handle, name, version);
  return found ? ferrum_replay::shim::wrap_loaded_symbol(name, found) : found;
}

}  // extern "C"
