#include "launch_range.hpp"

#include <signal.h>

#include <atomic>

#include "log.hpp"

namespace ferrum {

constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadCalls t_calls{};

namespace {
std::atomic<unsigned long long> g_abandoned{0};
std::atomic<bool> g_abandoned_reported{false};
}  // namespace

bool close_abandoned_call() {
  // A signal handler on the alternate stack that interrupted the open call: nested in it,
  // wherever that stack lies. (One system call, on this rare path only.)
  stack_t alternate{};
  if (sigaltstack(nullptr, &alternate) == 0 && (alternate.ss_flags & SS_ONSTACK)) return false;
  ThreadCalls &calls = t_calls;
  if (calls.pop_pending) {
    calls.pop_pending = false;
    nvtxDomainRangePop(calls.pop_domain);  // the abandoned range's pop, late but on this thread
  }
  calls.open = nullptr;
  g_abandoned.fetch_add(1, std::memory_order_relaxed);
  if (!g_abandoned_reported.exchange(true, std::memory_order_relaxed))
    log_line(LogLevel::info,
             "a CUDA graph call was left without returning (a longjmp out of it); its range, if "
             "any, was closed at the thread's next graph call");
  return true;
}

unsigned long long abandoned_calls() {
  return g_abandoned.load(std::memory_order_relaxed);
}

}  // namespace ferrum
