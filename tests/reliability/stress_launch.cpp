// stress_launch: many threads launching their own graphs while other threads instantiate,
// launch once, name and destroy other graphs, and a naming thread renames the launchers'
// graphs — all at once, through the driver API by name (links libcuda.so.1).
//
// Usage: stress_launch [--threads T] [--launches N] [--churn-threads C] [--min-churn K]
//                      [--no-rename]
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
    } else {
      std::fprintf(stderr, "stress_launch: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.threads < 1 || o.launches < 0 || o.churn_threads < 0) return 2;

  const auto name_graph =
      reinterpret_cast<NameGraphFn>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));

  check(cuInit(0), "cuInit");
  CUdevice device = 0;
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuCtxCreate(&ctx, nullptr, 0, device), "cuCtxCreate");

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
