#include "activation.hpp"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "graph_naming.hpp"
#include "log.hpp"

namespace ferrum {
namespace detail {
std::atomic<int> g_phase{kUntouched};
nvtxDomainHandle_t g_domain = nullptr;
}  // namespace detail

namespace {

constinit Settings g_settings;         // no load-time constructor: costs nothing at start-up
std::atomic<int> g_settings_state{0};  // 0: unread, 1: being read, 2: read

// Set while this thread activates: NVTX attaches its tool inside nvtxDomainCreateA, and a
// tool (Nsight's injection) may call CUDA from there. Such a re-entrant launch passes through.
__attribute__((tls_model("initial-exec"))) thread_local bool t_activating = false;

const char *lookup_environment(const char *name, void *) {
  return getenv(name);
}
void complain_on_stderr(const char *sentence, void *) {
  warn_line("%s", sentence);
}

int activate() {
  (void)settings();
  if (!g_settings.enabled) {
    log_line(LogLevel::info, "FERRUM_REPLAY=off: every launch passes through untouched");
    return detail::kPassThrough;
  }
  detail::g_domain = nvtxDomainCreateA(g_settings.domain);
  if (!detail::g_domain && !g_settings.summary[0]) {
    // No tool answered (NVTX's no-op state lasts for the process) and no summary to count
    // for: every launch passes straight through, lookups hand out the genuine functions.
    log_line(LogLevel::info,
             "no NVTX tool is attached (NVTX_INJECTION64_PATH unset or the tool failed) and no "
             "FERRUM_REPLAY_SUMMARY: every launch passes through untouched");
    return detail::kPassThrough;
  }
  load_names_file(g_settings.names_path);
  log_line(LogLevel::info, "active: ranges in NVTX domain '%s'; %s", g_settings.domain,
           detail::g_domain ? "an NVTX tool is attached"
                            : "no NVTX tool is attached: only FERRUM_REPLAY_SUMMARY counts");
  return detail::kActive;
}

void short_pause() {
  timespec pause{0, 50 * 1000};  // 50 us: the activating thread is inside a tool's init
  nanosleep(&pause, nullptr);
}

}  // namespace

namespace detail {

bool activate_slow() {
  int phase = g_phase.load(std::memory_order_acquire);
  if (phase == kActive) return true;
  if (phase == kPassThrough || t_activating) return false;
  int expected = kUntouched;
  if (g_phase.compare_exchange_strong(expected, kActivating, std::memory_order_acq_rel)) {
    t_activating = true;
    phase = activate();
    t_activating = false;
    g_phase.store(phase, std::memory_order_release);
    return phase == kActive;
  }
  // Another thread is activating. Wait for it so that this launch gets its range too, but
  // never forever: after ~2 s (a tool stuck in its init) pass this launch through instead.
  for (int spin = 0; spin < 40000; ++spin) {
    phase = g_phase.load(std::memory_order_acquire);
    if (phase != kActivating) return phase == kActive;
    if (spin < 64)
      sched_yield();
    else
      short_pause();
  }
  return false;
}

}  // namespace detail

const Settings &settings() {
  if (__builtin_expect(g_settings_state.load(std::memory_order_acquire) == 2, 1)) return g_settings;
  int expected = 0;
  if (g_settings_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    read_settings(g_settings, lookup_environment, nullptr, complain_on_stderr, nullptr);
    set_log_level(g_settings.log_level);
    g_settings_state.store(2, std::memory_order_release);
  } else {
    // Reading takes microseconds and calls nothing that could come back here.
    while (g_settings_state.load(std::memory_order_acquire) != 2) sched_yield();
  }
  return g_settings;
}

}  // namespace ferrum
