// launch_dlopen_driver: launches CUDA graphs through driver functions found with
// dlopen("libcuda.so.1") and dlsym(handle, "<exported name>") — no link to the driver, as
// Python bindings and plugin loaders do. dlsym on a handle searches only that library and its
// dependencies: a preloaded cuGraphLaunch is not what it finds.
//
// Usage: launch_dlopen_driver [--graphs G] [--iters N] [--threads T]
//                             [--stream created|null|legacy|ptsz] [--ptsz] [--app-ranges]
//                             [--instantiate flags|params] [--upload] [--reinstantiate K]
//                             [--dlopen-flags local|global|deepbind]
//                             [--kernels LIST] [--graph-kernels L] [--name-graphs P]
//                             [--name-from-threads]
// (options: see launch_harness.hpp). --ptsz looks up and calls "cuGraphLaunch_ptsz".
// --dlopen-flags: RTLD_NOW | RTLD_LOCAL (default), RTLD_NOW | RTLD_GLOBAL, or
// RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND.

#include <dlfcn.h>

#include <cstdio>
#include <type_traits>

#include "driver_backend.hpp"

namespace {

constexpr char kUsage[] =
    "usage: launch_dlopen_driver [--graphs G] [--iters N] [--threads T]\n"
    "                            [--stream created|null|legacy|ptsz] [--ptsz] [--app-ranges]\n"
    "                            [--instantiate flags|params] [--upload] [--reinstantiate K]\n"
    "                            [--dlopen-flags local|global|deepbind]\n"
    "                            [--kernels LIST] [--graph-kernels L] [--name-graphs P]\n"
    "                            [--name-from-threads]\n";

class DlopenDriver final : public DriverBackend {
 public:
  int load(const harness::Options &opt, const char **what) override {
    void *h = driver_detail::open_driver(opt.dlopen_flags, what);
    if (h == nullptr) return CUDA_ERROR_NOT_FOUND;
    bool ok = true;
    auto sym = [&](auto &out, const char *name) {
      void *p = dlsym(h, name);
      if (p == nullptr) {
        std::fprintf(stderr, "error: dlsym(%s): %s\n", name, dlerror());
        ok = false;
      }
      out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(p);
    };
    sym(api.getErrorName, "cuGetErrorName");
    sym(api.init, "cuInit");
    sym(api.deviceGet, "cuDeviceGet");
    sym(api.ctxCreate, "cuCtxCreate_v4");
    sym(api.ctxSetCurrent, "cuCtxSetCurrent");
    sym(api.ctxDestroy, "cuCtxDestroy_v2");
    sym(api.streamCreate, "cuStreamCreate");
    sym(api.streamDestroy, "cuStreamDestroy_v2");
    sym(api.streamSynchronize, "cuStreamSynchronize");
    sym(api.memAlloc, "cuMemAlloc_v2");
    sym(api.memFree, "cuMemFree_v2");
    sym(api.graphCreate, "cuGraphCreate");
    sym(api.graphDestroy, "cuGraphDestroy");
    sym(api.graphAddEmptyNode, "cuGraphAddEmptyNode");
    sym(api.graphAddMemsetNode, "cuGraphAddMemsetNode");
    sym(api.graphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    sym(api.graphInstantiateWithParams, "cuGraphInstantiateWithParams");
    sym(api.graphUpload, "cuGraphUpload");
    sym(api.graphExecDestroy, "cuGraphExecDestroy");
    sym(api.moduleLoadData, "cuModuleLoadData");
    sym(api.moduleGetFunction, "cuModuleGetFunction");
    sym(api.moduleUnload, "cuModuleUnload");
    sym(api.graphAddKernelNode, "cuGraphAddKernelNode_v2");
    sym(launch_, opt.ptsz ? "cuGraphLaunch_ptsz" : "cuGraphLaunch");
    if (!ok) {
      *what = "dlsym";
      return CUDA_ERROR_NOT_FOUND;
    }
    return 0;
  }

  int launch(int g, CUstream_st *stream) override { return launch_(exec(g), stream); }

 private:
  PFN_cuGraphLaunch_v10000 launch_ = nullptr;
};

}  // namespace

int main(int argc, char **argv) {
  DlopenDriver backend;
  return harness::run(backend, argc, argv, kUsage);
}
