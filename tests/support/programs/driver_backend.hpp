// Graph set-up through the CUDA driver API for the launch_* programs that talk to the driver
// (launch_driver, launch_dlopen_driver, launch_procaddress). How the functions are obtained
// (linked by name, dlsym, cuGetProcAddress) and how a launch is made is up to each program:
// it fills `api` in load() and implements launch().
//
// Each graph: an empty node, then a memset node writing the graph's index into its own slice
// of one cuMemAlloc'd buffer, then the kernel nodes of --kernels/--graph-kernels in a chain (if
// any), then an empty node. The kernels come from one PTX module built in memory
// (kernel_module_ptx): each takes one pointer and stores 1 through it, and each node points it
// at its graph's slice. Without --kernels the real driver runs the graphs without any module.
//
// This header defines the non-inline functions instantiate_graphs() and reinstantiate_graphs():
// include it in one translation unit per program.

#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <string>
#include <vector>

#include "launch_harness.hpp"

struct DriverApi {
  PFN_cuGetErrorName_v6000 getErrorName = nullptr;
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDeviceGet_v2000 deviceGet = nullptr;
  PFN_cuCtxCreate_v12050 ctxCreate = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctxSetCurrent = nullptr;
  PFN_cuCtxDestroy_v4000 ctxDestroy = nullptr;
  PFN_cuStreamCreate_v2000 streamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 streamDestroy = nullptr;
  PFN_cuStreamSynchronize_v2000 streamSynchronize = nullptr;
  PFN_cuMemAlloc_v3020 memAlloc = nullptr;
  PFN_cuMemFree_v3020 memFree = nullptr;
  PFN_cuGraphCreate_v10000 graphCreate = nullptr;
  PFN_cuGraphDestroy_v10000 graphDestroy = nullptr;
  PFN_cuGraphAddEmptyNode_v10000 graphAddEmptyNode = nullptr;
  PFN_cuGraphAddMemsetNode_v10000 graphAddMemsetNode = nullptr;
  PFN_cuGraphInstantiateWithFlags_v11040 graphInstantiateWithFlags = nullptr;
  PFN_cuGraphInstantiateWithParams_v12000 graphInstantiateWithParams = nullptr;
  PFN_cuGraphUpload_v11010 graphUpload = nullptr;
  PFN_cuGraphExecDestroy_v10000 graphExecDestroy = nullptr;
  PFN_cuModuleLoadData_v2000 moduleLoadData = nullptr;
  PFN_cuModuleGetFunction_v2000 moduleGetFunction = nullptr;
  PFN_cuModuleUnload_v2000 moduleUnload = nullptr;
  PFN_cuGraphAddKernelNode_v12000 graphAddKernelNode = nullptr;
};

// A PTX module (ISA 7.0, sm_80: valid for the real JIT too) with one kernel per distinct name:
//   .visible .entry NAME(.param .u64 NAME_param_0) — stores the u32 1 at the pointer.
inline std::string kernel_module_ptx(const std::vector<std::string> &names) {
  std::string ptx = ".version 7.0\n.target sm_80\n.address_size 64\n";
  for (const std::string &n : names) {
    ptx += "\n.visible .entry " + n + "(\n\t.param .u64 " + n + "_param_0\n)\n{\n" +
           "\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<3>;\n" + "\tld.param.u64 %rd1, [" + n +
           "_param_0];\n" + "\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r1, 1;\n" +
           "\tst.global.u32 [%rd2], %r1;\n\tret;\n}\n";
  }
  return ptx;
}

namespace driver_detail {

// dlopen("libcuda.so.1") as a program that resolves the driver itself does; `flags` is
// --dlopen-flags (local, global or deepbind). Null, with a message, when it cannot.
inline void *open_driver(const std::string &flags, const char **what) {
  int mode = RTLD_NOW | RTLD_LOCAL;
  if (flags == "global") mode = RTLD_NOW | RTLD_GLOBAL;
  if (flags == "deepbind") mode = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
  void *handle = dlopen("libcuda.so.1", mode);
  if (handle == nullptr) {
    std::fprintf(stderr, "error: dlopen(libcuda.so.1): %s\n", dlerror());
    *what = "dlopen(libcuda.so.1)";
  }
  return handle;
}

inline int fail(const char **what, const char *call, CUresult r) {
  *what = call;
  return static_cast<int>(r);
}

// Inlined into each named function below, so that the instantiate entry point is called from
// that function's own frame.
__attribute__((always_inline)) inline int instantiate_one(const DriverApi &api, bool with_params,
                                                          CUgraphExec *exec, CUgraph graph,
                                                          const char **what) {
  if (!with_params) {
    const CUresult r = api.graphInstantiateWithFlags(exec, graph, 0);
    return r == CUDA_SUCCESS ? 0 : fail(what, "cuGraphInstantiateWithFlags", r);
  }
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  const CUresult r = api.graphInstantiateWithParams(exec, graph, &p);
  return r == CUDA_SUCCESS ? 0 : fail(what, "cuGraphInstantiateWithParams", r);
}

}  // namespace driver_detail

class DriverBackend;
// The call sites of every instantiation (see launch_harness.hpp), defined below the class.
int instantiate_graphs(DriverBackend &b, const char **what);
int reinstantiate_graphs(DriverBackend &b, const char **what);

class DriverBackend : public harness::Backend {
 public:
  // Fill `api`; return 0, or a CUresult with `what` set.
  virtual int load(const harness::Options &opt, const char **what) = 0;

  int setup(const harness::Options &opt, const char **what) override {
    opt_ = &opt;
    if (int e = load(opt, what); e != 0) return e;
    CUdevice dev = 0;
    CUresult r = api.init(0);
    if (r != CUDA_SUCCESS) return fail(what, "cuInit", r);
    if ((r = api.deviceGet(&dev, 0)) != CUDA_SUCCESS) return fail(what, "cuDeviceGet", r);
    if ((r = api.ctxCreate(&ctx_, nullptr, 0, dev)) != CUDA_SUCCESS) {
      return fail(what, "cuCtxCreate", r);
    }
    const size_t slice = 1024;
    if ((r = api.memAlloc(&buffer_, slice * static_cast<size_t>(opt.graphs))) != CUDA_SUCCESS) {
      return fail(what, "cuMemAlloc", r);
    }
    if (int e = load_kernels(opt, what); e != 0) return e;
    for (int g = 0; g < opt.graphs; ++g) {
      CUgraph graph = nullptr;
      if ((r = api.graphCreate(&graph, 0)) != CUDA_SUCCESS) return fail(what, "cuGraphCreate", r);
      graphs_.push_back(graph);
      CUgraphNode first = nullptr, memset = nullptr, last = nullptr;
      if ((r = api.graphAddEmptyNode(&first, graph, nullptr, 0)) != CUDA_SUCCESS) {
        return fail(what, "cuGraphAddEmptyNode", r);
      }
      CUDA_MEMSET_NODE_PARAMS p{};
      p.dst = buffer_ + slice * static_cast<size_t>(g);
      p.value = static_cast<unsigned>(g);
      p.elementSize = 4;
      p.width = slice / 4;
      p.height = 1;
      p.pitch = slice;
      if ((r = api.graphAddMemsetNode(&memset, graph, &first, 1, &p, ctx_)) != CUDA_SUCCESS) {
        return fail(what, "cuGraphAddMemsetNode", r);
      }
      CUgraphNode prev = memset;
      for (const std::string &name : opt.kernels_of(g)) {
        CUdeviceptr out = p.dst;
        void *args[] = {&out};
        CUDA_KERNEL_NODE_PARAMS k{};
        k.func = functions_[kernel_index(name)];
        k.gridDimX = k.gridDimY = k.gridDimZ = 1;
        k.blockDimX = k.blockDimY = k.blockDimZ = 1;
        k.kernelParams = args;
        CUgraphNode node = nullptr;
        if ((r = api.graphAddKernelNode(&node, graph, &prev, 1, &k)) != CUDA_SUCCESS) {
          return fail(what, "cuGraphAddKernelNode", r);
        }
        prev = node;
      }
      if ((r = api.graphAddEmptyNode(&last, graph, &prev, 1)) != CUDA_SUCCESS) {
        return fail(what, "cuGraphAddEmptyNode", r);
      }
    }
    execs_.assign(graphs_.size(), nullptr);
    return 0;
  }

  int instantiate_all(bool again, const char **what) override {
    return again ? reinstantiate_graphs(*this, what) : instantiate_graphs(*this, what);
  }

  void *exec_handle(int g) override { return exec(g); }

  bool adds_kernel_nodes() const override { return true; }

  int upload(int g, CUstream_st *stream, const char **what) override {
    const CUresult r = api.graphUpload(exec(g), stream);
    return r == CUDA_SUCCESS ? 0 : fail(what, "cuGraphUpload", r);
  }

  int destroy_exec(int g, const char **what) override {
    const CUresult r = api.graphExecDestroy(exec(g));
    execs_[static_cast<size_t>(g)] = nullptr;
    return r == CUDA_SUCCESS ? 0 : fail(what, "cuGraphExecDestroy", r);
  }

  int thread_begin(CUstream_st **stream, const char **what) override {
    CUresult r = api.ctxSetCurrent(ctx_);
    if (r != CUDA_SUCCESS) return fail(what, "cuCtxSetCurrent", r);
    if (opt_->stream == harness::StreamKind::kCreated) {
      r = api.streamCreate(stream, CU_STREAM_NON_BLOCKING);
      if (r != CUDA_SUCCESS) return fail(what, "cuStreamCreate", r);
    }
    return 0;
  }

  int thread_end(CUstream_st *stream, const char **what) override {
    CUresult r = api.streamSynchronize(stream);
    if (r != CUDA_SUCCESS) return fail(what, "cuStreamSynchronize", r);
    if (opt_->stream == harness::StreamKind::kCreated) {
      r = api.streamDestroy(stream);
      if (r != CUDA_SUCCESS) return fail(what, "cuStreamDestroy", r);
    }
    return 0;
  }

  int teardown(const char **what) override {
    CUresult r = CUDA_SUCCESS;
    for (CUgraph g : graphs_) {
      if ((r = api.graphDestroy(g)) != CUDA_SUCCESS) return fail(what, "cuGraphDestroy", r);
    }
    if (module_ != nullptr && (r = api.moduleUnload(module_)) != CUDA_SUCCESS) {
      return fail(what, "cuModuleUnload", r);
    }
    if ((r = api.memFree(buffer_)) != CUDA_SUCCESS) return fail(what, "cuMemFree", r);
    if ((r = api.ctxDestroy(ctx_)) != CUDA_SUCCESS) return fail(what, "cuCtxDestroy", r);
    return 0;
  }

  const char *error_name(int code) override {
    const char *name = nullptr;
    if (api.getErrorName == nullptr ||
        api.getErrorName(static_cast<CUresult>(code), &name) != CUDA_SUCCESS || name == nullptr) {
      return "unknown CUresult";
    }
    return name;
  }

 protected:
  static int fail(const char **what, const char *call, CUresult r) {
    *what = call;
    return static_cast<int>(r);
  }

  CUgraphExec exec(int g) const { return execs_[static_cast<size_t>(g)]; }

  DriverApi api;
  const harness::Options *opt_ = nullptr;

 private:
  friend int instantiate_graphs(DriverBackend &b, const char **what);
  friend int reinstantiate_graphs(DriverBackend &b, const char **what);

  // The module of every kernel the graphs use, each name once, in first-use order.
  int load_kernels(const harness::Options &opt, const char **what) {
    for (int g = 0; g < opt.graphs; ++g) {
      for (const std::string &name : opt.kernels_of(g)) {
        bool known = false;
        for (const std::string &k : kernel_names_) known = known || k == name;
        if (!known) kernel_names_.push_back(name);
      }
    }
    if (kernel_names_.empty()) return 0;
    const std::string ptx = kernel_module_ptx(kernel_names_);
    CUresult r = api.moduleLoadData(&module_, ptx.c_str());
    if (r != CUDA_SUCCESS) return fail(what, "cuModuleLoadData", r);
    functions_.assign(kernel_names_.size(), nullptr);
    for (size_t i = 0; i < kernel_names_.size(); ++i) {
      r = api.moduleGetFunction(&functions_[i], module_, kernel_names_[i].c_str());
      if (r != CUDA_SUCCESS) return fail(what, "cuModuleGetFunction", r);
    }
    return 0;
  }

  size_t kernel_index(const std::string &name) const {
    size_t i = 0;
    while (kernel_names_[i] != name) ++i;
    return i;
  }

  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<std::string> kernel_names_;
  std::vector<CUfunction> functions_;
  CUdeviceptr buffer_ = 0;
  std::vector<CUgraph> graphs_;
  std::vector<CUgraphExec> execs_;
};

// External linkage, never inlined, never merged with each other (noipa; their bodies differ
// too), so that each is the frame that calls the instantiate entry point.
__attribute__((noinline, noipa)) int instantiate_graphs(DriverBackend &b, const char **what) {
  const bool with_params = b.opt_->instantiate_with_params;
  b.execs_.assign(b.graphs_.size(), nullptr);
  for (size_t g = 0; g < b.graphs_.size(); ++g) {
    const int e =
        driver_detail::instantiate_one(b.api, with_params, &b.execs_[g], b.graphs_[g], what);
    if (e != 0) return e;
  }
  return 0;
}

__attribute__((noinline, noipa)) int reinstantiate_graphs(DriverBackend &b, const char **what) {
  const bool with_params = b.opt_->instantiate_with_params;
  for (size_t g = 0; g < b.graphs_.size(); ++g) {
    if (b.execs_[g] != nullptr) {  // not destroyed first
      return driver_detail::fail(what, "reinstantiate_graphs", CUDA_ERROR_INVALID_VALUE);
    }
    const int e =
        driver_detail::instantiate_one(b.api, with_params, &b.execs_[g], b.graphs_[g], what);
    if (e != 0) return e;
  }
  return 0;
}
