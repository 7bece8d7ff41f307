// launch_entry_point: sets graphs up with the shared CUDA runtime, then launches them through
// the driver function the runtime hands out for "cuGraphLaunch" — cudaGetDriverEntryPoint, or
// cudaGetDriverEntryPointByVersion with --version. The runtime answers through the
// cuGetProcAddress pointer it stored (the answer of its self-query at 12000), as the real one.
//
// Usage: launch_entry_point [--graphs G] [--iters N] [--threads T]
//                           [--stream created|null|legacy|ptsz] [--app-ranges]
//                           [--instantiate flags|params] [--upload] [--reinstantiate K]
//                           [--flags 0|1|2] [--ptsz] [--version V]
//                           [--name-graphs P] [--name-from-threads]
// (options: see launch_harness.hpp).
//   --flags F    cudaEnableDefault (0, default), cudaEnableLegacyStream (1) or
//                cudaEnablePerThreadDefaultStream (2); --ptsz is the same as --flags 2.
//   --version V  use cudaGetDriverEntryPointByVersion("cuGraphLaunch", ..., V, ...);
//                without it, cudaGetDriverEntryPoint.
// The final result= is the CUresult the driver function returned.

#include "runtime_backend.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdio>

namespace {

constexpr char kUsage[] =
    "usage: launch_entry_point [--graphs G] [--iters N] [--threads T]\n"
    "                          [--stream created|null|legacy|ptsz] [--app-ranges]\n"
    "                          [--instantiate flags|params] [--upload] [--reinstantiate K]\n"
    "                          [--flags 0|1|2] [--ptsz] [--version V]\n"
    "                          [--name-graphs P] [--name-from-threads]\n";

class EntryPoint final : public RuntimeBackend {
 public:
  int setup(const harness::Options &opt, const char **what) override {
    if (int e = RuntimeBackend::setup(opt, what); e != 0) return e;
    const unsigned long long flags =
        opt.ptsz ? static_cast<unsigned long long>(cudaEnablePerThreadDefaultStream) : opt.flags;
    void *p = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaSuccess;
    if (opt.version != 0) {
      e = cudaGetDriverEntryPointByVersion("cuGraphLaunch", &p, static_cast<unsigned>(opt.version),
                                           flags, &status);
    } else {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
      e = cudaGetDriverEntryPoint("cuGraphLaunch", &p, flags, &status);
#pragma GCC diagnostic pop
    }
    if (e != cudaSuccess) return fail(what, "cudaGetDriverEntryPoint", e);
    if (p == nullptr) {
      std::fprintf(stderr, "error: no driver entry point for cuGraphLaunch (status %d)\n",
                   static_cast<int>(status));
      return fail(what, "cudaGetDriverEntryPoint", cudaErrorSymbolNotFound);
    }
    launch_ = reinterpret_cast<PFN_cuGraphLaunch_v10000>(p);
    return 0;
  }

  int launch(int g, CUstream_st *stream) override {
    return launch_(exec(g), stream);
  }

 private:
  PFN_cuGraphLaunch_v10000 launch_ = nullptr;
};

}  // namespace

int main(int argc, char **argv) {
  EntryPoint backend;
  return harness::run(backend, argc, argv, kUsage);
}
