// moved_module_sites: a program whose loaded plugin's path names another file by the time a
// graph is instantiated in it (tests/shim/scenarios/test_names.py sites_of_moved_modules):
//   replaced  PLUGIN NEWER   loads PLUGIN, then renames NEWER over it (a package upgraded on
//                            disk while the program runs)
//   chdir     DIR OTHER_DIR  loads ./plugin.so from DIR, then changes to OTHER_DIR, which has
//                            a plugin.so of its own (a relative path the loader keeps as given)
// then instantiates a graph through the loaded plugin and launches it ITERS times. The graph
// must never be named after a function of the file now at the path.
//   reloaded  PLUGIN NEWER   loads PLUGIN, instantiates a graph through it, unloads it, renames
//                            NEWER over it (a plugin rebuilt in place) and loads it again, most
//                            likely at the same address, and instantiates a second graph: each
//                            graph is named after the build it was instantiated in. Prints
//                            `same_address=0|1`.
//
// Usage: moved_module_sites MODE A B ITERS; prints `launches=<N> failed=<F>`; exit 0, or 1
// when a step fails.
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace {

int fail(const char *what) {
  fprintf(stderr, "moved_module_sites: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 5) return fail("usage: moved_module_sites replaced|chdir A B ITERS");
  const int iters = atoi(argv[4]);
  void *plugin = nullptr;
  if (strcmp(argv[1], "replaced") == 0) {
    plugin = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!plugin || rename(argv[3], argv[2]) != 0) return fail("load or replace failed");
  } else if (strcmp(argv[1], "chdir") == 0) {
    if (chdir(argv[2]) != 0) return fail("chdir failed");
    plugin = dlopen("./plugin.so", RTLD_NOW | RTLD_LOCAL);
    if (!plugin || chdir(argv[3]) != 0) return fail("load or chdir failed");
  } else if (strcmp(argv[1], "reloaded") == 0) {
    plugin = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  } else {
    return fail("unknown mode");
  }
  using Instantiate = CUresult (*)(CUgraphExec *, CUgraph);
  const auto instantiate = reinterpret_cast<Instantiate>(dlsym(plugin, "instantiate_here"));
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  CUgraphExec exec = nullptr;
  if (!instantiate || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuCtxCreate(&context, nullptr, 0, device) != CUDA_SUCCESS ||
      cuGraphCreate(&graph, 0) != CUDA_SUCCESS ||
      cuGraphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
      instantiate(&exec, graph) != CUDA_SUCCESS)
    return fail("graph set-up failed");
  CUgraphExec second = nullptr;
  if (strcmp(argv[1], "reloaded") == 0) {
    const void *first_address = reinterpret_cast<const void *>(instantiate);
    if (dlclose(plugin) != 0 || rename(argv[3], argv[2]) != 0) return fail("replace failed");
    plugin = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    const auto again =
        plugin ? reinterpret_cast<Instantiate>(dlsym(plugin, "instantiate_here")) : nullptr;
    if (!again || again(&second, graph) != CUDA_SUCCESS) return fail("reload failed");
    printf("same_address=%d\n", reinterpret_cast<const void *>(again) == first_address);
  }
  int failed = 0;
  for (int i = 0; i < iters; ++i) {
    if (cuGraphLaunch(exec, nullptr) != CUDA_SUCCESS) ++failed;
    if (second && cuGraphLaunch(second, nullptr) != CUDA_SUCCESS) ++failed;
  }
  printf("launches=%d failed=%d\n", second ? 2 * iters : iters, failed);
  return failed == 0 ? 0 : 1;
}
