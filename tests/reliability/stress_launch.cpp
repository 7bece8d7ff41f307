// stress_launch: many threads launching their own graphs while other threads instantiate,
// launch once, name and destroy other graphs, and a naming thread renames the launchers'
// graphs — all at once, through the driver API by name (links libcuda.so.1).
//
// Usage: stress_launch [--threads T] [--launches N] [--churn-threads C] [--min-churn K]
//                      [--no-rename]
//        stress_launch --cycles N [--kept K] [--name-stale]
//        stress_launch --renames R
//   --threads T        launcher threads (default 16); each instantiates 2 graph execs of its
//                      own and launches them alternately, N times in all (default 100000)
//   --churn-threads C  threads (default 2) that, until the launchers are done, instantiate an
//                      exec, name it (when the shim's naming function is there), launch it
//                      once and destroy it; the stand-in driver hands destroyed handles out
//                      again, so the shim sees handles reused while launches run elsewhere
//   --min-churn K      each churn thread runs at least K cycles (default 16), however soon the
//                      launchers are done
//   --no-rename        no naming thread (by default one renames the launchers' execs, one
//                      every 100 us, until the launchers are done)
//
//   --cycles N         instead, on one thread: K graphs (default 2) instantiated first and
//                      named kept-0, kept-1, ... stay live while N cycles each instantiate an
//                      exec, name it churn-<n % 8>, launch it, launch kept-<n % K> and destroy
//                      it; --name-stale also names the destroyed handle "stale" (a program
//                      naming a handle it no longer owns) and counts that it returned 0.
//                      Prints, besides the lines below, the seconds each quarter of the cycles
//                      took, the resident memory (KiB) after each quarter, and how many new
//                      handles equalled one of the last 64 destroyed (0 with
//                      FERRUM_STANDIN_NO_HANDLE_REUSE=1):
//                        quarter_seconds=<s>,<s>,<s>,<s> quarter_rss_kib=<r>,<r>,<r>,<r>
//                        reused_handles=<n>
//   --renames R        instead, on one thread: one graph named R times, each name distinct
//                      (renamed-<i>), then named "renamed-final" and launched once; prints
//                      half_seconds=<first half>,<second half> for the R names
//
// Destroying an exec while another thread launches it is a program bug, so the churn only
// ever destroys its own execs.
//
// Prints, on stdout:
//   naming=exercised|absent          whether dlsym(RTLD_DEFAULT, ferrum_replay_name_graph_exec)
//                                    found the shim's naming function
//   launcher_tids=<tid>,<tid>,...    the OS thread ids of the launcher threads
//   churn_tids=<tid>,...
//   churn_cycles=<instantiate+destroy cycles> churn_launches=<L> names=<calls that returned 0>
//   launches=<N> failed=<F> result=<last failing CUresult or 0>
// Exit status 0 when every call succeeded, 3 when any launch or naming failed, 1 on set-up
// errors.

#include <cuda.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using NameGraphFn = int (*)(void *, const char *);

struct Options {
  int threads = 16;
  long launches = 100000;
  int churn_threads = 2;
  unsigned long long min_churn = 16;
  bool rename = true;
  long cycles = 0;  // --cycles: the single-thread churn instead of the launchers
  int kept = 2;
  bool name_stale = false;
  long renames = 0;  // --renames
};

[[noreturn]] void die(const char *what, CUresult r) {
  const char *name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "stress_launch: %s failed: %s (%d)\n", what, name ? name : "?", r);
  std::exit(1);
}

void check(CUresult r, const char *what) {
  if (r != CUDA_SUCCESS) die(what, r);
}

unsigned os_tid() {
  return static_cast<unsigned>(syscall(SYS_gettid));
}

CUgraph make_graph() {
  CUgraph graph = nullptr;
  check(cuGraphCreate(&graph, 0), "cuGraphCreate");
  CUgraphNode node = nullptr;
  check(cuGraphAddEmptyNode(&node, graph, nullptr, 0), "cuGraphAddEmptyNode");
  return graph;
}

std::string join(const std::vector<unsigned> &values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

std::string join_numbers(const std::vector<double> &values, const char *format) {
  std::string out;
  char cell[32];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(cell, sizeof cell, format, values[i]);
    out += (i ? "," : "") + std::string(cell);
  }
  return out;
}

// --cycles: a long-running process re-instantiating one graph while others stay live.
int run_cycles(const Options &o, NameGraphFn name_graph) {
  const CUgraph graph = make_graph();
  std::vector<CUgraphExec> kept(static_cast<size_t>(o.kept));
  unsigned long long names = 0, name_failures = 0, failed = 0, reused = 0, launches = 0;
  int last_failure = 0;
  char name[64];
  const auto name_it = [&](CUgraphExec exec, const char *text) {
    if (!name_graph) return;
    if (name_graph(reinterpret_cast<void *>(exec), text) == 0)
      ++names;
    else
      ++name_failures;
  };
  const auto launch = [&](CUgraphExec exec) {
    const CUresult r = cuGraphLaunch(exec, nullptr);
    ++launches;
    if (r != CUDA_SUCCESS) {
      ++failed;
      last_failure = r;
    }
  };
  for (size_t k = 0; k < kept.size(); ++k) {
    check(cuGraphInstantiate(&kept[k], graph, 0), "cuGraphInstantiate (kept)");
    std::snprintf(name, sizeof name, "kept-%zu", k);
    name_it(kept[k], name);
  }
  CUgraphExec destroyed[64] = {};
  std::vector<double> quarter_seconds, quarter_rss;
  auto start = std::chrono::steady_clock::now();
  for (long n = 0; n < o.cycles; ++n) {
    CUgraphExec exec = nullptr;
    check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate (churn)");
    for (CUgraphExec old : destroyed) reused += old == exec;
    std::snprintf(name, sizeof name, "churn-%ld", n % 8);
    name_it(exec, name);
    launch(exec);
    if (!kept.empty()) launch(kept[static_cast<size_t>(n) % kept.size()]);
    check(cuGraphExecDestroy(exec), "cuGraphExecDestroy (churn)");
    destroyed[n % 64] = exec;
    if (o.name_stale) name_it(exec, "stale");
    if ((n + 1) % (o.cycles / 4 > 0 ? o.cycles / 4 : 1) == 0 && quarter_seconds.size() < 4) {
      quarter_seconds.push_back(seconds_since(start));
      quarter_rss.push_back(static_cast<double>(resident_kib()));
      start = std::chrono::steady_clock::now();
    }
  }
  for (CUgraphExec exec : kept) check(cuGraphExecDestroy(exec), "cuGraphExecDestroy (kept)");
  check(cuGraphDestroy(graph), "cuGraphDestroy");
  std::printf("naming=%s\n", name_graph ? "exercised" : "absent");
  std::printf("quarter_seconds=%s quarter_rss_kib=%s reused_handles=%llu\n",
              join_numbers(quarter_seconds, "%.3f").c_str(),
              join_numbers(quarter_rss, "%.0f").c_str(), reused);
  std::printf("names=%llu name_failures=%llu\n", names, name_failures);
  std::printf("launches=%llu failed=%llu result=%d\n", launches, failed, last_failure);
  std::fflush(stdout);
  return failed == 0 && name_failures == 0 ? 0 : 3;
}

// --renames: one graph given R distinct names.
int run_renames(const Options &o, NameGraphFn name_graph) {
  if (!name_graph) {
    std::printf("naming=absent\n");
    return 1;
  }
  const CUgraph graph = make_graph();
  CUgraphExec exec = nullptr;
  check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  unsigned long long name_failures = 0;
  char name[64];
  std::vector<double> halves;
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < o.renames; ++i) {
    std::snprintf(name, sizeof name, "renamed-%ld", i);
    name_failures += name_graph(reinterpret_cast<void *>(exec), name) != 0;
    if (i + 1 == o.renames / 2 || i + 1 == o.renames) {
      halves.push_back(seconds_since(start));
      start = std::chrono::steady_clock::now();
    }
  }
  name_failures += name_graph(reinterpret_cast<void *>(exec), "renamed-final") != 0;
  const CUresult r = cuGraphLaunch(exec, nullptr);
  check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  check(cuGraphDestroy(graph), "cuGraphDestroy");
  std::printf("naming=exercised\nhalf_seconds=%s\n", join_numbers(halves, "%.3f").c_str());
  std::printf("names=%ld name_failures=%llu\n", o.renames + 1, name_failures);
  std::printf("launches=1 failed=%d result=%d\n", r != CUDA_SUCCESS, r);
  std::fflush(stdout);
  return r == CUDA_SUCCESS && name_failures == 0 ? 0 : 3;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto number = [&]() -> long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stress_launch: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::strtol(argv[++i], nullptr, 10);
    };
    if (a == "--threads") {
      o.threads = static_cast<int>(number());
    } else if (a == "--launches") {
      o.launches = number();
    } else if (a == "--churn-threads") {
      o.churn_threads = static_cast<int>(number());
    } else if (a == "--min-churn") {
      o.min_churn = static_cast<unsigned long long>(number());
    } else if (a == "--no-rename") {
      o.rename = false;
    } else if (a == "--cycles") {
      o.cycles = number();
    } else if (a == "--kept") {
      o.kept = static_cast<int>(number());
    } else if (a == "--name-stale") {
      o.name_stale = true;
    } else if (a == "--renames") {
      o.renames = number();
    } else {
      std::fprintf(stderr, "stress_launch: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.threads < 1 || o.launches < 0 || o.churn_threads < 0 || o.cycles < 0 || o.kept < 0 ||
      o.renames < 0)
    return 2;

  const auto name_graph =
      reinterpret_cast<NameGraphFn>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));

  check(cuInit(0), "cuInit");
  CUdevice device = 0;
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuCtxCreate(&ctx, nullptr, 0, device), "cuCtxCreate");
  if (o.cycles > 0) return run_cycles(o, name_graph);
  if (o.renames > 0) return run_renames(o, name_graph);

  // Each launcher's two execs, instantiated up front on the main thread.
  std::vector<CUgraph> graphs;
  std::vector<CUgraphExec> execs;
  for (int t = 0; t < o.threads; ++t) {
    graphs.push_back(make_graph());
    for (int k = 0; k < 2; ++k) {
      CUgraphExec exec = nullptr;
      check(cuGraphInstantiate(&exec, graphs.back(), 0), "cuGraphInstantiate");
      execs.push_back(exec);
    }
  }

  std::atomic<int> launchers_running{o.threads};
  std::atomic<unsigned long long> failed{0}, churn_cycles{0}, churn_launches{0}, names{0},
      name_failures{0};
  std::atomic<int> last_failure{0};
  std::vector<unsigned> launcher_tids(static_cast<size_t>(o.threads));
  std::vector<unsigned> churn_tids(static_cast<size_t>(o.churn_threads));

  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      launcher_tids[static_cast<size_t>(t)] = os_tid();
      check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
      CUstream stream = nullptr;
      check(cuStreamCreate(&stream, 0), "cuStreamCreate");
      const CUgraphExec mine[2] = {execs[2 * static_cast<size_t>(t)],
                                   execs[2 * static_cast<size_t>(t) + 1]};
      for (long i = 0; i < o.launches; ++i) {
        const CUresult r = cuGraphLaunch(mine[i & 1], stream);
        if (r != CUDA_SUCCESS) {
          failed.fetch_add(1);
          last_failure.store(r);
        }
      }
      check(cuStreamSynchronize(stream), "cuStreamSynchronize");
      check(cuStreamDestroy(stream), "cuStreamDestroy");
      launchers_running.fetch_sub(1);
    });
  }
  for (int c = 0; c < o.churn_threads; ++c) {
    threads.emplace_back([&, c] {
      churn_tids[static_cast<size_t>(c)] = os_tid();
      check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
      const CUgraph graph = make_graph();
      char name[64];
      // At least --min-churn cycles even if the launchers finish first.
      for (unsigned long long n = 0; n < o.min_churn || launchers_running.load() > 0; ++n) {
        CUgraphExec exec = nullptr;
        check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate (churn)");
        if (name_graph) {
          std::snprintf(name, sizeof name, "churn %d.%llu", c, n % 8);
          if (name_graph(reinterpret_cast<void *>(exec), name) == 0)
            names.fetch_add(1);
          else
            name_failures.fetch_add(1);
        }
        const CUresult r = cuGraphLaunch(exec, nullptr);
        churn_launches.fetch_add(1);
        if (r != CUDA_SUCCESS) {
          failed.fetch_add(1);
          last_failure.store(r);
        }
        check(cuGraphExecDestroy(exec), "cuGraphExecDestroy (churn)");
        churn_cycles.fetch_add(1);
      }
      check(cuGraphDestroy(graph), "cuGraphDestroy");
    });
  }
  if (o.rename && name_graph) {
    threads.emplace_back([&] {
      char name[64];
      for (unsigned long long n = 0; n < 16 || launchers_running.load() > 0; ++n) {
        const size_t e = n % execs.size();
        std::snprintf(name, sizeof name, "stress %zu.%llu", e, (n / execs.size()) % 4);
        if (name_graph(reinterpret_cast<void *>(execs[e]), name) == 0)
          names.fetch_add(1);
        else
          name_failures.fetch_add(1);
        // A person renames now and then, not in a spin: about 10,000 names a second.
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }
  for (std::thread &t : threads) t.join();

  for (CUgraphExec exec : execs) check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  for (CUgraph graph : graphs) check(cuGraphDestroy(graph), "cuGraphDestroy");
  check(cuCtxDestroy(ctx), "cuCtxDestroy");

  const unsigned long long launches =
      static_cast<unsigned long long>(o.threads) * static_cast<unsigned long long>(o.launches) +
      churn_launches.load();
  std::printf("naming=%s\n", name_graph ? "exercised" : "absent");
  std::printf("launcher_tids=%s\n", join(launcher_tids).c_str());
  std::printf("churn_tids=%s\n", join(churn_tids).c_str());
  std::printf("churn_cycles=%llu churn_launches=%llu names=%llu name_failures=%llu\n",
              churn_cycles.load(), churn_launches.load(), names.load(), name_failures.load());
  std::printf("launches=%llu failed=%llu result=%d\n", launches, failed.load(),
              last_failure.load());
  std::fflush(stdout);
  return failed.load() == 0 && name_failures.load() == 0 ? 0 : 3;
}
