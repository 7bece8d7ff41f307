// A real CUDA program for scripts/gpu-smoke's GPU-time case: one graph whose single kernel spins
// for a known number of SM cycles (clock64), replayed N times on one stream, so that the GPU
// time the shim measures per replay can be checked against a known figure.
//
// The expected time per replay is the cycles spun divided by the SM clock the kernel actually
// ran at. The nominal clock (cudaDevAttrClockRate) is the maximum boost clock and the GPU may run
// below it, so the kernel also reads the GPU's nanosecond timer (%globaltimer) at both ends of
// its spin: the clock it ran at is cycles / timer span. The program prints, after the replays:
//   per_graph=<N>
//   spin_cycles=<cycles per replay>
//   nominal_clock_khz=<cudaDevAttrClockRate>
//   measured_clock_khz=<cycles / timer span, the mean over replays>
//   expected_gpu_us=<mean timer span of the spin per replay>
//   launch_ns=<mean CPU time of one cudaGraphLaunch call>
//   gpu_smoke_graph=<the graph's name as given to the shim, when the shim is preloaded>
// Usage: gpu_spin_graph [replays [spin cycles]]
#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "ferrum_replay/ferrum_replay.h"

__device__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread spins; it records the cycles and the timer span of its spin into slot `replay`.
__global__ void spin(long long cycles, unsigned long long *spans, long long *spun, int *replay) {
  const long long start_cycles = clock64();
  const unsigned long long start_ns = global_timer_ns();
  long long now = start_cycles;
  while (now - start_cycles < cycles) now = clock64();
  const unsigned long long end_ns = global_timer_ns();
  const int slot = (*replay)++;
  spans[slot] = end_ns - start_ns;
  spun[slot] = now - start_cycles;
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

static double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
  const int replays = argc > 1 ? std::atoi(argv[1]) : 50;
  const long long cycles = argc > 2 ? std::atoll(argv[2]) : 2000000;  // ~1 ms at 2 GHz
  if (replays <= 0 || cycles <= 0) return 2;
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  unsigned long long *spans = nullptr;
  long long *spun = nullptr;
  int *replay = nullptr;
  CHECK(cudaMalloc(&spans, replays * sizeof *spans));
  CHECK(cudaMalloc(&spun, replays * sizeof *spun));
  CHECK(cudaMalloc(&replay, sizeof *replay));
  CHECK(cudaMemset(replay, 0, sizeof *replay));

  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  spin<<<1, 1, 0, stream>>>(cycles, spans, spun, replay);
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const char *name = "gpu-smoke spin";
  auto name_graph = reinterpret_cast<ferrum_replay_name_graph_exec_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_NAME_GRAPH_EXEC));
  if (name_graph && name_graph(exec, name) == 0) std::printf("gpu_smoke_graph=%s\n", name);
  CHECK(cudaGraphUpload(exec, stream));
  CHECK(cudaStreamSynchronize(stream));

  double launch_total = 0;
  for (int i = 0; i < replays; ++i) {
    const double before = now_ns();
    CHECK(cudaGraphLaunch(exec, stream));
    launch_total += now_ns() - before;
    // Let each replay run alone, so that the stream reaches it when it is launched.
    CHECK(cudaStreamSynchronize(stream));
  }

  unsigned long long *host_spans = new unsigned long long[replays];
  long long *host_spun = new long long[replays];
  CHECK(cudaMemcpy(host_spans, spans, replays * sizeof *spans, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host_spun, spun, replays * sizeof *spun, cudaMemcpyDeviceToHost));
  double span_total = 0, cycles_total = 0;
  for (int i = 0; i < replays; ++i) span_total += host_spans[i], cycles_total += host_spun[i];
  std::printf("per_graph=%d\nspin_cycles=%lld\nnominal_clock_khz=%d\n", replays, cycles, clock_khz);
  std::printf("measured_clock_khz=%.0f\nexpected_gpu_us=%.3f\nlaunch_ns=%.0f\n",
              span_total > 0 ? cycles_total / span_total * 1e6 : 0.0, span_total / replays / 1e3,
              launch_total / replays);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
