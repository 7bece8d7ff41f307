// launch_procaddress: launches CUDA graphs through driver functions obtained the way the CUDA
// runtime and modern bindings get them: dlopen("libcuda.so.1"), dlsym(handle,
// "cuGetProcAddress_v2"), the self-query "cuGetProcAddress" (by default at 12000, replacing
// the lookup pointer with the answer), then every function through cuGetProcAddress.
//
// Usage: launch_procaddress [--graphs G] [--iters N] [--threads T]
//                           [--stream created|null|legacy|ptsz] [--app-ranges]
//                           [--instantiate flags|params] [--upload] [--reinstantiate K]
//                           [--flags 0|1|2] [--ptsz] [--version V]
//                           [--self-query 12000|11030|none]
//                           [--dlopen-flags local|global|deepbind]
//                           [--kernels LIST] [--graph-kernels L] [--name-graphs P]
//                           [--name-from-threads]
// (options: see launch_harness.hpp).
//   --flags F       flags of the "cuGraphLaunch" lookup (2 =
//                   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM gives cuGraphLaunch_ptsz);
//                   --ptsz is the same as --flags 2. Other lookups use flags 0.
//   --version V     CUDA version of the "cuGraphLaunch" lookup (default 12000).
//   --self-query Q  12000: look up with the 5-argument answer of the self-query at 12000;
//                   11030: with the 4-argument answer at 11030; none: with the dlsym result.

#include <dlfcn.h>

#include <cstdio>
#include <type_traits>

#include "driver_backend.hpp"

namespace {

constexpr char kUsage[] =
    "usage: launch_procaddress [--graphs G] [--iters N] [--threads T]\n"
    "                          [--stream created|null|legacy|ptsz] [--app-ranges]\n"
    "                          [--instantiate flags|params] [--upload] [--reinstantiate K]\n"
    "                          [--flags 0|1|2] [--ptsz] [--version V]\n"
    "                          [--self-query 12000|11030|none]\n"
    "                          [--dlopen-flags local|global|deepbind]\n"
    "                          [--kernels LIST] [--graph-kernels L] [--name-graphs P]\n"
    "                          [--name-from-threads]\n";

class ProcAddressDriver final : public DriverBackend {
 public:
  int load(const harness::Options &opt, const char **what) override {
    void *h = driver_detail::open_driver(opt.dlopen_flags, what);
    if (h == nullptr) return CUDA_ERROR_NOT_FOUND;
    gpa12_ = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(h, "cuGetProcAddress_v2"));
    if (gpa12_ == nullptr) {
      std::fprintf(stderr, "error: dlsym(cuGetProcAddress_v2): %s\n", dlerror());
      *what = "dlsym(cuGetProcAddress_v2)";
      return CUDA_ERROR_NOT_FOUND;
    }
    if (opt.self_query != "none") {
      const int version = opt.self_query == "11030" ? 11030 : 12000;
      void *self = nullptr;
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      const CUresult r = gpa12_("cuGetProcAddress", &self, version, 0, &status);
      if (r != CUDA_SUCCESS || self == nullptr) {
        *what = "cuGetProcAddress(\"cuGetProcAddress\")";
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_FOUND;
      }
      if (version == 11030) {
        gpa11_ = reinterpret_cast<PFN_cuGetProcAddress_v11030>(self);
        gpa12_ = nullptr;
      } else {
        gpa12_ = reinterpret_cast<PFN_cuGetProcAddress_v12000>(self);
      }
    }
    const unsigned long long launch_flags =
        opt.ptsz ? static_cast<unsigned long long>(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
                 : opt.flags;
    CUresult r = CUDA_SUCCESS;
    auto get = [&](auto &out, const char *name, int version, unsigned long long flags) {
      if (r != CUDA_SUCCESS) return;
      void *p = nullptr;
      r = gpa11_ != nullptr ? gpa11_(name, &p, version, flags)
                            : gpa12_(name, &p, version, flags, nullptr);
      if (r == CUDA_SUCCESS && p == nullptr) r = CUDA_ERROR_NOT_FOUND;
      if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "error: cuGetProcAddress(%s, %d, %llu) failed: %d\n", name, version,
                     flags, static_cast<int>(r));
      }
      out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(p);
    };
    get(api.getErrorName, "cuGetErrorName", 6000, 0);
    get(api.init, "cuInit", 2000, 0);
    get(api.deviceGet, "cuDeviceGet", 2000, 0);
    get(api.ctxCreate, "cuCtxCreate", 12050, 0);
    get(api.ctxSetCurrent, "cuCtxSetCurrent", 4000, 0);
    get(api.ctxDestroy, "cuCtxDestroy", 4000, 0);
    get(api.streamCreate, "cuStreamCreate", 2000, 0);
    get(api.streamDestroy, "cuStreamDestroy", 4000, 0);
    get(api.streamSynchronize, "cuStreamSynchronize", 2000, 0);
    get(api.memAlloc, "cuMemAlloc", 3020, 0);
    get(api.memFree, "cuMemFree", 3020, 0);
    get(api.graphCreate, "cuGraphCreate", 10000, 0);
    get(api.graphDestroy, "cuGraphDestroy", 10000, 0);
    get(api.graphAddEmptyNode, "cuGraphAddEmptyNode", 10000, 0);
    get(api.graphAddMemsetNode, "cuGraphAddMemsetNode", 10000, 0);
    get(api.graphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, 0);
    get(api.graphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, 0);
    get(api.graphUpload, "cuGraphUpload", 11010, 0);
    get(api.graphExecDestroy, "cuGraphExecDestroy", 10000, 0);
    get(api.moduleLoadData, "cuModuleLoadData", 2000, 0);
    get(api.moduleGetFunction, "cuModuleGetFunction", 2000, 0);
    get(api.moduleUnload, "cuModuleUnload", 2000, 0);
    get(api.graphAddKernelNode, "cuGraphAddKernelNode", 12000, 0);
    get(launch_, "cuGraphLaunch", opt.version != 0 ? opt.version : 12000, launch_flags);
    if (r != CUDA_SUCCESS) *what = "cuGetProcAddress";
    return r;
  }

  int launch(int g, CUstream_st *stream) override { return launch_(exec(g), stream); }

 private:
  PFN_cuGetProcAddress_v12000 gpa12_ = nullptr;
  PFN_cuGetProcAddress_v11030 gpa11_ = nullptr;
  PFN_cuGraphLaunch_v10000 launch_ = nullptr;
};

}  // namespace

int main(int argc, char **argv) {
  ProcAddressDriver backend;
  return harness::run(backend, argc, argv, kUsage);
}
