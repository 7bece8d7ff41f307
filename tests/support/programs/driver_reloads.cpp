// driver_reloads: a program that unloads the CUDA driver and loads it again, at another address
// each time (as a plugin host does when it unloads a plugin and the driver it brought, or a
// program that dlcloses its private handle of libcuda and reopens it later). Each round
// launches graphs, then unloads everything it loaded (checked: dlopen(RTLD_NOLOAD) fails) and
// maps a page where the driver lay, so that the next load cannot land at the same address.
//
//   driver_reloads lookup ROUNDS LAUNCHES
//       dlopen("libcuda.so.1", RTLD_LOCAL), dlsym(handle, "cuGetProcAddress_v2"), every other
//       function through that lookup (the shared runtime's route)
//   driver_reloads by-name PLUGIN ROUNDS LAUNCHES
//       dlopen(PLUGIN, RTLD_GLOBAL), a library linked to libcuda.so.1 that calls the driver by
//       name (reload_plugin.cpp), then dlclose(PLUGIN): the driver goes with it
//   driver_reloads by-name-libc PLUGIN ROUNDS LAUNCHES
//       the same, every dlclose made with the C library's own, as found on its handle
//       (dlsym(dlopen("libc.so.6"), "dlclose"): Python's ctypes.CDLL("libdl.so.2").dlclose)
//   driver_reloads instances COPY
//       two instances at once: libcuda.so.1 and COPY (the same driver at another path), each
//       dlopen(RTLD_LOCAL); the first's cuGetProcAddress_v2 is used first, then only the second
//       is initialised, and asked through its own cuGetProcAddress_v2 for cuDeviceGet: the
//       answer must be the second's own function
//
// Prints one line per round (`round R: moved=yes|no launches=N failed=F result=R`) and, last,
// the launch harness's closing line `launches=N failed=F result=R`. Exit status 0 when every
// call succeeded, 3 otherwise, 1 on a setup error.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <initializer_list>

namespace {

int g_launches = 0, g_failed = 0, g_result = 0;

// Every dlclose of the program's: as it links it, or the C library's own (by-name-libc).
int (*g_unload)(void *) = dlclose;

void count(CUresult result) {
  ++g_launches;
  if (result != CUDA_SUCCESS) {
    ++g_failed;
    g_result = result;
  }
}

// Where the library defining `function` is mapped.
void *base_of(void *function) {
  Dl_info info{};
  return dladdr(function, &info) ? info.dli_fbase : nullptr;
}

// Whether the driver is still loaded after the round's dlclose.
bool driver_loaded() {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (handle) g_unload(handle);
  return handle != nullptr;
}

// A page at the driver's old address: the next load lands elsewhere.
void block(void *base) {
  if (base) mmap(base, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
}

template <typename Function>
Function fetch(PFN_cuGetProcAddress_v12000 lookup, const char *name) {
  void *function = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (lookup(name, &function, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
    return nullptr;
  return reinterpret_cast<Function>(function);
}

int lookup_round(int launches, void **base) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return fprintf(stderr, "driver_reloads: %s\n", dlerror()), 1;
  auto lookup = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  if (!lookup) return fprintf(stderr, "driver_reloads: no cuGetProcAddress_v2\n"), 1;
  auto init = fetch<PFN_cuInit_v2000>(lookup, "cuInit");
  auto device_get = fetch<PFN_cuDeviceGet_v2000>(lookup, "cuDeviceGet");
  auto retain = fetch<PFN_cuDevicePrimaryCtxRetain_v7000>(lookup, "cuDevicePrimaryCtxRetain");
  auto release = fetch<PFN_cuDevicePrimaryCtxRelease_v11000>(lookup, "cuDevicePrimaryCtxRelease");
  auto set_current = fetch<PFN_cuCtxSetCurrent_v4000>(lookup, "cuCtxSetCurrent");
  auto create = fetch<PFN_cuGraphCreate_v10000>(lookup, "cuGraphCreate");
  auto add_empty = fetch<PFN_cuGraphAddEmptyNode_v10000>(lookup, "cuGraphAddEmptyNode");
  auto instantiate = fetch<PFN_cuGraphInstantiateWithFlags_v11040>(lookup, "cuGraphInstantiate");
  auto launch = fetch<PFN_cuGraphLaunch_v10000>(lookup, "cuGraphLaunch");
  auto synchronize = fetch<PFN_cuStreamSynchronize_v2000>(lookup, "cuStreamSynchronize");
  auto exec_destroy = fetch<PFN_cuGraphExecDestroy_v10000>(lookup, "cuGraphExecDestroy");
  auto destroy = fetch<PFN_cuGraphDestroy_v10000>(lookup, "cuGraphDestroy");
  if (!init || !device_get || !retain || !release || !set_current || !create || !add_empty ||
      !instantiate || !launch || !synchronize || !exec_destroy || !destroy)
    return fprintf(stderr, "driver_reloads: a lookup failed\n"), 1;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  CUgraphExec exec = nullptr;
  if (init(0) || device_get(&device, 0) || retain(&context, device) || set_current(context) ||
      create(&graph, 0) || add_empty(&node, graph, nullptr, 0) || instantiate(&exec, graph, 0))
    return fprintf(stderr, "driver_reloads: setup failed\n"), 1;
  for (int i = 0; i < launches; ++i) count(launch(exec, nullptr));
  if (synchronize(nullptr) || exec_destroy(exec) || destroy(graph) || release(device))
    return fprintf(stderr, "driver_reloads: teardown failed\n"), 1;
  *base = base_of(reinterpret_cast<void *>(init));
  dlclose(driver);
  return 0;
}

int by_name_round(const char *plugin_path, int launches, void **base) {
  void *plugin = dlopen(plugin_path, RTLD_NOW | RTLD_GLOBAL);
  if (!plugin) return fprintf(stderr, "driver_reloads: %s\n", dlerror()), 1;
  auto run = reinterpret_cast<int (*)(int, int *, int *)>(dlsym(plugin, "reload_plugin_launch"));
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!run || !driver) return fprintf(stderr, "driver_reloads: plugin incomplete\n"), 1;
  *base = base_of(dlsym(driver, "cuInit"));
  g_unload(driver);
  int failed = 0, result = 0;
  if (run(launches, &failed, &result) != 0)
    return fprintf(stderr, "driver_reloads: plugin setup failed\n"), 1;
  g_launches += launches;
  g_failed += failed;
  if (result) g_result = result;
  g_unload(plugin);
  return 0;
}

int instances(const char *copy) {
  void *first = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *second = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
  if (!first || !second) return fprintf(stderr, "driver_reloads: %s\n", dlerror()), 1;
  // The first instance's lookup is met first (and used: the runtime of another library).
  auto first_lookup =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(first, "cuGetProcAddress_v2"));
  if (!first_lookup || !fetch<PFN_cuInit_v2000>(first_lookup, "cuInit"))
    return fprintf(stderr, "driver_reloads: first instance unusable\n"), 1;
  auto lookup = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(second, "cuGetProcAddress_v2"));
  auto init = reinterpret_cast<PFN_cuInit_v2000>(dlsym(second, "cuInit"));
  if (!lookup || !init || init(0) != CUDA_SUCCESS)
    return fprintf(stderr, "driver_reloads: second instance unusable\n"), 1;
  auto device_get = fetch<PFN_cuDeviceGet_v2000>(lookup, "cuDeviceGet");
  const bool own = device_get && base_of(reinterpret_cast<void *>(device_get)) ==
                                     base_of(reinterpret_cast<void *>(init));
  CUdevice device = 0;
  const CUresult result = device_get ? device_get(&device, 0) : CUDA_ERROR_NOT_FOUND;
  printf("second instance's lookup answered from: %s; cuDeviceGet=%d\n",
         own ? "itself" : "another instance", result);
  count(own ? result : CUDA_ERROR_INVALID_HANDLE);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int status = 0;
  if (strcmp(mode, "instances") == 0 && argc == 3) {
    status = instances(argv[2]);
  } else if ((strcmp(mode, "lookup") == 0 && argc == 4) ||
             ((strcmp(mode, "by-name") == 0 || strcmp(mode, "by-name-libc") == 0) && argc == 5)) {
    const bool by_name = mode[0] == 'b';
    if (strcmp(mode, "by-name-libc") == 0) {
      g_unload = nullptr;
      for (const char *name : {"libc.so.6", "libdl.so.2"})  // glibc 2.34 on; before
        if (void *library = g_unload ? nullptr : dlopen(name, RTLD_NOW | RTLD_NOLOAD))
          g_unload = reinterpret_cast<int (*)(void *)>(dlsym(library, "dlclose"));
      if (!g_unload) return fprintf(stderr, "driver_reloads: no dlclose in libc.so.6\n"), 1;
    }
    const int rounds = atoi(argv[by_name ? 3 : 2]), launches = atoi(argv[by_name ? 4 : 3]);
    void *previous = nullptr;
    for (int round = 1; round <= rounds && status == 0; ++round) {
      const int failed_before = g_failed;
      void *base = nullptr;
      status = by_name ? by_name_round(argv[2], launches, &base) : lookup_round(launches, &base);
      if (status) break;
      if (driver_loaded()) {
        fprintf(stderr, "driver_reloads: the driver stayed loaded after round %d\n", round);
        status = 1;
        break;
      }
      printf("round %d: moved=%s launches=%d failed=%d\n", round,
             previous && base != previous ? "yes" : "no", launches, g_failed - failed_before);
      block(base);
      previous = base;
    }
  } else {
    fprintf(stderr,
            "usage: driver_reloads lookup ROUNDS LAUNCHES | by-name[-libc] PLUGIN ROUNDS "
            "LAUNCHES | instances COPY\n");
    return 2;
  }
  if (status) return status;
  printf("launches=%d failed=%d result=%d\n", g_launches, g_failed, g_result);
  fflush(stdout);
  return g_failed ? 3 : 0;
}
