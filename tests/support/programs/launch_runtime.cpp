// launch_runtime: launches CUDA graphs with cudaGraphLaunch of a CUDA runtime, which reaches
// the driver through dlopen + cuGetProcAddress (never by name).
//
// Usage: launch_runtime [--graphs G] [--iters N] [--threads T]
//                       [--stream created|null|legacy|ptsz] [--ptsz] [--app-ranges]
//                       [--instantiate flags|params] [--upload] [--reinstantiate K]
//                       [--name-graphs P] [--name-from-threads]
// (options: see launch_harness.hpp). --stream null/legacy/ptsz pass 0, cudaStreamLegacy (0x1),
// cudaStreamPerThread (0x2); --ptsz calls cudaGraphLaunch_ptsz explicitly. The final result=
// is a cudaError_t.
//
// Built four times from this file:
//   launch_runtime         linked with the shared libcudart.so.13 (calls through the PLT)
//   launch_runtime_ptsz    the same, compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM, so
//                          <cuda_runtime_api.h> maps cudaGraphLaunch to cudaGraphLaunch_ptsz
//   launch_static_runtime  linked with the static runtime: cudaGraphLaunch is a hidden, local
//                          symbol of the executable (as with nvcc's default cudart_static)
//   launch_runtime_plugin  a module linked with libcudart.so.13, run by plugin_loader
//                          (LAUNCH_AS_PLUGIN: main is its plugin_main)

#include "runtime_backend.hpp"

// Declared by <cuda_runtime_api.h> only under CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec,
                                                      cudaStream_t stream);

namespace {

constexpr char kUsage[] =
    "usage: launch_runtime [--graphs G] [--iters N] [--threads T]\n"
    "                      [--stream created|null|legacy|ptsz] [--ptsz] [--app-ranges]\n"
    "                      [--instantiate flags|params] [--upload] [--reinstantiate K]\n"
    "                      [--name-graphs P] [--name-from-threads]\n";

class Runtime final : public RuntimeBackend {
 public:
  int launch(int g, CUstream_st *stream) override {
    return opt_->ptsz ? cudaGraphLaunch_ptsz(exec(g), stream) : cudaGraphLaunch(exec(g), stream);
  }
};

}  // namespace

#ifdef LAUNCH_AS_PLUGIN  // built as a module for plugin_loader.cpp: this is its entry point
extern "C" __attribute__((visibility("default"))) int plugin_main(int argc, char **argv);
#define main plugin_main
#endif

int main(int argc, char **argv) {
  Runtime backend;
  return harness::run(backend, argc, argv, kUsage);
}
