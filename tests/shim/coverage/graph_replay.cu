// A real CUDA program: creates a graph with a kernel node, instantiates it and replays it.
// Built by nvcc three ways (static runtime, -cudart shared, --default-stream per-thread).
// On a GPU this is the end-to-end test; without one it fails inside the CUDA runtime, and
// must fail identically with the shim preloaded.
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

__global__ void scale(float *data, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t status_ = (call);                                                     \
    if (status_ != cudaSuccess) {                                                     \
      std::printf("%s failed: %s (%s)\n", #call, cudaGetErrorName(status_),           \
                  cudaGetErrorString(status_));                                       \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(int argc, char **argv) {
  int replays = argc > 1 ? std::atoi(argv[1]) : 10;
  const int n = 1 << 12;
  float *data = nullptr;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMalloc(&data, n * sizeof(float)));
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  scale<<<(n + 255) / 256, 256, 0, stream>>>(data, 1.0001f, n);
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < replays; ++i) CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(data));
  std::printf("launches=%d failed=0 result=0\n", replays);
  return 0;
}
