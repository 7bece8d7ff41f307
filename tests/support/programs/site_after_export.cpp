// site_after_export: instantiates graphs from a local (static) function placed right after an
// exported one, so that once the program is stripped the nearest symbol below the call site
// is `exported_neighbour` — a different function. The call site must then be
// `site_after_export+0xOFFSET`, never the neighbour's name (tests/shim/scenarios/test_names.py).
// Built with -fno-toplevel-reorder (functions in definition order) and -rdynamic (the
// neighbour is in the dynamic symbol table, where dladdr finds it, and the only
// symbol a stripped module keeps); links libcuda.so.1.
//
// Usage: site_after_export [GRAPHS]   (default 2; each graph launched once)
// Prints `launches=<N> failed=<F>`; exit status 0, or 1 when a call fails.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>

extern "C" __attribute__((noinline, used)) int exported_neighbour(int x) {
  return x * 3 + 1;
}

namespace {

// Deliberately local: only the module offset can name it in a stripped program.
__attribute__((noinline)) CUresult instantiate_after_neighbour(CUgraphExec *exec, CUgraph graph) {
  const CUresult result = cuGraphInstantiate(exec, graph, 0);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return result;
}

}  // namespace

int main(int argc, char **argv) {
  const int graphs = argc > 1 ? std::atoi(argv[1]) : 2;
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuCtxCreate(&context, nullptr, 0, device) != CUDA_SUCCESS) {
    std::fprintf(stderr, "site_after_export: driver set-up failed\n");
    return 1;
  }
  int failed = 0;
  for (int i = 0; i < graphs; ++i) {
    CUgraph graph = nullptr;
    CUgraphNode node = nullptr;
    CUgraphExec exec = nullptr;
    if (cuGraphCreate(&graph, 0) != CUDA_SUCCESS ||
        cuGraphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
        instantiate_after_neighbour(&exec, graph) != CUDA_SUCCESS) {
      std::fprintf(stderr, "site_after_export: graph set-up failed\n");
      return 1;
    }
    if (cuGraphLaunch(exec, nullptr) != CUDA_SUCCESS) ++failed;
    // Destroyed at the end, so that no handle is reused: one identity per graph.
  }
  std::printf("launches=%d failed=%d\n", graphs, failed);
  return failed == 0 && exported_neighbour(0) == 1 ? 0 : 1;
}
