// name_scopes: instantiates graphs inside nested naming scopes (ferrum_replay_push_graph_name /
// _pop_graph_name and ferrum_replay::ScopedGraphName, include/ferrum_replay/ferrum_replay.h)
// through the runtime, the driver and the driver's cuGetProcAddress, and launches graph i
// (in the order below, from 0) i + 1 times, so that a trace's count of each name tells which
// graph carried it (tests/shim/scenarios/test_names.py, scope_*):
//   0 driver    no scope                          (its call site)
//   1 runtime   ScopedGraphName "outer"           outer
//   2 driver    + pushed "inner"                  inner
//   3 procaddr  + pushed "inner"                  inner
//   4 driver    "outer" again, after the pop      outer, then named "explicit" by handle
//   5 driver    in another thread, while "outer"  (its call site): scopes are per thread
//   6 driver    17 levels pushed                  level 15 (the 17th push: -ENOSPC)
//   7 runtime   after every scope closed          (its call site)
// Links the stand-in driver and runtime; looks the shim's functions up with dlsym(RTLD_DEFAULT)
// and runs unchanged without it.
//
// Output: `scope: present` or `scope: absent`, then (present) `push17=<rc> pops=<rcs>
// pop_empty=<rc> push_null=<rc> pop_null=<rc>` and `name_explicit=<rc> name_null_handle=<rc>
// name_null_name=<rc>` (ferrum_replay_name_graph_exec's results: graph 4 named "explicit", a
// null handle, a null name), then `launches=<N> failed=<F>`.
// Exit status 0, or 1 when a CUDA call fails.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ferrum_replay/ferrum_replay.h"

namespace {

ferrum_replay_push_graph_name_fn g_push = nullptr;
ferrum_replay_pop_graph_name_fn g_pop = nullptr;
ferrum_replay_name_graph_exec_fn g_name = nullptr;

[[noreturn]] void fail(const char *what, int result) {
  std::fprintf(stderr, "name_scopes: %s failed: %d\n", what, result);
  std::exit(1);
}

CUgraph empty_graph() {
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  if (CUresult r = cuGraphCreate(&graph, 0); r != CUDA_SUCCESS) fail("cuGraphCreate", r);
  if (CUresult r = cuGraphAddEmptyNode(&node, graph, nullptr, 0); r != CUDA_SUCCESS)
    fail("cuGraphAddEmptyNode", r);
  return graph;
}

__attribute__((noinline)) CUgraphExec instantiate_with_driver() {
  CUgraphExec exec = nullptr;
  if (CUresult r = cuGraphInstantiate(&exec, empty_graph(), 0); r != CUDA_SUCCESS)
    fail("cuGraphInstantiate", r);
  return exec;
}

__attribute__((noinline)) CUgraphExec instantiate_with_runtime() {
  cudaGraph_t graph = nullptr;
  cudaGraphNode_t node = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaError_t e = cudaGraphCreate(&graph, 0); e != cudaSuccess) fail("cudaGraphCreate", e);
  if (cudaError_t e = cudaGraphAddEmptyNode(&node, graph, nullptr, 0); e != cudaSuccess)
    fail("cudaGraphAddEmptyNode", e);
  if (cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess)
    fail("cudaGraphInstantiate", e);
  return reinterpret_cast<CUgraphExec>(exec);
}

__attribute__((noinline)) CUgraphExec instantiate_through_procaddress() {
  void *function = nullptr;
  if (CUresult r = cuGetProcAddress("cuGraphInstantiateWithFlags", &function, 12000, 0, nullptr);
      r != CUDA_SUCCESS || !function)
    fail("cuGetProcAddress(cuGraphInstantiateWithFlags)", r);
  CUgraphExec exec = nullptr;
  auto instantiate = reinterpret_cast<PFN_cuGraphInstantiateWithFlags_v11040>(function);
  if (CUresult r = instantiate(&exec, empty_graph(), 0); r != CUDA_SUCCESS)
    fail("cuGraphInstantiateWithFlags", r);
  return exec;
}

}  // namespace

int main() {
  g_push = reinterpret_cast<ferrum_replay_push_graph_name_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_PUSH_GRAPH_NAME));
  g_pop = reinterpret_cast<ferrum_replay_pop_graph_name_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_POP_GRAPH_NAME));
  g_name = reinterpret_cast<ferrum_replay_name_graph_exec_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_NAME_GRAPH_EXEC));
  const bool present = g_push && g_pop && g_name;
  std::printf("scope: %s\n", present ? "present" : "absent");
  if (cudaError_t e = cudaSetDevice(0); e != cudaSuccess) fail("cudaSetDevice", e);
  if (cudaError_t e = cudaFree(nullptr); e != cudaSuccess) fail("cudaFree", e);

  std::vector<CUgraphExec> execs;
  std::string codes;
  int name_explicit = 0;
  execs.push_back(instantiate_with_driver());
  {
    ferrum_replay::ScopedGraphName outer("outer");
    execs.push_back(instantiate_with_runtime());
    if (present) g_push("inner");
    execs.push_back(instantiate_with_driver());
    execs.push_back(instantiate_through_procaddress());
    if (present) g_pop();
    execs.push_back(instantiate_with_driver());
    if (present) name_explicit = g_name(execs.back(), "explicit");
    std::thread([&execs] { execs.push_back(instantiate_with_driver()); }).join();
  }
  if (present) {
    int push17 = 0;
    for (int level = 0; level < 17; ++level)
      push17 = g_push(("level " + std::to_string(level)).c_str());
    execs.push_back(instantiate_with_driver());
    std::string pops;
    for (int level = 0; level < 17; ++level) pops += std::to_string(g_pop()) + ",";
    const int pop_empty = g_pop();
    const int push_null = g_push(nullptr);
    const int pop_null = g_pop();
    std::printf("push17=%d pops=%s pop_empty=%d push_null=%d pop_null=%d\n", push17, pops.c_str(),
                pop_empty, push_null, pop_null);
    std::printf("name_explicit=%d name_null_handle=%d name_null_name=%d\n", name_explicit,
                g_name(nullptr, "null"), g_name(execs[0], nullptr));
  } else {
    execs.push_back(instantiate_with_driver());
  }
  execs.push_back(instantiate_with_runtime());

  int launches = 0, failed = 0;
  for (size_t graph = 0; graph < execs.size(); ++graph)
    for (size_t i = 0; i <= graph; ++i, ++launches)
      if (cuGraphLaunch(execs[graph], nullptr) != CUDA_SUCCESS) ++failed;
  if (CUresult r = cuCtxSynchronize(); r != CUDA_SUCCESS) fail("cuCtxSynchronize", r);
  std::printf("launches=%d failed=%d\n", launches, failed);
  return failed == 0 ? 0 : 1;
}
