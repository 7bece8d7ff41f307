// The part every launch_* test program shares: the command line, the launch loop (threads,
// the app's own NVTX ranges, exceptions), and what is printed at the end. Each program supplies
// a Backend: how it reaches the CUDA driver or runtime.
//
// Common options (each program's usage comment says which it honours):
//   --graphs G        graphs to create and instantiate (default 2)
//   --iters N         rounds; each round launches every graph once, in order (default 10)
//   --threads T       run the rounds in T threads at once, each with its own stream; the
//                     graphs are shared (default 1)
//   --stream KIND     created (default; cuStreamCreate/cudaStreamCreate per thread), null (0),
//                     legacy (0x1: CU_STREAM_LEGACY / cudaStreamLegacy), ptsz (0x2:
//                     CU_STREAM_PER_THREAD / cudaStreamPerThread)
//   --ptsz            call the _ptsz launch entry point explicitly
//   --app-ranges      push an NVTX range "app step" (global domain, nvtxRangePushA) around each
//                     launch and pop it after, also when the launch threw
//   --app-loose       the program's own NVTX habits that break no promise of the shim's (review
//                     LL-1): before the set-up, a range "serve" pushed in a domain "app" and
//                     never popped, a start/end range "request" never ended, and a detached
//                     thread that pushes "worker" and waits inside it until the process ends;
//                     after the launches, a thread that pops "app" with nothing open, and
//                     `while (nvtxRangePop() >= 0) {}` on the main thread (a child of
//                     --fork-after inherits "serve" open)
//   --app-leaks N     before the set-up, N ranges "leak" pushed in a domain "app" and never popped
//                     (a loop whose error path skips its pop), beyond the recorder's depth limit
//                     when N > 16,384
//   --app-domains D   create D NVTX domains of the program's own first (nvtxDomainCreateA,
//                     "app component NNNNN of a large program"), as a program of many modules
//                     does: a trace lists each
//   --instantiate HOW flags (default: cuGraphInstantiate/cudaGraphInstantiate, i.e.
//                     ...WithFlags) or params (...WithParams, _ptsz in a per-thread build)
//   --upload          upload each graph once after instantiating it (not a launch)
//   --launch-times    also print launch_ns=: the wall time spent inside the launch calls, per
//                     graph (CLOCK_MONOTONIC around each call, summed over threads)
//   --reinstantiate K every K rounds destroy all graph execs (in order) and instantiate them
//                     again (in order): the stand-in driver hands the destroyed handles out
//                     again, swapped when G=2 (needs --threads 1)
//   --kernels LIST    driver-API programs: give every graph kernel nodes, one per name in the
//                     comma-separated LIST, `name*count` for count nodes of that kernel
//                     (e.g. `rmsnorm*4,attention`); names are PTX identifiers, used as the
//                     .entry names of a PTX module built in memory (cuModuleLoadData,
//                     cuModuleGetFunction, cuGraphAddKernelNode), chained after the memset node
//   --graph-kernels L kernel nodes per graph, in addition to --kernels: L is one LIST per graph,
//                     separated by ';' (graph 0's list first; an empty list adds none; graphs
//                     beyond the lists get none), e.g. `prefill*2;decode;decode,sample`
//   --name-graphs P   after each instantiation (and re-instantiation), name graph i `P i` (i as
//                     in per_graph=, from 0) with ferrum_replay_name_graph_exec, looked up with
//                     dlsym(RTLD_DEFAULT); silently skipped when no library exports it
//   --name-from-threads  with --name-graphs: name from two threads at once, racing, each naming
//                     every graph (the second in reverse order) in kNameRounds rounds
//   --name-after K    with --name-graphs: name the graphs after K rounds of launches (a warm-up
//                     launched under the names they had before) instead of after instantiation;
//                     needs --threads 1
//   --flags F         launch_procaddress, launch_entry_point: lookup flags 0, 1 or 2
//   --version V       launch_procaddress, launch_entry_point: CUDA version of the lookup
//   --self-query Q    launch_procaddress: 12000 (default), 11030 or none
//   --dlopen-flags F  launch_dlopen_driver, launch_procaddress: local (default), global or
//                     deepbind (RTLD_LOCAL | RTLD_DEEPBIND)
//   --jump-out K      a watchdog that abandons launches: installs a SIGUSR1 handler and, for
//                     the first K launches of each thread, leaves the launch with siglongjmp
//                     when the signal arrives during it (the stand-in driver raises it inside
//                     every launch with FERRUM_STANDIN_LAUNCH_RAISE=<SIGUSR1's number>); later
//                     signals are ignored by the handler and those launches return normally.
//                     A launch left this way counts as failed and in jumped=
//   --keep-graphs     leave the graph execs alive at the end (no destroy: the process exits
//                     with them, as many do), so that the thread's last launch is its last
//                     graph call
//   --lock-own-image  before anything else, a POSIX read lock (fcntl F_SETLK) on the program's
//                     own executable, as a single-instance guard takes one; at the end a child
//                     asks for it (F_GETLK) and `own_image_lock=held` or `=released` is printed:
//                     any close() of a descriptor of that file in the process releases it
//   --launching-at-exit  once every thread is done, a thread of its own launches graph 0 over
//                     and over (not counted in the lines below) while main calls exit(), once
//                     that thread's first launch has returned: with launches that take a while
//                     (FERRUM_STANDIN_LAUNCH_CALL_NS) it is inside one as the process exits. The
//                     graphs and the set-up are left as they are (that thread still uses them)
//   --exit-after-ms N after the last line, sleep N ms before returning from main (a reader of
//                     the output may leave meanwhile)
//   --tail-unflushed  a last stdout line `tail=unflushed` left in the C library's buffer, for
//                     its exit to write (after the exit handlers: ours)
//   --fork-after      once every thread is done, fork a child that ends at once with exit(0)
//                     (a crash reporter, a helper), and wait for it: a pop owed by the forking
//                     thread must not be inherited (the child would close a range of a launch
//                     it never made)
//   --loader-state    read dlerror() after each instantiation, launch and destruction (cleared
//                     first): what a program checking its own loader calls that way would find
//
// Graphs are instantiated by the programs' named functions instantiate_graphs() (first
// instantiation) and reinstantiate_graphs() (--reinstantiate), non-static and noinline, each
// calling the instantiate entry point itself, so that a call-site name shows which one.
//
// Output on stdout, ending with these lines, the last always in this form:
//   names: calls=<C> failed=<F>     (only with --name-graphs; F counts non-zero returns)
//   names: absent                   (instead, when no ferrum_replay_name_graph_exec was found)
//   launch_ns=<ns inside graph 0's launch calls>,<graph 1>,...   (only with --launch-times)
//   per_graph=<launches of graph 0>,<graph 1>,...
//   exceptions=<launches that threw>
//   jumped=<launches left by siglongjmp>   (only with --jump-out)
//   loader_errors=<calls after which dlerror() reported one>   (only with --loader-state)
//   loader_first=<call>: <message>                    (with --loader-state, when one did)
//   launches=<N> failed=<F> result=<R>
// N counts launches attempted, F those that did not return success (a throw counts as failed),
// R is the code (CUresult or cudaError_t, as the program's API returns) of the last launch that
// returned — with several threads, of the first thread whose last launch failed — or 0.
// Exit status: 0 when every launch succeeded, 3 when any failed or threw, 1 on a setup error
// (message on stderr), 2 on a usage error.

#pragma once

#include <nvtx3/nvToolsExt.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct CUstream_st;

namespace harness {

enum class StreamKind { kCreated, kNull, kLegacy, kPerThread };

struct Options {
  int graphs = 2;
  int iters = 10;
  int threads = 1;
  StreamKind stream = StreamKind::kCreated;
  bool ptsz = false;
  bool app_ranges = false;
  bool app_loose = false;
  int app_leaks = 0;
  int app_domains = 0;
  bool instantiate_with_params = false;
  bool upload = false;
  bool launch_times = false;
  int reinstantiate_every = 0;
  unsigned long long flags = 0;
  int version = 0;  // 0: the program's default
  std::string self_query = "12000";
  std::string dlopen_flags = "local";
  std::vector<std::string> kernels;                     // every graph's, expanded (name*2 -> 2)
  std::vector<std::vector<std::string>> graph_kernels;  // graph i's own, expanded
  bool name_graphs = false;
  std::string name_prefix;
  bool name_from_threads = false;
  int name_after = 0;  // --name-after K
  int jump_out = 0;    // --jump-out K
  bool keep_graphs = false;
  bool fork_after = false;         // --fork-after
  bool tail_unflushed = false;     // --tail-unflushed
  bool lock_own_image = false;     // --lock-own-image
  long long exit_after_ms = 0;     // --exit-after-ms
  bool launching_at_exit = false;  // --launching-at-exit
  bool loader_state = false;

  // The kernel nodes of graph g, in the order they are added: --kernels, then its --graph-kernels.
  std::vector<std::string> kernels_of(int g) const {
    std::vector<std::string> k = kernels;
    if (static_cast<size_t>(g) < graph_kernels.size()) {
      const auto &own = graph_kernels[static_cast<size_t>(g)];
      k.insert(k.end(), own.begin(), own.end());
    }
    return k;
  }
  bool any_kernels() const {
    for (int g = 0; g < graphs; ++g) {
      if (!kernels_of(g).empty()) return true;
    }
    return false;
  }
};

// Rounds of naming per thread with --name-from-threads.
constexpr int kNameRounds = 64;

// The special stream handles have the same values in the driver and the runtime API.
inline CUstream_st *special_stream(StreamKind kind) {
  switch (kind) {
    case StreamKind::kLegacy:
      return reinterpret_cast<CUstream_st *>(0x1);
    case StreamKind::kPerThread:
      return reinterpret_cast<CUstream_st *>(0x2);
    default:
      return nullptr;
  }
}

class Backend {
 public:
  virtual ~Backend() = default;
  // Each returns 0 or an API error code; `what` names the failing call.
  virtual int setup(const Options &opt, const char **what) = 0;  // init, context, G graphs
  // Instantiate every graph, in order: the first time (again = false) through the program's
  // instantiate_graphs(), after destroy_exec of all of them through reinstantiate_graphs().
  virtual int instantiate_all(bool again, const char **what) = 0;
  virtual void *exec_handle(int graph) = 0;                 // CUgraphExec / cudaGraphExec_t
  virtual bool adds_kernel_nodes() const { return false; }  // honours --kernels?
  virtual int upload(int graph, CUstream_st *stream, const char **what) = 0;
  virtual int destroy_exec(int graph, const char **what) = 0;
  // On a new thread: make the context current and create the stream if asked to.
  virtual int thread_begin(CUstream_st **stream, const char **what) = 0;
  virtual int launch(int graph, CUstream_st *stream) = 0;              // the call under test
  virtual int thread_end(CUstream_st *stream, const char **what) = 0;  // sync, destroy stream
  virtual int teardown(const char **what) = 0;
  virtual const char *error_name(int code) = 0;
};

[[noreturn]] inline void usage(const char *usage_text, const char *problem) {
  std::fprintf(stderr, "error: %s\n%s", problem, usage_text);
  std::exit(2);
}

// A kernel list `name[*count],...` appended to `out`, expanded.
inline void parse_kernel_list(const std::string &list, std::vector<std::string> &out,
                              const char *usage_text) {
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    long count = 1;
    if (const size_t star = item.find('*'); star != std::string::npos) {
      char *stop = nullptr;
      const std::string n = item.substr(star + 1);
      count = std::strtol(n.c_str(), &stop, 10);
      if (n.empty() || *stop != '\0' || count < 1 || count > 100000) {
        usage(usage_text, ("kernel list: bad count in '" + item + "'").c_str());
      }
      item.resize(star);
    }
    // A PTX identifier: [a-zA-Z][a-zA-Z0-9_$]* or [_$][a-zA-Z0-9_$]+.
    bool ok = !item.empty() && (std::isalpha(static_cast<unsigned char>(item[0])) ||
                                ((item[0] == '_' || item[0] == '$') && item.size() > 1));
    for (char c : item)
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$');
    if (!ok) usage(usage_text, ("kernel list: '" + item + "' is not a PTX identifier").c_str());
    out.insert(out.end(), static_cast<size_t>(count), item);
  }
}

inline Options parse(int argc, char **argv, const char *usage_text) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(usage_text, (a + " needs a value").c_str());
      return argv[++i];
    };
    auto number = [&]() -> long long {
      const std::string v = value();
      char *end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 0);
      if (v.empty() || *end != '\0' || n < 0) usage(usage_text, (a + ": bad number").c_str());
      return n;
    };
    if (a == "--graphs") {
      o.graphs = static_cast<int>(number());
    } else if (a == "--iters") {
      o.iters = static_cast<int>(number());
    } else if (a == "--threads") {
      o.threads = static_cast<int>(number());
    } else if (a == "--stream") {
      const std::string v = value();
      if (v == "created") {
        o.stream = StreamKind::kCreated;
      } else if (v == "null") {
        o.stream = StreamKind::kNull;
      } else if (v == "legacy") {
        o.stream = StreamKind::kLegacy;
      } else if (v == "ptsz") {
        o.stream = StreamKind::kPerThread;
      } else {
        usage(usage_text, "--stream: created, null, legacy or ptsz");
      }
    } else if (a == "--ptsz") {
      o.ptsz = true;
    } else if (a == "--app-ranges") {
      o.app_ranges = true;
    } else if (a == "--app-loose") {
      o.app_loose = true;
    } else if (a == "--app-leaks") {
      o.app_leaks = std::atoi(value().c_str());
    } else if (a == "--app-domains") {
      o.app_domains = std::atoi(value().c_str());
    } else if (a == "--loader-state") {
      o.loader_state = true;
    } else if (a == "--instantiate") {
      const std::string v = value();
      if (v != "flags" && v != "params") usage(usage_text, "--instantiate: flags or params");
      o.instantiate_with_params = v == "params";
    } else if (a == "--upload") {
      o.upload = true;
    } else if (a == "--launch-times") {
      o.launch_times = true;
    } else if (a == "--reinstantiate") {
      o.reinstantiate_every = static_cast<int>(number());
    } else if (a == "--flags") {
      o.flags = static_cast<unsigned long long>(number());
    } else if (a == "--version") {
      o.version = static_cast<int>(number());
    } else if (a == "--self-query") {
      o.self_query = value();
      if (o.self_query != "12000" && o.self_query != "11030" && o.self_query != "none") {
        usage(usage_text, "--self-query: 12000, 11030 or none");
      }
    } else if (a == "--dlopen-flags") {
      o.dlopen_flags = value();
      if (o.dlopen_flags != "local" && o.dlopen_flags != "global" && o.dlopen_flags != "deepbind") {
        usage(usage_text, "--dlopen-flags: local, global or deepbind");
      }
    } else if (a == "--kernels") {
      parse_kernel_list(value(), o.kernels, usage_text);
    } else if (a == "--graph-kernels") {
      const std::string v = value();
      o.graph_kernels.clear();
      size_t start = 0;
      while (true) {
        const size_t end = v.find(';', start);
        o.graph_kernels.emplace_back();
        parse_kernel_list(v.substr(start, end == std::string::npos ? end : end - start),
                          o.graph_kernels.back(), usage_text);
        if (end == std::string::npos) break;
        start = end + 1;
      }
    } else if (a == "--name-graphs") {
      o.name_graphs = true;
      o.name_prefix = value();
    } else if (a == "--jump-out") {
      o.jump_out = static_cast<int>(number());
    } else if (a == "--name-from-threads") {
      o.name_from_threads = true;
    } else if (a == "--name-after") {
      o.name_after = static_cast<int>(number());
    } else if (a == "--keep-graphs") {
      o.keep_graphs = true;
    } else if (a == "--fork-after") {
      o.fork_after = true;
    } else if (a == "--tail-unflushed") {
      o.tail_unflushed = true;
    } else if (a == "--lock-own-image") {
      o.lock_own_image = true;
    } else if (a == "--launching-at-exit") {
      o.launching_at_exit = true;
    } else if (a == "--exit-after-ms") {
      o.exit_after_ms = number();
    } else if (a == "--help" || a == "-h") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    } else {
      usage(usage_text, ("unknown option " + a).c_str());
    }
  }
  if (o.graphs < 1 || o.threads < 1) usage(usage_text, "--graphs and --threads must be >= 1");
  if (o.reinstantiate_every > 0 && o.threads != 1) {
    usage(usage_text, "--reinstantiate needs --threads 1");
  }
  if (o.name_from_threads && !o.name_graphs) {
    usage(usage_text, "--name-from-threads needs --name-graphs");
  }
  if (o.name_after > 0 && (!o.name_graphs || o.threads != 1)) {
    usage(usage_text, "--name-after needs --name-graphs and --threads 1");
  }
  return o;
}

struct ThreadResult {
  unsigned long long launches = 0;
  unsigned long long failed = 0;
  unsigned long long exceptions = 0;
  unsigned long long jumped = 0;
  int last_result = 0;
  std::vector<unsigned long long> per_graph;
  std::vector<unsigned long long> launch_ns;  // --launch-times
};

inline unsigned long long monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<unsigned long long>(now.tv_sec) * 1000000000ull +
         static_cast<unsigned long long>(now.tv_nsec);
}

[[noreturn]] inline void die(Backend &b, const char *what, int code) {
  std::fprintf(stderr, "error: %s failed: %s (%d)\n", what, b.error_name(code), code);
  std::fflush(stdout);
  std::exit(1);
}

// --name-graphs: the shim's naming function, if a loaded library exports it (the way a program
// that opts in finds it: no link dependency, and a null pointer without the shim).
using NameGraphExecFn = int (*)(void *graph_exec, const char *name);

struct Naming {
  NameGraphExecFn fn = nullptr;
  bool looked_up = false;
  std::atomic<unsigned long long> calls{0};
  std::atomic<unsigned long long> failed{0};
};

inline void name_graphs_in_order(Backend &b, const Options &o, Naming &n, bool reverse,
                                 int rounds) {
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < o.graphs; ++i) {
      const int g = reverse ? o.graphs - 1 - i : i;
      const std::string name = o.name_prefix + " " + std::to_string(g);
      ++n.calls;
      if (n.fn(b.exec_handle(g), name.c_str()) != 0) ++n.failed;
    }
  }
}

inline void name_graphs(Backend &b, const Options &o, Naming &n) {
  if (!o.name_graphs) return;
  if (!n.looked_up) {
    n.fn = reinterpret_cast<NameGraphExecFn>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));
    n.looked_up = true;
  }
  if (n.fn == nullptr) return;
  if (!o.name_from_threads) {
    name_graphs_in_order(b, o, n, false, 1);
    return;
  }
  std::atomic<int> ready{0};
  auto racer = [&](bool reverse) {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    name_graphs_in_order(b, o, n, reverse, kNameRounds);
  };
  std::thread first(racer, false), second(racer, true);
  first.join();
  second.join();
}

// --loader-state: the calls after which dlerror() (this thread's) reported an error, and the
// first of them.
struct LoaderState {
  std::atomic<unsigned long long> errors{0};
  std::mutex mutex;
  std::string first;
  void check(const Options &o, const char *after) {
    if (!o.loader_state) return;
    const char *message = dlerror();
    if (!message || errors++ != 0) return;
    const std::lock_guard<std::mutex> lock(mutex);
    first = std::string(after) + ": " + message;
  }
};
inline LoaderState g_loader_state;

// --jump-out: the watchdog. Armed around a launch, the handler leaves it with siglongjmp.
inline thread_local sigjmp_buf t_watchdog_jump;
inline thread_local volatile sig_atomic_t t_watchdog_armed = 0;

inline void watchdog_handler(int) {
  if (!t_watchdog_armed) return;
  t_watchdog_armed = 0;
  siglongjmp(t_watchdog_jump, 1);
}

inline void install_watchdog() {
  struct sigaction action {};
  action.sa_handler = watchdog_handler;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
}

// One launch under the armed watchdog: false when it was left by siglongjmp.
__attribute__((noinline)) inline bool launch_under_watchdog(Backend &b, int g, CUstream_st *stream,
                                                            int *result) {
  if (sigsetjmp(t_watchdog_jump, 1) != 0) return false;  // the handler jumped out of the launch
  t_watchdog_armed = 1;
  *result = b.launch(g, stream);
  t_watchdog_armed = 0;
  return true;
}

inline void run_thread(Backend &b, const Options &o, Naming &naming, ThreadResult &r) {
  r.per_graph.assign(static_cast<size_t>(o.graphs), 0);
  r.launch_ns.assign(static_cast<size_t>(o.graphs), 0);
  const char *what = "";
  CUstream_st *stream = special_stream(o.stream);
  if (int e = b.thread_begin(&stream, &what); e != 0) die(b, what, e);
  for (int it = 0; it < o.iters; ++it) {
    if (o.name_after > 0 && it == o.name_after) name_graphs(b, o, naming);
    if (o.reinstantiate_every > 0 && it > 0 && it % o.reinstantiate_every == 0) {
      for (int g = 0; g < o.graphs; ++g) {
        if (int e = b.destroy_exec(g, &what); e != 0) die(b, what, e);
      }
      if (int e = b.instantiate_all(true, &what); e != 0) die(b, what, e);
      name_graphs(b, o, naming);
    }
    for (int g = 0; g < o.graphs; ++g) {
      if (o.app_ranges) nvtxRangePushA("app step");
      bool returned = false;
      int result = 0;
      const unsigned long long called = o.launch_times ? monotonic_ns() : 0;
      try {
        if (r.launches < static_cast<unsigned long long>(o.jump_out)) {
          returned = launch_under_watchdog(b, g, stream, &result);
          if (!returned) ++r.jumped;
        } else {
          result = b.launch(g, stream);
          returned = true;
        }
      } catch (const std::exception &ex) {
        ++r.exceptions;
      }
      if (o.launch_times) r.launch_ns[static_cast<size_t>(g)] += monotonic_ns() - called;
      g_loader_state.check(o, "a launch");
      if (o.app_ranges) nvtxRangePop();
      ++r.launches;
      ++r.per_graph[static_cast<size_t>(g)];
      if (returned) r.last_result = result;
      if (!returned || result != 0) ++r.failed;
    }
  }
  if (int e = b.thread_end(stream, &what); e != 0) die(b, what, e);
}

// --launching-at-exit: a thread that launches graph 0 until the process ends; returns once its
// first launch has returned. The backend must outlive it: run() ends the process with exit().
inline void launch_until_exit(Backend &b, const Options &o) {
  static std::atomic<bool> returned{false};
  std::thread([&b, &o] {
    const char *what = "";
    CUstream_st *stream = special_stream(o.stream);
    if (int e = b.thread_begin(&stream, &what); e != 0) die(b, what, e);
    for (;;) {
      (void)b.launch(0, stream);
      returned.store(true);
    }
  }).detach();
  const timespec pause{0, 1000000L};
  while (!returned.load()) nanosleep(&pause, nullptr);
}

// A range `message` pushed in `domain` (NVTX has no ASCII shorthand for a domain's push).
inline void push_in_domain(nvtxDomainHandle_t domain, const char *message) {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = message;
  nvtxDomainRangePushEx(domain, &attributes);
}

// --app-loose, before the set-up: the ranges left open (see the options above).
inline nvtxDomainHandle_t open_loose_ranges() {
  nvtxDomainHandle_t app = nvtxDomainCreateA("app");
  push_in_domain(app, "serve");
  (void)nvtxRangeStartA("request");
  static std::atomic<bool> inside{false};
  std::thread([] {
    nvtxRangePushA("worker");
    inside = true;
    for (;;) pause();  // inside its range until the process ends
  }).detach();
  for (int i = 0; i < 10000 && !inside; ++i) usleep(1000);
  return app;
}

// --app-leaks N.
inline void leak_ranges(int n) {
  if (n <= 0) return;
  nvtxDomainHandle_t app = nvtxDomainCreateA("app");
  for (int i = 0; i < n; ++i) push_in_domain(app, "leak");
}

// --app-loose, after the launches: pops with nothing to pop.
inline void pop_loose_ranges(nvtxDomainHandle_t app) {
  std::thread([app] { nvtxDomainRangePop(app); }).join();
  for (int i = 0; i < 1000 && nvtxRangePop() >= 0; ++i) {
  }
}

// --lock-own-image: the lock's descriptor (kept open), or -1.
inline int lock_own_image() {
  const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  struct flock lock {};
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;
  if (fd < 0 || fcntl(fd, F_SETLK, &lock) != 0) {
    std::fprintf(stderr, "--lock-own-image: cannot lock the program's image\n");
    std::exit(9);
  }
  return fd;
}

// Whether another process still finds the lock: a child asks (a process's own F_GETLK never
// reports its own locks).
inline bool own_image_still_locked(int fd) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    _exit(fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != F_UNLCK ? 0 : 1);
  }
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

inline int run(Backend &b, int argc, char **argv, const char *usage_text) {
  const Options o = parse(argc, argv, usage_text);
  const int image_lock = o.lock_own_image ? lock_own_image() : -1;
  if (o.any_kernels() && !b.adds_kernel_nodes()) {
    usage(usage_text, "--kernels/--graph-kernels: this program adds no kernel nodes");
  }
  const char *what = "";
  Naming naming;
  if (o.jump_out > 0) install_watchdog();
  for (int d = 0; d < o.app_domains; ++d) {
    char domain[64];
    std::snprintf(domain, sizeof domain, "app component %05d of a large program", d);
    nvtxDomainCreateA(domain);
  }
  nvtxDomainHandle_t loose_domain = o.app_loose ? open_loose_ranges() : nullptr;
  leak_ranges(o.app_leaks);
  if (o.loader_state) (void)dlerror();
  if (int e = b.setup(o, &what); e != 0) die(b, what, e);
  g_loader_state.check(o, "the set-up");
  if (int e = b.instantiate_all(false, &what); e != 0) die(b, what, e);
  g_loader_state.check(o, "the instantiations");
  if (o.name_after == 0) name_graphs(b, o, naming);
  if (o.upload) {
    CUstream_st *stream = special_stream(o.stream);
    if (int e = b.thread_begin(&stream, &what); e != 0) die(b, what, e);
    for (int g = 0; g < o.graphs; ++g) {
      if (int e = b.upload(g, stream, &what); e != 0) die(b, what, e);
    }
    if (int e = b.thread_end(stream, &what); e != 0) die(b, what, e);
  }

  std::vector<ThreadResult> results(static_cast<size_t>(o.threads));
  if (o.threads == 1) {
    run_thread(b, o, naming, results[0]);
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back([&, t] { run_thread(b, o, naming, results[static_cast<size_t>(t)]); });
    }
    for (std::thread &t : threads) t.join();
  }
  if (o.app_loose) pop_loose_ranges(loose_domain);
  if (o.fork_after) {
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) std::exit(0);
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || status != 0) {
      std::fprintf(stderr, "--fork-after: the child failed\n");
      return 9;
    }
  }

  if (o.launching_at_exit) launch_until_exit(b, o);
  for (int g = 0; g < o.graphs && !o.keep_graphs && !o.launching_at_exit; ++g) {
    if (int e = b.destroy_exec(g, &what); e != 0) die(b, what, e);
  }
  g_loader_state.check(o, "the destructions");
  if (!o.launching_at_exit) {
    if (int e = b.teardown(&what); e != 0) die(b, what, e);
  }

  ThreadResult total;
  total.per_graph.assign(static_cast<size_t>(o.graphs), 0);
  total.launch_ns.assign(static_cast<size_t>(o.graphs), 0);
  int result = 0;
  for (const ThreadResult &r : results) {
    total.launches += r.launches;
    total.failed += r.failed;
    total.exceptions += r.exceptions;
    total.jumped += r.jumped;
    for (size_t g = 0; g < r.per_graph.size(); ++g) {
      total.per_graph[g] += r.per_graph[g];
      total.launch_ns[g] += r.launch_ns[g];
    }
    if (result == 0) result = r.last_result;
  }
  if (o.name_graphs) {
    if (naming.fn == nullptr) {
      std::printf("names: absent\n");
    } else {
      std::printf("names: calls=%llu failed=%llu\n", naming.calls.load(), naming.failed.load());
    }
  }
  if (o.launch_times) {
    std::printf("launch_ns=");
    for (size_t g = 0; g < total.launch_ns.size(); ++g)
      std::printf("%s%llu", g == 0 ? "" : ",", total.launch_ns[g]);
    std::printf("\n");
  }
  std::printf("per_graph=");
  for (size_t g = 0; g < total.per_graph.size(); ++g) {
    std::printf("%s%llu", g == 0 ? "" : ",", total.per_graph[g]);
  }
  std::printf("\nexceptions=%llu\n", total.exceptions);
  if (o.jump_out > 0) std::printf("jumped=%llu\n", total.jumped);
  if (o.loader_state) {
    std::printf("loader_errors=%llu\n", g_loader_state.errors.load());
    if (g_loader_state.errors) std::printf("loader_first=%s\n", g_loader_state.first.c_str());
  }
  if (image_lock >= 0)
    std::printf("own_image_lock=%s\n", own_image_still_locked(image_lock) ? "held" : "released");
  std::printf("launches=%llu failed=%llu result=%d\n", total.launches, total.failed, result);
  std::fflush(stdout);
  if (o.tail_unflushed) std::printf("tail=unflushed\n");  // the C library writes it at exit
  if (o.exit_after_ms > 0) {
    const timespec pause{static_cast<time_t>(o.exit_after_ms / 1000),
                         static_cast<long>(o.exit_after_ms % 1000) * 1000000L};
    nanosleep(&pause, nullptr);
  }
  // exit() here, not a return: main's backend stays alive for the launching thread (exit does
  // not end main's scope), as the exit handlers run while that thread launches.
  if (o.launching_at_exit) std::exit(total.failed == 0 ? 0 : 3);
  return total.failed == 0 ? 0 : 3;
}

}  // namespace harness
