#include "range/launch_range.hpp"

#include <signal.h>
#include <string.h>

#include <atomic>

#include "errno_kept.hpp"
#include "naming/call_site.hpp"
#include "naming/graph_content.hpp"
#include "range/scope_names.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {

constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadCalls t_calls{};

namespace {
std::atomic<unsigned long long> g_abandoned{0};
std::atomic<bool> g_abandoned_reported{false};
}  // namespace

bool close_abandoned_call() {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: sigaltstack, a tool's pop, a log line
  // A signal handler on the alternate stack that interrupted the open call: nested in it,
  // wherever that stack lies. (One system call, on this rare path only.)
  stack_t alternate{};
  if (sigaltstack(nullptr, &alternate) == 0 && (alternate.ss_flags & SS_ONSTACK)) return false;
  ThreadCalls &calls = t_calls;
  if (calls.pop_pending) {
    calls.pop_pending = false;
    nvtxDomainRangePop(calls.pop_domain);  // the abandoned range's pop, late but on this thread
  }
  if (gpu::timing_on()) gpu::give_back_abandoned();  // and its timing pair, if it had one
  calls.open = nullptr;
  g_abandoned.fetch_add(1, std::memory_order_relaxed);
  if (!g_abandoned_reported.exchange(true, std::memory_order_relaxed))
    log_line(LogLevel::info,
             "a CUDA graph call was left without returning (a longjmp out of it); its range, if "
             "any, was closed at the thread's next graph call");
  return true;
}

namespace {

// The call site as FERRUM_REPLAY_SITE asks ("" when off). Taken outside the registry's mutex:
// walking the stack takes the loader's lock, which a thread inside dlopen may hold while it
// calls CUDA.
struct Site {
  char text[kMaxSiteLength + 1] = {};
  Site() {
    const Settings &config = settings();
    if (config.site_mode != SiteMode::off) capture_call_site(text, sizeof text, config.site_skip);
  }
};

}  // namespace

GraphRecord &record_for_launch_slow(const void *exec, GraphRecord *record) {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the registry's mappings, the call site
  const Site site;  // the launch's own call site: the best we know of a graph seen late
  if (!record) return graph_registry().register_at_launch(exec, site.text);
  graph_registry().name_at_first_launch(*record, site.text);
  return *record;
}

static_assert(kMaxScopeNameLength == kMaxNameLength, "a scope's name is cut as a graph's name");

void register_instantiated(const void *exec, const void *graph, const char *api) {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: after the real call, whose errno counts
  const Settings &config = settings();
  char site[kMaxSiteLength + 1] = "";
  if (config.site_mode == SiteMode::instantiate)
    capture_call_site(site, sizeof site, config.site_skip);
  char content[kMaxContentLength + 1] = "";
  if (config.content && graph) describe_graph_content(graph, content, sizeof content);
  // The naming scope open on this thread, if any: the program's name for the graph.
  graph_registry().on_instantiate(exec, api, site, content, config.site_mode == SiteMode::launch,
                                  current_scope_name());
}

int name_graph_exec(const void *exec, const char *name) {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the answer is the return value
  char site[kMaxSiteLength + 1] = "";
  if (exec && !graph_registry().find(exec)) {
    const Site seen;
    memcpy(site, seen.text, sizeof site);
  }
  return graph_registry().name_graph(exec, name, site);
}

unsigned long long abandoned_calls() {
  return g_abandoned.load(std::memory_order_relaxed);
}

}  // namespace ferrum_replay::shim
