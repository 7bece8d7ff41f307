// Resolution of the real functions behind the shim's exports and wrappers. Lazy (first
// call, never at load time), thread-safe (racing resolutions find the same address; the
// first non-null result is cached for the life of the process) and lock-free on the hot path.
//
// A real function is found, in order: from what a lookup handed out (provide(): the driver's
// cuGetProcAddress answer, dlsym on the driver's handle), by dlsym(RTLD_NEXT), or from the
// library that owns the real driver (the runtime opens libcuda RTLD_LOCAL, out of RTLD_NEXT's
// reach). Never one of the shim's own functions: that would be an infinite loop.
#pragma once

#include <atomic>

namespace ferrum_replay::shim {

// True when `address` lies in the shim itself (one of our exports or wrappers). Uses dladdr:
// for resolution time only, never the launch path.
bool is_own_address(const void *address);

// Remembers the library that defines `real_driver_function` (a genuine driver entry point)
// as the place to resolve other driver functions from: its file name only, never a handle (the
// program must stay able to unload the driver; GPU timing alone keeps it loaded, keep_loaded).
void note_driver_library(const void *real_driver_function);

// Takes a reference of the caller's own to the library that defines `function` (dladdr's path,
// opened RTLD_NOLOAD: that very instance, never a new load), never dropped: the library stays
// loaded whatever the program dlcloses. Only GPU timing asks (gpu_timing.cpp: its events may be
// in flight whenever the program unloads the driver). True when held, or when no reference is
// needed (the main program); false when the instance cannot be opened by its path (loaded with
// dlmopen into another namespace). Resolution time only, never the launch path.
bool keep_loaded(const void *function);

// The next definition of `name` after the shim, else the driver library's own; never ours.
// Null when neither is loaded yet — a later call tries again.
void *find_next_definition(const char *name);

template <typename Function>
class RealFunction {
 public:
  constexpr explicit RealFunction(const char *name) : name_(name) {}
  RealFunction(const RealFunction &) = delete;
  RealFunction &operator=(const RealFunction &) = delete;

  Function get() {
    Function function = function_.load(std::memory_order_acquire);
    return __builtin_expect(function != nullptr, 1) ? function : resolve();
  }
  // The definition found so far, without resolving one: null until a get() or provide() found it.
  Function resolved() const { return function_.load(std::memory_order_acquire); }
  const char *name() const { return name_; }

  // A genuine definition seen in a lookup's answer; kept if none is known yet.
  void provide(void *address) {
    if (!address || is_own_address(address)) return;
    Function expected = nullptr;
    function_.compare_exchange_strong(expected, reinterpret_cast<Function>(address),
                                      std::memory_order_acq_rel);
    note_driver_library(address);
  }

 private:
  Function resolve() {
    auto function = reinterpret_cast<Function>(find_next_definition(name_));
    if (function) function_.store(function, std::memory_order_release);
    return function;
  }

  const char *name_;
  std::atomic<Function> function_{nullptr};
};

}  // namespace ferrum_replay::shim
