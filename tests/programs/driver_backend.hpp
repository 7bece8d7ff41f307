// Graph set-up through the CUDA driver API for the launch_* programs that talk to the driver
// (launch_driver, launch_dlopen_driver, launch_procaddress). How the functions are obtained
// (linked by name, dlsym, cuGetProcAddress) and how a launch is made is up to each program:
// it fills `api` in load() and implements launch().
//
// Each graph: an empty node, then a memset node writing the graph's index into its own slice
// of one cuMemAlloc'd buffer, then an empty node — nodes the real driver runs without any
// kernel module of ours.

#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

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
};

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
      if ((r = api.graphAddEmptyNode(&last, graph, &memset, 1)) != CUDA_SUCCESS) {
        return fail(what, "cuGraphAddEmptyNode", r);
      }
    }
    execs_.assign(graphs_.size(), nullptr);
    return 0;
  }

  int instantiate(int g, const char **what) override {
    CUgraphExec &exec = execs_[static_cast<size_t>(g)];
    if (!opt_->instantiate_with_params) {
      const CUresult r = api.graphInstantiateWithFlags(&exec, graphs_[static_cast<size_t>(g)], 0);
      return r == CUDA_SUCCESS ? 0 : fail(what, "cuGraphInstantiateWithFlags", r);
    }
    CUDA_GRAPH_INSTANTIATE_PARAMS p{};
    const CUresult r = api.graphInstantiateWithParams(&exec, graphs_[static_cast<size_t>(g)], &p);
    return r == CUDA_SUCCESS ? 0 : fail(what, "cuGraphInstantiateWithParams", r);
  }

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
  CUcontext ctx_ = nullptr;
  CUdeviceptr buffer_ = 0;
  std::vector<CUgraph> graphs_;
  std::vector<CUgraphExec> execs_;
};
