#include "range/activation.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <new>
#include <optional>

#include "errno_kept.hpp"
#include "gpu/gpu_engine.hpp"
#include "loader_error.hpp"
#include "monotonic_clock.hpp"
#include "naming/graph_naming.hpp"
#include "no_cancel.hpp"
#include "output_file.hpp"
#include "own_process.hpp"
#include "range/exit_order.hpp"
#include "range/process_files.hpp"
#include "resolve/libc_symbols.hpp"
#include "secure_execution.hpp"
#include "setting_names.hpp"
#include "shared_memory_child.hpp"
#include "startup_env.hpp"
#include "support/loading_process.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {
namespace detail {
// Read by every process at exit (exit_summary.cpp), CUDA or not: kept in initialised data,
// whose page the loader writes at start-up anyway, rather than in .bss, where that one read
// would fault in a page of its own.
[[gnu::section(".data.ferrum_replay_phase")]] std::atomic<Phase> g_phase{Phase::untouched};
nvtxDomainHandle_t g_domain = nullptr;
}  // namespace detail

namespace {

// Constructed by settings() when first read (read_settings sets every field), so it starts as
// zeros, in .bss: 2.8 KB less initialised .data, whose pages the loader writes (copy-on-write)
// in every process; tests/load_cost_check.py keeps them to the one it writes anyway.
union SettingsStorage {
  constexpr SettingsStorage() : unread() {}
  char unread;
  Settings value;
};
constinit SettingsStorage g_settings_storage;
constexpr Settings &g_settings = g_settings_storage.value;
std::atomic<int> g_settings_state{0};  // 2: read (a reader claims g_settings_reader first)

// Set while this thread activates: NVTX attaches its tool inside nvtxDomainCreateA, and a
// tool (Nsight's injection) may call CUDA from there. Such a re-entrant launch passes through.
__attribute__((tls_model("initial-exec"))) thread_local bool t_activating = false;

// Set while this thread reads the settings. A signal handler that interrupts the reading and
// calls into us on the same thread must not wait for it (the reading cannot go on until the
// handler returns): its launch passes through, and settings() hands it what is read so far.
__attribute__((tls_model("initial-exec"))) thread_local bool t_reading_settings = false;

void complain_on_stderr(const char *sentence, void *) {
  warn_line("%s", sentence);
}

struct ToolSearch {
  const char *path;
  struct stat file;
  bool have_file;
  bool found;
};

bool match_tool(const link_map *object, void *context) {
  auto *search = static_cast<ToolSearch *>(context);
  const char *name = object->l_name;
  if (!name || !name[0]) return false;
  struct stat st;
  if (strcmp(name, search->path) == 0 ||
      (search->have_file && stat(name, &st) == 0 && st.st_dev == search->file.st_dev &&
       st.st_ino == search->file.st_ino))
    search->found = true;
  return search->found;
}

// Why no NVTX tool answered nvtxDomainCreateA, in words that say what happened: no tool was
// named, the named one is not loaded (it could not be, or NVTX unloaded it because its
// initialisation failed), or it is loaded and simply installed no handler for domains.
// Whether it is loaded is read from the loader's list, without taking a reference to it, and
// under the loader's lock only in the process that loaded the shim (walk_loaded_objects:
// activation may run in a fork child).
void describe_missing_tool(char *out, size_t size) {
  const char *path = common::startup_env("NVTX_INJECTION64_PATH");
  if (!path || !path[0]) {
    snprintf(out, size, "no NVTX tool is attached (NVTX_INJECTION64_PATH is unset)");
    return;
  }
  ToolSearch search{path, {}, false, false};
  search.have_file = stat(path, &search.file) == 0;
  walk_loaded_objects(LoadedObjects::all, match_tool, &search, in_loading_process());
  const MessageValue shown = message_value(path);
  if (search.found)
    snprintf(out, size,
             "the NVTX tool '%s' is loaded but answered no nvtxDomainCreateA (it installed no "
             "handler for domains), so no tool sees ranges",
             shown.text);
  else
    snprintf(out, size,
             "the NVTX tool '%s' is not loaded (it could not be loaded or its initialisation "
             "failed)",
             shown.text);
}

// A %q{NAME} of FERRUM_REPLAY_RUNNING_DIR that is not set is said once, here, as the summary's
// is at exit (docs/text-rules.md section 1): the marker itself is made later, silently, at the
// first launch. Static storage: activation runs once, on one thread.
void say_unset_running_dir_variables() {
  static char expanded[common::kMaxExpandedPath + 1];
  char unset[256];
  if (g_settings.running_dir[0] &&
      expand_process_pattern(g_settings.running_dir, expanded, sizeof expanded, unset,
                             sizeof unset) &&
      unset[0])
    warn_line("FERRUM_REPLAY_RUNNING_DIR: not set: %s (each %%q{NAME} expanded to nothing)", unset);
}

std::atomic<FILE *const *> g_stdout_variable{nullptr};
std::atomic<FILE *> g_stdout_object{nullptr};

// libc_stdout's answer (activation.hpp), looked up once; the caller holds a LoaderErrorCleared.
void note_libc_stdout() {
  DlsymFunction lookup = libc_dlsym();
  void *variable = lookup ? lookup(RTLD_DEFAULT, "stdout") : nullptr;
  void *object = lookup ? lookup(RTLD_DEFAULT, "_IO_2_1_stdout_") : nullptr;
  if (!variable || !object) return;
  g_stdout_object.store(static_cast<FILE *>(object), std::memory_order_release);
  g_stdout_variable.store(static_cast<FILE *const *>(variable), std::memory_order_release);
}

detail::Phase activate() {
  (void)settings();
  // First: a privileged process's environment is not its own (secure_execution.hpp). Its
  // settings were parsed above only to know whether this line was asked for.
  if (common::secure_execution()) {
    log_line(LogLevel::info,
             "this process runs in secure-execution mode (set-user-ID, set-group-ID or file "
             "capabilities), whose environment is not trusted: no NVTX tool is attached, nothing "
             "is written, and every launch passes through untouched");
    return detail::Phase::pass_through;
  }
  // From here on the loader is called (later_copy's lookup, NVTX loading its tool, the tool's
  // own start, the exit hook's library): no error of ours is left for the program.
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp
  if (later_copy()) return detail::Phase::pass_through;
  if (!g_settings.enabled) {
    log_line(LogLevel::info, "FERRUM_REPLAY=off: every launch passes through untouched");
    return detail::Phase::pass_through;
  }
  // Before the tool attaches: its initialisation may ask for GPU times.
  gpu::configure(g_settings.gpu_time, g_settings.gpu_time_every);
  detail::g_domain = nvtxDomainCreateA(g_settings.domain);
  char why[512] = "";
  if (!detail::g_domain && log_enabled(LogLevel::info)) describe_missing_tool(why, sizeof why);
  if (!detail::g_domain && !g_settings.summary[0] && !g_settings.gpu_time) {
    // No tool answered (NVTX's no-op state lasts for the process) and no summary to count
    // for: every launch passes straight through, lookups hand out the genuine functions.
    log_line(LogLevel::info,
             "%s, no FERRUM_REPLAY_SUMMARY and FERRUM_REPLAY_GPU_TIME off: every launch passes "
             "through untouched",
             why);
    gpu::configure(false, 1);
    return detail::Phase::pass_through;
  }
  note_working_directory();  // process_files.hpp: where relative paths of ours point
  if (g_settings.summary[0]) note_libc_stdout();  // for a summary on a stream (libc_stdout)
  set_running_dir(g_settings.running_dir);
  say_unset_running_dir_variables();
  // After the program's libraries and the NVTX tool are loaded: the exit hook then runs after
  // their destructors, whose launches it counts (exit_order.hpp). Only where a tool answered:
  // a tool's ranges are what the summary is checked against, and NVTX has loaded that tool
  // with a dlopen of its own (usually just now) — this one adds no wait that one did not have.
  // Without a tool it would be the process's only one here, and in a fork() child made while
  // another thread of the parent walked the loaded objects (dl_iterate_phdr, C++ exception
  // unwinding) it waits for ever on the loader's lock that thread held (fault
  // fork_while_loader_busy). Left: a child whose parent loaded the tool (its own NVTX calls)
  // but never launched, forked during such a walk.
  if (detail::g_domain && (g_settings.summary[0] || g_settings.running_dir[0])) defer_exit_hook();
  NamingEnvironment naming;
  naming.rules = read_names_file(
      g_settings.names_path, [](const char *sentence, void *) { warn_line("%s", sentence); },
      nullptr);
  naming.message_template = g_settings.message_template;
  naming.domain = detail::g_domain;
  set_naming_environment(naming);
  if (detail::g_domain)
    log_line(LogLevel::info, "active: ranges in NVTX domain '%s'; an NVTX tool is attached",
             g_settings.domain);
  else
    log_line(LogLevel::info, "active: only FERRUM_REPLAY_SUMMARY counts; %s", why);
  return detail::Phase::active;
}

void short_pause() {
  timespec pause{0, 50 * 1000};  // 50 us: the activating thread is inside a tool's init
  nanosleep(&pause, nullptr);
}

// The process whose thread activates. A fork() child of it made meanwhile has the phase
// `activating` and no thread that will ever end it: its launches must not wait for one.
// (0 until a thread claims the activation: the claim itself.)
std::atomic<pid_t> g_activating_process{0};

// How long a graph call waits for another thread's activation, once per process; set when one
// waited that long in vain (activate_slow).
constexpr int kActivationWaitMs = 2000;
std::atomic<bool> g_activation_overdue{false};

}  // namespace

// Whether another copy of the shim — the same library from another path: one a container preloads
// for every process and the one `ferrum-replay record` adds from a checkout or a wheel — comes
// before this one in the global scope (the loader's answers: a copy loaded RTLD_LOCAL is reached
// by no launch, review CQ-2). The program's launches reach that copy first, and through its real
// functions this one: were both to open a range, every replay would be two nested ranges and
// counted twice. The first copy names the replays; a later one passes through. Copies are told by
// common/shim_identity.hpp's rule: a program's own exported fallback of the naming API is none
// (taken for one, it switched the shim off: review CP-5). Found once, and asked again by GPU
// timing's hand-off: a tool must not register with a copy that steps aside (review CP-3).
bool later_copy() {
  static std::atomic<int> known{0};  // 0: not asked yet; 1: the first copy; 2: a later one
  if (const int answer = known.load(std::memory_order_acquire)) return answer == 2;
  const common::LoaderErrorCleared loader_error;  // the lookups may miss (loader_error.hpp)
  const char *before = shim_copy_before_this_one();
  known.store(before ? 2 : 1, std::memory_order_release);
  if (!log_enabled(LogLevel::info)) return before != nullptr;
  const char *after = before ? nullptr : another_shim_copy(in_loading_process());
  if (!before && !after) return false;
  Dl_info ours{};
  const MessageValue them = message_value(before ? before : after);
  const MessageValue self = message_value(
      dladdr(reinterpret_cast<void *>(&later_copy), &ours) && ours.dli_fname ? ours.dli_fname : "");
  if (before)
    log_line(LogLevel::info,
             "another copy of ferrum-replay ('%s') is loaded before this one ('%s') and names "
             "the replays: this one passes every launch through",
             them.text, self.text);
  else
    log_line(LogLevel::info,
             "another copy of ferrum-replay ('%s') is loaded beside this one ('%s'): this one "
             "names the replays, and its launches go to the driver past that one",
             them.text, self.text);
  return before != nullptr;
}

namespace detail {

bool activate_slow(bool wait_for_others) {
  Phase phase = g_phase.load(std::memory_order_acquire);
  if (phase == Phase::active) return true;
  if (phase == Phase::pass_through || t_activating || t_reading_settings) return false;
  // The first launch initialises NVTX and whatever tool it loads (which may do anything), reads
  // the names file, logs; the others wait below (nanosleep): a launch is not a cancellation
  // point, so none of this may act on the program's cancellation request (no_cancel.hpp).
  const common::NoCancel no_cancel;
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: files, NVTX's dlopen, the tool's init
  // The claim carries the claiming process: a fork() child made at any moment after it knows
  // that the activating thread is not among its own (a claim and a pid stored apart left a
  // window where the child saw the claim without the pid, and waited on every launch).
  const pid_t self = getpid();
  pid_t unclaimed = 0;
  if (g_activating_process.compare_exchange_strong(unclaimed, self, std::memory_order_acq_rel)) {
    g_phase.store(Phase::activating, std::memory_order_release);
    t_activating = true;
    common::note_own_process();  // own_process.hpp: the state made from here on is ours
    // A vfork() child's exit() must not consume this process's exit handlers and destructors
    // (shared_memory_child.hpp, F162). Not in a fork child: registering may wait for ever there
    // (exit_work.hpp).
    if (in_loading_process()) common::end_shared_memory_children_at_exit();
    phase = activate();
    t_activating = false;
    g_phase.store(phase, std::memory_order_release);
    return phase == Phase::active;
  }
  // Another thread is activating (the phase may still read `untouched` for a moment). In a
  // fork() child of the activating process that thread is gone: the child passes through from
  // then on (what the tool had half set up in it is not to be used).
  if (g_activating_process.load(std::memory_order_acquire) != self) {
    Phase expected = g_phase.load(std::memory_order_acquire);
    while (
        expected != Phase::active && expected != Phase::pass_through &&
        !g_phase.compare_exchange_weak(expected, Phase::pass_through, std::memory_order_acq_rel)) {
    }
    if (expected != Phase::active && expected != Phase::pass_through)
      log_line(LogLevel::info,
               "forked while another thread was activating: this process passes through");
    return g_phase.load(std::memory_order_acquire) == Phase::active;
  }
  // A lookup hands out our wrapper, which decides at each call: it need not wait.
  if (!wait_for_others) return true;
  // Wait for it so that this launch gets its range too, but never long: 2 s at most (a tool
  // stuck in its init), after which this launch passes through — and so does every later call
  // of every thread until the activation ends, without waiting again: each waiting its own 2 s
  // held a program's every launch and instantiation 2 s for as long as the tool took.
  if (g_activation_overdue.load(std::memory_order_acquire)) return false;
  std::optional<common::MonotonicBound> bound;  // monotonic_clock.hpp
  for (int spin = 0;; ++spin) {
    phase = g_phase.load(std::memory_order_acquire);
    if (phase == Phase::active || phase == Phase::pass_through) return phase == Phase::active;
    if (spin < 64) {
      sched_yield();
      continue;
    }
    // Started here, not before the spins: a wait of a few yields never reads the clock.
    if (!bound) {
      bound.emplace(kActivationWaitMs);
    } else if (bound->passed() || g_activation_overdue.load(std::memory_order_acquire)) {
      if (!g_activation_overdue.exchange(true, std::memory_order_acq_rel))
        log_line(LogLevel::error,
                 "another thread's start of the shim (its NVTX tool's initialisation) has taken "
                 "over %d ms: graph calls pass through until it ends",
                 kActivationWaitMs);
      return false;
    }
    short_pause();
  }
}

}  // namespace detail

namespace {

void read_into_settings() {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp
  t_reading_settings = true;
  new (&g_settings) Settings();
  common::note_standard_streams();  // before any line of ours: stdout and stderr as they are
  read_settings(g_settings, common::process_env, nullptr, complain_on_stderr, nullptr);
  if (common::secure_execution()) {
    // A privileged process (secure_execution.hpp): of its environment only the log level
    // counts (it decides whether activate() says why this copy does nothing). Everything
    // else is off: no summary, names file, running marker or GPU timing, whoever asks.
    const LogLevel level = g_settings.log_level;
    new (&g_settings) Settings();
    g_settings.log_level = level;
    g_settings.enabled = false;
  }
  // A FERRUM_REPLAY* variable nothing reads: one line each, as for a bad value (a misspelt
  // FERRUM_REPLAY_SUMARY silently gave no summary). Off reads nothing but the log level.
  if (g_settings.enabled)
    common::say_unknown_settings(kSettingPrefix, kSettingNames, kInternalSettingNames,
                                 complain_on_stderr, nullptr);
  // A summary to /dev/fd/N: descriptor N as it is now, the only file it may be written to.
  common::note_output_stream(g_settings.summary);
  set_log_level(g_settings.log_level);
  g_settings_state.store(2, std::memory_order_release);
  t_reading_settings = false;
}

// The process whose thread reads the settings (0 until a thread claims the reading).
std::atomic<pid_t> g_settings_reader{0};

}  // namespace

LibcStdout libc_stdout() {
  FILE *const *variable = g_stdout_variable.load(std::memory_order_acquire);
  return {variable, variable ? g_stdout_object.load(std::memory_order_acquire) : nullptr};
}

const Settings &settings() {
  if (__builtin_expect(g_settings_state.load(std::memory_order_acquire) == 2, 1)) return g_settings;
  // The claim to read them carries the reading process (as the activation's does): a fork()
  // child made at any moment after it finds the reader gone and reads them itself, for the
  // child; the threads of the reading process wait. Reading takes microseconds (a warning to
  // a full stderr pipe waits at most 2 s: support/log.cpp) and calls nothing that could come
  // back here.
  // A signal handler on the reading thread (t_reading_settings): what is read so far, each
  // field its default or the user's value; the waiting below would never end.
  if (t_reading_settings) return g_settings;
  const pid_t self = getpid();
  pid_t reader = 0;
  if (g_settings_reader.compare_exchange_strong(reader, self, std::memory_order_acq_rel)) {
    read_into_settings();
    return g_settings;
  }
  for (int spin = 0; g_settings_state.load(std::memory_order_acquire) != 2; ++spin) {
    sched_yield();
    if (spin < 64 || spin % 64 != 0) continue;
    reader = g_settings_reader.load(std::memory_order_acquire);
    if (reader != self &&
        g_settings_reader.compare_exchange_strong(reader, self, std::memory_order_acq_rel)) {
      read_into_settings();
      break;
    }
  }
  return g_settings;
}

}  // namespace ferrum_replay::shim
