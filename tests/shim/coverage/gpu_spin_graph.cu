// A real CUDA program for scripts/gpu-smoke's GPU-time case: one graph whose single kernel spins
// for a known time, replayed N times on one stream, so that the GPU time the shim measures per
// replay can be checked against a known figure.
//
// The kernel spins on the GPU's nanosecond timer (%globaltimer), not on SM cycles: a spin of
// cycles lasts as long as the clock the SM happens to run at, which differs between two
// processes (boost, power and thermal states), and gpu-smoke compares this process's GPU times
// with those Nsight Systems projects for another run of the program (review GS-4). The expected
// time per replay is the timer span the kernel measured itself, from its first read to its
// last. The program prints, after the replays:
//   per_graph=<N>
//   spin_ns=<the spin asked for, per replay>
//   nominal_clock_khz=<cudaDevAttrClockRate>
//   measured_clock_khz=<SM cycles / timer span, the mean over replays: the clock it ran at>
//   expected_gpu_us=<mean timer span of the spin per replay>
//   launch_ns=<mean CPU time of one cudaGraphLaunch call>
//   gpu_smoke_graph=<the graph's name as given to the shim, when the shim is preloaded>
// Usage: gpu_spin_graph [replays [spin ns]]
//        gpu_spin_graph --probe
// --probe asks the CUDA runtime these programs were built with what the test programs will
// meet, and prints one line, status 0 whatever the answer (scripts/gpu-smoke shows it before its
// cases: a driver too old for the runtime, or no device visible — MIG without an instance, an
// empty CUDA_VISIBLE_DEVICES — is then one clear line, not a FAIL per case to decode; GS-3, GS-10):
//   driver=<cudaDriverGetVersion, 0 without a driver> runtime=<cudaRuntimeGetVersion>
//   devices=<cudaGetDeviceCount> error=<its error's name> kernel=<the error name of a tiny
//   kernel run on device 0 and waited for, "-" without a device> name=<device 0's name, if any>
// The kernel makes the probe meet what every case meets — a context, a module, a launch — so
// that a GPU that hangs there stops gpu-smoke at its probe, not in each case (review RV4-4).
#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "ferrum_replay/ferrum_replay.h"

__device__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread spins for `ns` of the GPU's timer; it records the timer span and the SM cycles of
// its spin into slot `replay`.
__global__ void spin(unsigned long long ns, unsigned long long *spans, long long *spun,
                     int *replay) {
  const long long start_cycles = clock64();
  const unsigned long long start_ns = global_timer_ns();
  unsigned long long now = start_ns;
  // Signed: a timer that stepped back reads as no time spun yet, not as 2^64 ns (review RV2-10).
  while (static_cast<long long>(now - start_ns) < static_cast<long long>(ns))
    now = global_timer_ns();
  const long long end_cycles = clock64();
  const int slot = (*replay)++;
  spans[slot] = now - start_ns;
  spun[slot] = end_cycles - start_cycles;
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

__global__ void nothing() {}

static int probe() {
  int driver = 0, runtime = 0, devices = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t error = cudaGetDeviceCount(&devices);
  cudaDeviceProp properties{};
  const bool usable = error == cudaSuccess && devices > 0;
  const bool named = usable && cudaGetDeviceProperties(&properties, 0) == cudaSuccess;
  const char *kernel = "-";
  if (usable) {
    nothing<<<1, 1>>>();
    cudaError_t ran = cudaGetLastError();
    if (ran == cudaSuccess) ran = cudaDeviceSynchronize();
    kernel = cudaGetErrorName(ran);
  }
  std::printf("driver=%d runtime=%d devices=%d error=%s kernel=%s name=%s\n", driver, runtime,
              error == cudaSuccess ? devices : 0, cudaGetErrorName(error), kernel,
              named ? properties.name : "");
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "--probe") == 0) return probe();
  const int replays = argc > 1 ? std::atoi(argv[1]) : 50;
  const long long ns = argc > 2 ? std::atoll(argv[2]) : 1000000;  // 1 ms
  if (replays <= 0 || ns <= 0) return 2;
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

  // One run before the capture: the kernel's module is loaded (and, on a GPU without machine
  // code for it, its PTX compiled) here, not inside the capture (review RV2-10). Its slot is
  // given back.
  spin<<<1, 1, 0, stream>>>(1000, spans, spun, replay);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemset(replay, 0, sizeof *replay));

  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  spin<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(ns), spans, spun, replay);
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
  std::printf("per_graph=%d\nspin_ns=%lld\nnominal_clock_khz=%d\n", replays, ns, clock_khz);
  std::printf("measured_clock_khz=%.0f\nexpected_gpu_us=%.3f\nlaunch_ns=%.0f\n",
              span_total > 0 ? cycles_total / span_total * 1e6 : 0.0, span_total / replays / 1e3,
              launch_total / replays);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
