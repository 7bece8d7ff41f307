#include "hooks/loader_hooks.hpp"

#include <dlfcn.h>
#include <string.h>

#include <atomic>

#include "range/activation.hpp"
#include "resolve/cuda_libraries.hpp"
#include "resolve/libc_symbols.hpp"
#include "resolve/real_functions.hpp"
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
  // A library may have been unloaded by a dlclose that never reached ours (libc's own, from
  // dlsym(libdl, "dlclose") — Python's ctypes.CDLL("libdl.so.2").dlclose — or one bound
  // RTLD_DEEPBIND): its real functions are forgotten before a dlopen may load another library
  // in its place.
  if (ferrum_replay::shim::any_real_function_kept()) ferrum_replay::shim::forget_unloaded();
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

// The program's dlclose, passed through; then the real functions of a library it unloaded are
// forgotten (forget_unloaded).
__attribute__((visibility("default"))) int dlclose(void *handle) {
  ferrum_replay::shim::DlcloseFunction real = ferrum_replay::shim::libc_dlclose();
  if (!real) return -1;  // no C library definition: cannot happen in a process that links one
  const int result = real(handle);
  if (result == 0 && ferrum_replay::shim::any_real_function_kept())
    ferrum_replay::shim::forget_unloaded();
  return result;
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
