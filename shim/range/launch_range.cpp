#include "range/launch_range.hpp"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "errno_kept.hpp"
#include "held_here.hpp"
#include "naming/call_site.hpp"
#include "naming/graph_content.hpp"
#include "range/jump_target.hpp"
#include "range/scope_names.hpp"
#include "support/exit_work.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {

constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadCalls t_calls{};

namespace {

std::atomic<unsigned long long> g_abandoned{0};

// What an open call left by a jump points at (note_jump): never a marker of the thread's stack,
// nor holding its marker_value, so that no call is taken for one nested in it.
constinit const volatile uintptr_t g_left_call = 0;
std::atomic<bool> g_abandoned_reported{false};

// The open call of this thread can no longer return: its range's pop, late but on this thread
// and in its domain; its timing pair back to the pool; the guard cleared.
void settle_open_call() {
  ThreadCalls &calls = t_calls;
  if (calls.pop_pending) {
    calls.pop_pending = false;
    nvtxDomainRangePop(calls.pop_domain);
  }
  if (gpu::timing_on()) gpu::give_back_abandoned();
  calls.open = nullptr;
  g_abandoned.fetch_add(1, std::memory_order_relaxed);
  if (!g_abandoned_reported.exchange(true, std::memory_order_relaxed))
    log_line(LogLevel::info,
             "a CUDA graph call was left without returning (a longjmp out of it); its range, if "
             "any, was closed at the thread's next graph call, as the thread ended, or at exit");
}

// Where a thread's open call is settled when no later call of the thread comes (a watchdog's
// thread whose last launch was left by siglongjmp, then returned; a main thread that then
// returned from main): a pthread key whose destructor runs as a thread ends (returned,
// pthread_exit, cancelled), and, since no key destructor runs for the thread that calls exit(),
// the shim's exit handler for that one (exit_work.hpp). Both made once per process, at the first
// range.
pthread_once_t g_end_once = PTHREAD_ONCE_INIT;
pthread_key_t g_end_key;
bool g_end_key_made = false;  // written once under g_end_once

void thread_ends(void *) {
  // A range later in this thread's end (another key's destructor that launches) arms the key
  // again: the C library runs destructors again for values set meanwhile.
  t_calls.errno_at = nullptr;
  settle_thread_calls();
}

// The exit handler runs in exit() before the ELF destructors, where an NVTX tool writes its
// report (and the recorder its trace): the pop reaches it in time (exit_work.hpp).
void exiting_thread() {
  settle_thread_calls();
}

// fork() on a thread whose last call was left by a non-local jump: its range is closed in the
// parent, before the fork, so that the child inherits no pop owed (it issued it at its exit: a
// range of the parent's launch in the child's trace, no launch of the child's to account for
// it). A fork from inside the open call (a signal handler's, or one the call makes) is nested
// in it: the call returns in both processes and pops as always.
FERRUM_REAL_STACK_FRAME void close_abandoned_before_fork() {
  if (!t_calls.open) return;
  volatile uintptr_t here = 0;
  if (nested_in_open_call(reinterpret_cast<uintptr_t>(&here))) return;
  close_abandoned_call();
}

void make_end_hooks() {
  g_end_key_made = pthread_key_create(&g_end_key, thread_ends) == 0;
  run_at_exit(ExitWork::settle_thread_calls, exiting_thread);
  pthread_atfork(close_abandoned_before_fork, nullptr, nullptr);
}

}  // namespace

int *set_up_thread_calls() {
  int *at = &errno;
  const int saved = *at;  // the key's set-up may allocate: errno_kept.hpp's rule, by hand
  pthread_once(&g_end_once, make_end_hooks);
  // Any non-null value: only its destructor matters. Without one (no memory for the thread's
  // second-level key array), the thread's next call or the exit hook still settles its call.
  if (g_end_key_made) (void)pthread_setspecific(g_end_key, &t_calls);
  *at = saved;
  t_calls.errno_at = at;
  return at;
}

bool close_abandoned_call() {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: sigaltstack, a tool's pop, a log line
  // A signal handler on the alternate stack that interrupted the open call: nested in it,
  // wherever that stack lies — unless a jump is known to have left it. (One system call, on
  // this rare path only.)
  stack_t alternate{};
  if (t_calls.open != &g_left_call && sigaltstack(nullptr, &alternate) == 0 &&
      (alternate.ss_flags & SS_ONSTACK))
    return false;
  settle_open_call();
  return true;
}

void note_jump(const void *env) {
  const volatile uintptr_t *marker = t_calls.open;
  if (!marker || marker == &g_left_call) return;
  const uintptr_t target = jump_target(env);
  // Unknown (a jmp_buf we cannot decode), or into a frame below the open call's: nested in it.
  if (target <= reinterpret_cast<uintptr_t>(marker)) return;
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: sigaltstack
  // A handler on the alternate stack that jumps within that stack stays inside the call it
  // interrupted (the stack may lie anywhere, above the call's frame too).
  stack_t alternate{};
  if (sigaltstack(nullptr, &alternate) == 0 && (alternate.ss_flags & SS_ONSTACK)) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(alternate.ss_sp);
    if (target >= base && target - base <= alternate.ss_size) return;
  }
  // A plain store: a handler of this very thread reads it, no other thread does.
  t_calls.open = &g_left_call;
}

void settle_thread_calls() {
  if (!t_calls.open) return;
  // No frame check here: at a thread's end none of its calls can return, nor at exit (exit()
  // from a signal handler that interrupted a launch: the launch never resumes, and its range is
  // closed rather than left open at exit). The pop is never issued twice: LaunchRange clears
  // pop_pending before its own pop.
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: a tool's pop, a log line
  settle_open_call();
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

GraphRecord *record_for_launch_slow(const void *exec, GraphRecord *record) {
  GraphRegistry &registry = graph_registry();
  // A null handle is never registered: its launches share one record, found without a stack
  // walk or a lock once it is made.
  if (!exec)
    if (GraphRecord *shared = registry.shared_overflow()) return shared;
  // The registry has no room for a graph it does not know (at its bound, or out of memory),
  // nor for a label, and none came back since: it would refuse again, so no walk, no lock and
  // no mapping tried for nothing — on every launch of such a graph (graph_registry.hpp).
  if (!record && registry.refusing_graphs())
    if (GraphRecord *shared = registry.shared_overflow()) return shared;
  if (record && registry.refusing_labels()) return record;  // its name stays pending
  // A signal handler's launch on a thread inside a lock of ours: the registry would refuse
  // (graph_registry.hpp), so no walk for nothing. A graph seen already keeps its range.
  if (common::inside_our_lock()) return record;
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the registry's mappings, the call site
  if (!exec) return registry.register_at_launch(nullptr, "");
  const Site site;  // the launch's own call site: the best we know of a graph seen late
  if (!record) return registry.register_at_launch(exec, site.text);
  registry.name_at_first_launch(*record, site.text);
  return record;
}

static_assert(kMaxScopeNameLength == kMaxNameLength, "a scope's name is cut as a graph's name");

void register_instantiated(const void *exec, const void *graph, const char *api) {
  // As in record_for_launch_slow: the registry would refuse; the graph's first launch
  // registers it.
  if (common::inside_our_lock()) return;
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
  // Inside this thread's guard, as a registration is (instantiate_and_register says why).
  OutermostCall outermost;
  if (!outermost.claimed()) return -EAGAIN;
  if (common::inside_our_lock()) return -EAGAIN;  // the registry would refuse: no walk for it
  const common::ErrnoKept errno_kept;             // errno_kept.hpp: the answer is the return value
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
