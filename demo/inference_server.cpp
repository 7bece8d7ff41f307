// inference_server: the ferrum-replay demo — a toy LLM inference server that replays CUDA
// graphs the way real servers do (vLLM, TensorRT-LLM, llama.cpp): one "prefill" graph per
// request, then one "decode" graph per generated token, picked by the current batch size from
// graphs captured for batch sizes 1, 2, 4 and 8.
//
// Usage: inference_server [--requests R] [--decode-steps S]
//   --requests R      requests to serve (default 20)
//   --decode-steps S  decode replays per request (default 16)
//
// It uses only the CUDA driver API (linked by name: libcuda.so.1). Its graphs hold kernel nodes
// from a PTX module embedded below (kPtx: prefill_attention, decode_attention, rmsnorm and
// sampling, each storing one value; PTX ISA 7.0 for sm_80, which the driver JIT-compiles for
// any GPU from Ampere on) and memset nodes, so the same binary runs against the real driver on
// a GPU machine and against the ferrum-replay stand-in here (put the stand-in's directory in
// LD_LIBRARY_PATH; its virtual GPU gives each replay the sum of its kernels' declared costs).
//
// Each graph, per layer (kLayers): memset of the layer's activations, rmsnorm, attention; then
// sampling — between an empty entry and exit node:
//   prefill (capture_prefill):            memset x4, rmsnorm x4, prefill_attention x4, sampling
//   decode, batch B (capture_decode(B)):  memset x4, rmsnorm x4, decode_attention x4, sampling
//
// Names, as ferrum-replay gives them (see docs/naming.md): the prefill graph is left unnamed, so
// its range is named by its call site, the function that instantiated it: capture_prefill. The
// decode graphs are all instantiated in capture_decode, so the server names them itself,
// "decode batch 1" ... "decode batch 8", with ferrum_replay_name_graph_exec — looked up with
// dlsym(RTLD_DEFAULT), which finds it only when the shim is preloaded: no link dependency, and
// without the shim the server runs unchanged.
//
// Output (stdout):
//   driver: ferrum-replay stand-in (no GPU on this machine)  |  driver: NVIDIA CUDA driver 13.0
//   simulated GPU time per replay: prefill <us> us, each decode graph <us> us   [stand-in only]
//   device: <name>
//   graphs: prefill (named by call site), decode batch 1, decode batch 2, decode batch 4,
//           decode batch 8 (named by the program)                            [one line]
//   served: requests=<R> decode_steps=<S>
//   replays: prefill=<n> decode batch 1=<n> decode batch 2=<n> decode batch 4=<n>
//            decode batch 8=<n>                                              [one line]
// Without the shim, the graphs line ends "(not named: ferrum-replay is not loaded)".
// Graphs are instantiated, and first replayed, in the order prefill, batch 1, 2, 4, 8.
// Exit status: 0, 1 on a CUDA error (its name on stderr), 2 on a usage error.

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// What the graphs are built from (outside the anonymous namespace, so that the functions below
// that take it keep plain external names).
struct Model {
  CUcontext ctx = nullptr;
  CUdeviceptr activations = 0;  // one slab per layer, room for kMaxBatch sequences each
  CUfunction prefill_attention = nullptr;
  CUfunction decode_attention = nullptr;
  CUfunction rmsnorm = nullptr;
  CUfunction sampling = nullptr;
};

namespace {

constexpr char kUsage[] = "usage: inference_server [--requests R] [--decode-steps S]\n";

// Batch size of each successive decode step (continuous batching: requests join and leave).
// It starts 1, 2, 4, 8 so that graphs are first replayed in instantiation order.
constexpr int kBatchPattern[] = {1, 2, 4, 8, 8, 8, 4, 8, 2, 4, 8, 8, 1, 4, 8, 2};
constexpr int kPatternLength = sizeof(kBatchPattern) / sizeof(kBatchPattern[0]);

constexpr int kBatchSizes[] = {1, 2, 4, 8};
constexpr int kDecodeGraphs = 4;
constexpr int kGraphCount = 1 + kDecodeGraphs;  // prefill, then one decode graph per batch size

constexpr size_t kTokenBytes = 4096;  // activations per sequence, per layer buffer
constexpr int kLayers = 4;
constexpr int kMaxBatch = 8;

// The model's kernels. Each takes (u32 *out, u32 value) and stores value at out: a stand-in for
// real work that any GPU from sm_80 on runs in microseconds. Each declares what it would cost
// on the stand-in's virtual GPU (`.pragma "ferrum_cost_ns=N"`, which the real JIT ignores), so
// that the demo's GPU times differ per graph as a real model's would.
#define DEMO_COST_PREFILL_ATTENTION 200000
#define DEMO_COST_DECODE_ATTENTION 30000
#define DEMO_COST_RMSNORM 5000
#define DEMO_COST_SAMPLING 10000
#define DEMO_STRING(x) #x
#define DEMO_COST(x) DEMO_STRING(x)
// clang-format off
#define DEMO_KERNEL(name, cost)                    \
  ".visible .entry " name "(\n"                    \
  "\t.param .u64 " name "_param_0,\n"              \
  "\t.param .u32 " name "_param_1\n"               \
  ")\n"                                            \
  "{\n"                                            \
  "\t.pragma \"ferrum_cost_ns=" DEMO_COST(cost) "\";\n" \
  "\t.reg .b32 %r<2>;\n"                           \
  "\t.reg .b64 %rd<3>;\n"                          \
  "\tld.param.u64 %rd1, [" name "_param_0];\n"     \
  "\tld.param.u32 %r1, [" name "_param_1];\n"      \
  "\tcvta.to.global.u64 %rd2, %rd1;\n"             \
  "\tst.global.u32 [%rd2], %r1;\n"                 \
  "\tret;\n"                                       \
  "}\n\n"

constexpr char kPtx[] =
    ".version 7.0\n"
    ".target sm_80\n"
    ".address_size 64\n\n"
    DEMO_KERNEL("prefill_attention", DEMO_COST_PREFILL_ATTENTION)
    DEMO_KERNEL("decode_attention", DEMO_COST_DECODE_ATTENTION)
    DEMO_KERNEL("rmsnorm", DEMO_COST_RMSNORM)
    DEMO_KERNEL("sampling", DEMO_COST_SAMPLING);

#undef DEMO_KERNEL
// clang-format on

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

CUdeviceptr layer_slab(const Model &m, int layer) {
  return m.activations + static_cast<CUdeviceptr>(layer) * kMaxBatch * kTokenBytes;
}

// A kernel node running `f(out, value)` on one thread, after `*prev`; it becomes `*prev`.
void add_kernel(CUgraph graph, CUgraphNode *prev, CUfunction f, CUdeviceptr out, unsigned value) {
  void *args[] = {&out, &value};  // copied by the driver
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = f;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  CUgraphNode node = nullptr;
  check(cuGraphAddKernelNode(&node, graph, prev, 1, &p), "cuGraphAddKernelNode");
  *prev = node;
}

// One forward pass over `sequences` sequences with the given attention kernel.
CUgraph build_forward_graph(const Model &m, CUfunction attention, int sequences, unsigned value) {
  CUgraph graph = nullptr;
  check(cuGraphCreate(&graph, 0), "cuGraphCreate");
  CUgraphNode prev = nullptr;
  check(cuGraphAddEmptyNode(&prev, graph, nullptr, 0), "cuGraphAddEmptyNode");
  for (int layer = 0; layer < kLayers; ++layer) {
    CUDA_MEMSET_NODE_PARAMS p{};
    p.dst = layer_slab(m, layer);
    p.elementSize = 4;
    p.width = kTokenBytes / 4;
    p.height = static_cast<size_t>(sequences);
    p.pitch = kTokenBytes;
    p.value = value + static_cast<unsigned>(layer);
    CUgraphNode memset = nullptr;
    check(cuGraphAddMemsetNode(&memset, graph, &prev, 1, &p, m.ctx), "cuGraphAddMemsetNode");
    prev = memset;
    add_kernel(graph, &prev, m.rmsnorm, layer_slab(m, layer), value);
    add_kernel(graph, &prev, attention, layer_slab(m, layer) + 4, value);
  }
  add_kernel(graph, &prev, m.sampling, m.activations + 8, value);
  CUgraphNode done = nullptr;
  check(cuGraphAddEmptyNode(&done, graph, &prev, 1), "cuGraphAddEmptyNode");
  return graph;
}

}  // namespace

// The two places where the server instantiates graphs: external linkage and never inlined or
// merged, so that each is a frame of its own when the driver is called (ferrum-replay names a
// graph after the function that instantiated it).
__attribute__((noinline, noipa)) CUgraphExec capture_prefill(const Model &model, CUgraph *graph) {
  *graph = build_forward_graph(model, model.prefill_attention, kMaxBatch, 1000);
  CUgraphExec exec = nullptr;
  check(cuGraphInstantiate(&exec, *graph, 0), "cuGraphInstantiate");
  return exec;
}

__attribute__((noinline, noipa)) CUgraphExec capture_decode(int batch, const Model &model,
                                                            CUgraph *graph) {
  *graph =
      build_forward_graph(model, model.decode_attention, batch, 100 * static_cast<unsigned>(batch));
  CUgraphExec exec = nullptr;
  check(cuGraphInstantiate(&exec, *graph, 0), "cuGraphInstantiate");
  return exec;
}

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
    // What its virtual GPU spends on each replay: the declared kernel costs, per layer.
    constexpr long long prefill_us =
        (kLayers * (DEMO_COST_RMSNORM + DEMO_COST_PREFILL_ATTENTION) + DEMO_COST_SAMPLING) / 1000;
    constexpr long long decode_us =
        (kLayers * (DEMO_COST_RMSNORM + DEMO_COST_DECODE_ATTENTION) + DEMO_COST_SAMPLING) / 1000;
    std::printf("simulated GPU time per replay: prefill %lld us, each decode graph %lld us\n",
                prefill_us, decode_us);
  } else {
    std::printf("driver: NVIDIA CUDA driver %d.%d\n", version / 1000, (version % 1000) / 10);
  }
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  char name[256] = {};
  check(cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  std::printf("device: %s\n", name);

  Model model;
  check(cuDevicePrimaryCtxRetain(&model.ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(model.ctx), "cuCtxSetCurrent");
  CUstream stream = nullptr;
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuMemAlloc(&model.activations, static_cast<size_t>(kLayers) * kMaxBatch * kTokenBytes),
        "cuMemAlloc");
  CUmodule module = nullptr;
  check(cuModuleLoadData(&module, kPtx), "cuModuleLoadData");
  check(cuModuleGetFunction(&model.prefill_attention, module, "prefill_attention"),
        "cuModuleGetFunction");
  check(cuModuleGetFunction(&model.decode_attention, module, "decode_attention"),
        "cuModuleGetFunction");
  check(cuModuleGetFunction(&model.rmsnorm, module, "rmsnorm"), "cuModuleGetFunction");
  check(cuModuleGetFunction(&model.sampling, module, "sampling"), "cuModuleGetFunction");

  // ferrum-replay's naming function, when the shim is preloaded; nullptr otherwise.
  using NameGraphExec = int (*)(void *graph_exec, const char *name);
  const auto name_graph_exec =
      reinterpret_cast<NameGraphExec>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));

  // Capture once, replay many times: prefill first, then decode by batch size.
  CUgraph graphs[kGraphCount] = {};
  CUgraphExec execs[kGraphCount] = {};
  std::string labels[kGraphCount] = {"prefill"};
  execs[0] = capture_prefill(model, &graphs[0]);
  for (int b = 0; b < kDecodeGraphs; ++b) {
    execs[b + 1] = capture_decode(kBatchSizes[b], model, &graphs[b + 1]);
    labels[b + 1] = "decode batch " + std::to_string(kBatchSizes[b]);
    if (name_graph_exec != nullptr) name_graph_exec(execs[b + 1], labels[b + 1].c_str());
  }
  std::string graphs_line = "graphs: prefill (named by call site)";
  for (int g = 1; g < kGraphCount; ++g) graphs_line += ", " + labels[g];
  graphs_line += name_graph_exec != nullptr ? " (named by the program)"
                                            : " (not named: ferrum-replay is not loaded)";
  std::printf("%s\n", graphs_line.c_str());
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
  check(cuModuleUnload(module), "cuModuleUnload");
  check(cuMemFree(model.activations), "cuMemFree");
  check(cuStreamDestroy(stream), "cuStreamDestroy");
  check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");

  std::printf("served: requests=%d decode_steps=%d\n", requests, decode_steps);
  std::printf("replays:");
  for (int g = 0; g < kGraphCount; ++g) std::printf(" %s=%lld", labels[g].c_str(), replays[g]);
  std::printf("\n");
  return 0;
}
