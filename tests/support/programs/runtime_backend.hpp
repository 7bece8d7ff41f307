// Graph set-up through the CUDA runtime API for the launch_* programs that use the runtime
// (launch_runtime[_ptsz], launch_static_runtime, launch_entry_point); each implements launch().
//
// Each graph: an empty node, a memset node writing the graph's index into its own slice of one
// cudaMalloc'd buffer, an empty node. Launch results are cudaError_t codes, except where a
// program launches through a driver function pointer. --kernels is not supported (no kernel
// nodes: the stand-in runtime has no module registration).
//
// This header defines the non-inline functions instantiate_graphs() and reinstantiate_graphs():
// include it in one translation unit per program.

#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "launch_harness.hpp"

namespace runtime_detail {

inline int fail(const char **what, const char *call, cudaError_t e) {
  *what = call;
  return static_cast<int>(e);
}

// Inlined into each named function below, so that the runtime's instantiate function is called
// from that function's own frame.
__attribute__((always_inline)) inline int instantiate_one(bool with_params, cudaGraphExec_t *exec,
                                                          cudaGraph_t graph, const char **what) {
  if (!with_params) {
    const cudaError_t e = cudaGraphInstantiate(exec, graph, 0);
    return e == cudaSuccess ? 0 : fail(what, "cudaGraphInstantiate", e);
  }
  cudaGraphInstantiateParams p{};
  const cudaError_t e = cudaGraphInstantiateWithParams(exec, graph, &p);
  return e == cudaSuccess ? 0 : fail(what, "cudaGraphInstantiateWithParams", e);
}

}  // namespace runtime_detail

class RuntimeBackend;
// The call sites of every instantiation (see launch_harness.hpp), defined below the class.
int instantiate_graphs(RuntimeBackend &b, const char **what);
int reinstantiate_graphs(RuntimeBackend &b, const char **what);

class RuntimeBackend : public harness::Backend {
 public:
  int setup(const harness::Options &opt, const char **what) override {
    opt_ = &opt;
    cudaError_t e = cudaSetDevice(0);
    if (e != cudaSuccess) return fail(what, "cudaSetDevice", e);
    const size_t slice = 1024;
    if ((e = cudaMalloc(&buffer_, slice * static_cast<size_t>(opt.graphs))) != cudaSuccess) {
      return fail(what, "cudaMalloc", e);
    }
    for (int g = 0; g < opt.graphs; ++g) {
      cudaGraph_t graph = nullptr;
      if ((e = cudaGraphCreate(&graph, 0)) != cudaSuccess) return fail(what, "cudaGraphCreate", e);
      graphs_.push_back(graph);
      cudaGraphNode_t first = nullptr, memset = nullptr, last = nullptr;
      if ((e = cudaGraphAddEmptyNode(&first, graph, nullptr, 0)) != cudaSuccess) {
        return fail(what, "cudaGraphAddEmptyNode", e);
      }
      cudaMemsetParams p{};
      p.dst = static_cast<char *>(buffer_) + slice * static_cast<size_t>(g);
      p.value = static_cast<unsigned>(g);
      p.elementSize = 4;
      p.width = slice / 4;
      p.height = 1;
      p.pitch = slice;
      if ((e = cudaGraphAddMemsetNode(&memset, graph, &first, 1, &p)) != cudaSuccess) {
        return fail(what, "cudaGraphAddMemsetNode", e);
      }
      if ((e = cudaGraphAddEmptyNode(&last, graph, &memset, 1)) != cudaSuccess) {
        return fail(what, "cudaGraphAddEmptyNode", e);
      }
    }
    execs_.assign(graphs_.size(), nullptr);
    return 0;
  }

  int instantiate_all(bool again, const char **what) override {
    return again ? reinstantiate_graphs(*this, what) : instantiate_graphs(*this, what);
  }

  void *exec_handle(int g) override { return exec(g); }

  int upload(int g, CUstream_st *stream, const char **what) override {
    const cudaError_t e = cudaGraphUpload(exec(g), stream);
    return e == cudaSuccess ? 0 : fail(what, "cudaGraphUpload", e);
  }

  int destroy_exec(int g, const char **what) override {
    const cudaError_t e = cudaGraphExecDestroy(exec(g));
    execs_[static_cast<size_t>(g)] = nullptr;
    return e == cudaSuccess ? 0 : fail(what, "cudaGraphExecDestroy", e);
  }

  int thread_begin(CUstream_st **stream, const char **what) override {
    if (opt_->stream == harness::StreamKind::kCreated) {
      const cudaError_t e = cudaStreamCreate(stream);
      if (e != cudaSuccess) return fail(what, "cudaStreamCreate", e);
    }
    return 0;
  }

  int thread_end(CUstream_st *stream, const char **what) override {
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return fail(what, "cudaStreamSynchronize", e);
    if (opt_->stream == harness::StreamKind::kCreated) {
      if ((e = cudaStreamDestroy(stream)) != cudaSuccess) return fail(what, "cudaStreamDestroy", e);
    }
    return 0;
  }

  int teardown(const char **what) override {
    cudaError_t e = cudaSuccess;
    for (cudaGraph_t g : graphs_) {
      if ((e = cudaGraphDestroy(g)) != cudaSuccess) return fail(what, "cudaGraphDestroy", e);
    }
    if ((e = cudaFree(buffer_)) != cudaSuccess) return fail(what, "cudaFree", e);
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) return fail(what, "cudaDeviceSynchronize", e);
    return 0;
  }

  const char *error_name(int code) override {
    return cudaGetErrorName(static_cast<cudaError_t>(code));
  }

 protected:
  static int fail(const char **what, const char *call, cudaError_t e) {
    *what = call;
    return static_cast<int>(e);
  }

  cudaGraphExec_t exec(int g) const { return execs_[static_cast<size_t>(g)]; }

  const harness::Options *opt_ = nullptr;

 private:
  friend int instantiate_graphs(RuntimeBackend &b, const char **what);
  friend int reinstantiate_graphs(RuntimeBackend &b, const char **what);

  void *buffer_ = nullptr;
  std::vector<cudaGraph_t> graphs_;
  std::vector<cudaGraphExec_t> execs_;
};

// External linkage, never inlined, never merged with each other (noipa; their bodies differ
// too), so that each is the frame that calls the runtime's instantiate function.
__attribute__((noinline, noipa)) int instantiate_graphs(RuntimeBackend &b, const char **what) {
  const bool with_params = b.opt_->instantiate_with_params;
  b.execs_.assign(b.graphs_.size(), nullptr);
  for (size_t g = 0; g < b.graphs_.size(); ++g) {
    const int e = runtime_detail::instantiate_one(with_params, &b.execs_[g], b.graphs_[g], what);
    if (e != 0) return e;
  }
  return 0;
}

__attribute__((noinline, noipa)) int reinstantiate_graphs(RuntimeBackend &b, const char **what) {
  const bool with_params = b.opt_->instantiate_with_params;
  for (size_t g = 0; g < b.graphs_.size(); ++g) {
    if (b.execs_[g] != nullptr) {  // not destroyed first
      return runtime_detail::fail(what, "reinstantiate_graphs", cudaErrorInvalidValue);
    }
    const int e = runtime_detail::instantiate_one(with_params, &b.execs_[g], b.graphs_[g], what);
    if (e != 0) return e;
  }
  return 0;
}
