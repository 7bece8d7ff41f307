// inference_server: the ferrum-replay demo — a toy LLM inference server that replays CUDA
// graphs the way real servers do (vLLM, TensorRT-LLM, llama.cpp): one "prefill" graph per
// request, then one "decode" graph per generated token, picked by the current batch size from
// graphs captured for batch sizes 1, 2, 4 and 8.
//
// Usage: inference_server [--requests R] [--decode-steps S]
//   --requests R      requests to serve (default 20)
//   --decode-steps S  decode replays per request (default 16)
//
// It uses only the CUDA driver API (linked by name: libcuda.so.1), and only graph nodes the
// real driver runs without any module of ours (memsets and empty nodes), so the same binary
// runs against the real driver on a GPU machine and against the ferrum-replay stand-in here
// (put the stand-in's directory in LD_LIBRARY_PATH; FERRUM_STANDIN_LAUNCH_SLEEP_US gives its
// replays a duration).
//
// Output (stdout):
//   driver: ferrum-replay stand-in (no GPU on this machine)  |  driver: NVIDIA CUDA driver 13.0
//   device: <name>
//   graph 1=prefill graph 2=decode_b1 graph 3=decode_b2 graph 4=decode_b4 graph 5=decode_b8
//   served: requests=<R> decode_steps=<S>
//   replays: prefill=<n> decode_b1=<n> decode_b2=<n> decode_b4=<n> decode_b8=<n>
// Graphs are instantiated, and first replayed, in the order prefill, decode_b1, b2, b4, b8,
// so "graph N" (the name ferrum-replay gives the N-th graph it sees) maps as printed.
// Exit status: 0, 1 on a CUDA error (its name on stderr), 2 on a usage error.

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr char kUsage[] = "usage: inference_server [--requests R] [--decode-steps S]\n";

// Batch size of each successive decode step (continuous batching: requests join and leave).
// It starts 1, 2, 4, 8 so that graphs are first replayed in instantiation order.
constexpr int kBatchPattern[] = {1, 2, 4, 8, 8, 8, 4, 8, 2, 4, 8, 8, 1, 4, 8, 2};
constexpr int kPatternLength = sizeof(kBatchPattern) / sizeof(kBatchPattern[0]);

constexpr int kBatchSizes[] = {1, 2, 4, 8};
constexpr int kGraphCount = 5;  // prefill, then one decode graph per batch size
constexpr const char *kGraphNames[kGraphCount] = {"prefill", "decode_b1", "decode_b2", "decode_b4",
                                                  "decode_b8"};

constexpr size_t kTokenBytes = 4096;  // activations per sequence, per layer buffer
constexpr int kLayers = 4;

void check(CUresult r, const char *call) {
  if (r == CUDA_SUCCESS) return;
  const char *name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown CUresult";
  std::fprintf(stderr, "error: %s failed: %s (%d)\n", call, name, static_cast<int>(r));
  std::exit(1);
}

int parse_count(int argc, char **argv, int &i) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "error: %s needs a value\n%s", argv[i], kUsage);
    std::exit(2);
  }
  char *end = nullptr;
  const long v = std::strtol(argv[++i], &end, 10);
  if (*end != '\0' || v < 0 || v > 1000000) {
    std::fprintf(stderr, "error: bad value for %s\n%s", argv[i - 1], kUsage);
    std::exit(2);
  }
  return static_cast<int>(v);
}

// A graph of `layers` memset nodes in a chain between two empty nodes; each memset writes
// `sequences` rows of activations.
CUgraph build_graph(CUcontext ctx, CUdeviceptr buffer, int layers, int sequences, unsigned value) {
  CUgraph graph = nullptr;
  check(cuGraphCreate(&graph, 0), "cuGraphCreate");
  CUgraphNode prev = nullptr;
  check(cuGraphAddEmptyNode(&prev, graph, nullptr, 0), "cuGraphAddEmptyNode");
  for (int layer = 0; layer < layers; ++layer) {
    CUDA_MEMSET_NODE_PARAMS p{};
    p.dst = buffer + static_cast<CUdeviceptr>(layer) * 8 * kTokenBytes;
    p.elementSize = 4;
    p.width = kTokenBytes / 4;
    p.height = static_cast<size_t>(sequences);
    p.pitch = kTokenBytes;
    p.value = value + static_cast<unsigned>(layer);
    CUgraphNode node = nullptr;
    check(cuGraphAddMemsetNode(&node, graph, &prev, 1, &p, ctx), "cuGraphAddMemsetNode");
    prev = node;
  }
  CUgraphNode done = nullptr;
  check(cuGraphAddEmptyNode(&done, graph, &prev, 1), "cuGraphAddEmptyNode");
  return graph;
}

}  // namespace

int main(int argc, char **argv) {
  int requests = 20;
  int decode_steps = 16;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--requests") == 0) {
      requests = parse_count(argc, argv, i);
    } else if (std::strcmp(argv[i], "--decode-steps") == 0) {
      decode_steps = parse_count(argc, argv, i);
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "error: unknown option %s\n%s", argv[i], kUsage);
      return 2;
    }
  }

  check(cuInit(0), "cuInit");
  int version = 0;
  check(cuDriverGetVersion(&version), "cuDriverGetVersion");
  if (dlsym(RTLD_DEFAULT, "ferrum_standin_driver_marker") != nullptr) {
    std::printf("driver: ferrum-replay stand-in (no GPU on this machine)\n");
  } else {
    std::printf("driver: NVIDIA CUDA driver %d.%d\n", version / 1000, (version % 1000) / 10);
  }
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  char name[256] = {};
  check(cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  std::printf("device: %s\n", name);

  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUstream stream = nullptr;
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUdeviceptr buffer = 0;  // one slab per layer, room for 8 sequences each
  check(cuMemAlloc(&buffer, static_cast<size_t>(kLayers) * 8 * kTokenBytes), "cuMemAlloc");

  // Capture once, replay many times: prefill first, then decode by batch size.
  CUgraph graphs[kGraphCount] = {};
  CUgraphExec execs[kGraphCount] = {};
  graphs[0] = build_graph(ctx, buffer, kLayers, 8, 1000);
  for (int b = 0; b < 4; ++b) {
    graphs[b + 1] = build_graph(ctx, buffer, kLayers, kBatchSizes[b], 100 * kBatchSizes[b]);
  }
  for (int g = 0; g < kGraphCount; ++g) {
    check(cuGraphInstantiate(&execs[g], graphs[g], 0), "cuGraphInstantiate");
  }
  std::string mapping;
  for (int g = 0; g < kGraphCount; ++g) {
    mapping +=
        (g == 0 ? "" : " ") + std::string("graph ") + std::to_string(g + 1) + "=" + kGraphNames[g];
  }
  std::printf("%s\n", mapping.c_str());
  std::fflush(stdout);

  long long replays[kGraphCount] = {};
  long long decode_index = 0;
  for (int r = 0; r < requests; ++r) {
    check(cuGraphLaunch(execs[0], stream), "cuGraphLaunch");
    ++replays[0];
    for (int s = 0; s < decode_steps; ++s) {
      const int batch = kBatchPattern[decode_index++ % kPatternLength];
      const int g = batch == 1 ? 1 : batch == 2 ? 2 : batch == 4 ? 3 : 4;
      check(cuGraphLaunch(execs[g], stream), "cuGraphLaunch");
      ++replays[g];
    }
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");  // the response is ready
  }

  for (int g = 0; g < kGraphCount; ++g) {
    check(cuGraphExecDestroy(execs[g]), "cuGraphExecDestroy");
    check(cuGraphDestroy(graphs[g]), "cuGraphDestroy");
  }
  check(cuMemFree(buffer), "cuMemFree");
  check(cuStreamDestroy(stream), "cuStreamDestroy");
  check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");

  std::printf("served: requests=%d decode_steps=%d\n", requests, decode_steps);
  std::printf("replays:");
  for (int g = 0; g < kGraphCount; ++g) std::printf(" %s=%lld", kGraphNames[g], replays[g]);
  std::printf("\n");
  return 0;
}
