// launch_driver: launches CUDA graphs by calling the driver API by name; links libcuda.so.1.
//
// Usage: launch_driver [--graphs G] [--iters N] [--threads T]
//                      [--stream created|null|legacy|ptsz] [--ptsz] [--app-ranges]
//                      [--instantiate flags|params] [--upload] [--reinstantiate K]
//                      [--kernels LIST] [--graph-kernels L] [--name-graphs P]
//                      [--name-from-threads]
// (options: see launch_harness.hpp). Each launch is a direct call of cuGraphLaunch through the
// PLT; --ptsz calls cuGraphLaunch_ptsz instead.
//
// Built three times: launch_driver_plugin, a module run by plugin_loader (LAUNCH_AS_PLUGIN: main is
// its plugin_main); launch_driver; and launch_driver_ptsz compiled with
// CUDA_API_PER_THREAD_DEFAULT_STREAM, where <cuda.h> maps cuGraphLaunch to cuGraphLaunch_ptsz
// (and cuStreamSynchronize, cuGraphUpload, cuGraphInstantiateWithParams to their _ptsz forms),
// as g++ code built for per-thread default streams imports them.

#include "driver_backend.hpp"

// Not declared by <cuda.h> unless CUDA_API_PER_THREAD_DEFAULT_STREAM; same prototype as the
// header's cuGraphLaunch.
extern "C" CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraph, CUstream hStream);

namespace {

constexpr char kUsage[] =
    "usage: launch_driver [--graphs G] [--iters N] [--threads T]\n"
    "                     [--stream created|null|legacy|ptsz] [--ptsz] [--app-ranges]\n"
    "                     [--instantiate flags|params] [--upload] [--reinstantiate K]\n"
    "                     [--kernels LIST] [--graph-kernels L] [--name-graphs P]\n"
    "                     [--name-from-threads]\n";

class LinkedDriver final : public DriverBackend {
 public:
  int load(const harness::Options &opt, const char **) override {
    ptsz_ = opt.ptsz;
    api.getErrorName = &cuGetErrorName;
    api.init = &cuInit;
    api.deviceGet = &cuDeviceGet;
    api.ctxCreate = &cuCtxCreate;
    api.ctxSetCurrent = &cuCtxSetCurrent;
    api.ctxDestroy = &cuCtxDestroy;
    api.streamCreate = &cuStreamCreate;
    api.streamDestroy = &cuStreamDestroy;
    api.streamSynchronize = &cuStreamSynchronize;
    api.memAlloc = &cuMemAlloc;
    api.memFree = &cuMemFree;
    api.graphCreate = &cuGraphCreate;
    api.graphDestroy = &cuGraphDestroy;
    api.graphAddEmptyNode = &cuGraphAddEmptyNode;
    api.graphAddMemsetNode = &cuGraphAddMemsetNode;
    api.graphInstantiateWithFlags = &cuGraphInstantiate;
    api.graphInstantiateWithParams = &cuGraphInstantiateWithParams;
    api.graphUpload = &cuGraphUpload;
    api.graphExecDestroy = &cuGraphExecDestroy;
    api.moduleLoadData = &cuModuleLoadData;
    api.moduleGetFunction = &cuModuleGetFunction;
    api.moduleUnload = &cuModuleUnload;
    api.graphAddKernelNode = &cuGraphAddKernelNode;
    return 0;
  }

  int launch(int g, CUstream_st *stream) override {
    return ptsz_ ? cuGraphLaunch_ptsz(exec(g), stream) : cuGraphLaunch(exec(g), stream);
  }

 private:
  bool ptsz_ = false;
};

}  // namespace

#ifdef LAUNCH_AS_PLUGIN  // built as a module for plugin_loader.cpp: this is its entry point
extern "C" __attribute__((visibility("default"))) int plugin_main(int argc, char **argv);
#define main plugin_main
#endif

int main(int argc, char **argv) {
  LinkedDriver backend;
  return harness::run(backend, argc, argv, kUsage);
}
