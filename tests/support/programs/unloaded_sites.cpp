// unloaded_sites: a program that loads a plugin, instantiates a graph through it, unloads it,
// then does the same with a second plugin, which the loader puts at the first one's addresses
// (tests/shim/scenarios/test_names.py sites_after_unload). Each graph is named after its own
// plugin's function, never the unloaded one's.
//
// Usage: unloaded_sites PREFILL_PLUGIN DECODE_PLUGIN ITERS
// Prints `same_address=0|1` (whether the two functions had one address) and
// `launches=<N> failed=<F>`; exit status 0, or 1 when a call fails.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace {

using SiteFunction = CUresult (*)(CUgraphExec *, CUgraph);

CUgraphExec instantiate_in(const char *plugin, const char *function, void **address) {
  void *handle = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "unloaded_sites: %s\n", dlerror());
    std::exit(1);
  }
  const auto site = reinterpret_cast<SiteFunction>(dlsym(handle, function));
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  CUgraphExec exec = nullptr;
  if (!site || cuGraphCreate(&graph, 0) != CUDA_SUCCESS ||
      cuGraphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
      site(&exec, graph) != CUDA_SUCCESS) {
    std::fprintf(stderr, "unloaded_sites: graph set-up through %s failed\n", plugin);
    std::exit(1);
  }
  *address = reinterpret_cast<void *>(site);
  dlclose(handle);
  return exec;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 4) return 1;
  const int iters = std::atoi(argv[3]);
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuCtxCreate(&context, nullptr, 0, device) != CUDA_SUCCESS)
    return 1;
  void *first = nullptr, *second = nullptr;
  CUgraphExec prefill = instantiate_in(argv[1], "prefill_plugin_site", &first);
  CUgraphExec decode = instantiate_in(argv[2], "decode_plugin_site", &second);
  int failed = 0;
  for (int i = 0; i < iters; ++i) {
    if (cuGraphLaunch(prefill, nullptr) != CUDA_SUCCESS) ++failed;
    if (cuGraphLaunch(decode, nullptr) != CUDA_SUCCESS) ++failed;
  }
  std::printf("same_address=%d\nlaunches=%d failed=%d\n", first == second ? 1 : 0, 2 * iters,
              failed);
  return failed == 0 ? 0 : 1;
}
