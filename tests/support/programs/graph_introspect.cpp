// graph_introspect: builds one graph with kernel nodes and prints what the driver reports about
// it through the calls the shim's content names use — cuGraphGetNodes (both halves of its
// two-call protocol), cuGraphNodeGetType, cuGraphKernelNodeGetParams (the CUDA 10.0 ABI, legacy
// name, and the CUDA 12.0 ABI, _v2), cuFuncGetName and cuKernelGetName — plus how modules,
// libraries and cuGetProcAddress answer for them.
//
// Usage: graph_introspect        (no options; links libcuda.so.1 by name)
//
// Its output is the same against the stand-in driver and against NVIDIA's (run it on a GPU
// machine to compare), except the first line and the lines marked "stand-in:", which only the
// stand-in prints (checks of its cuGetProcAddress table and of handles after unloading, where
// the real driver's behaviour is undefined).
//
// The graph: empty -> memset -> prefill_attention (module function, kernelParams) ->
// _Z6decodePfi (module function, mangled name, arguments through `extra`) -> sampling (library
// kernel: func NULL, kern set) -> prefill_attention (legacy cuGraphAddKernelNode) -> empty.
//
// Exit status: 0, or 1 when a call that must succeed did not (message on stderr).

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace {

// The legacy (CUDA 10.0 ABI) exports, which <cuda.h> maps to the _v2 names: what a program built
// with older headers calls. Found with dlsym on the loaded driver.
PFN_cuGraphAddKernelNode_v10000 legacy_add_kernel_node = nullptr;
PFN_cuGraphKernelNodeGetParams_v10000 legacy_get_params = nullptr;

constexpr char kPtx[] = R"(//
// kernels for graph_introspect
//
.version 7.0
.target sm_80
.address_size 64

.visible .entry prefill_attention(
	.param .u64 prefill_attention_param_0,
	.param .u32 prefill_attention_param_1
)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [prefill_attention_param_0];
	ld.param.u32 %r1, [prefill_attention_param_1];
	cvta.to.global.u64 %rd2, %rd1;
	st.global.u32 [%rd2], %r1;
	ret;
}

/* a C++ kernel: decode(float *, int) */
.visible .entry _Z6decodePfi(
	.param .u64 _Z6decodePfi_param_0,
	.param .u32 _Z6decodePfi_param_1
)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [_Z6decodePfi_param_0];
	ld.param.u32 %r1, [_Z6decodePfi_param_1];
	cvta.to.global.u64 %rd2, %rd1;
	st.global.u32 [%rd2+4], %r1;
	ret;
}
)";

constexpr char kLibraryPtx[] = R"(
.version 7.0
.target sm_80
.address_size 64

.visible .entry sampling(
	.param .u64 sampling_param_0
)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [sampling_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	mov.u32 %r1, 3;
	st.global.u32 [%rd2+8], %r1;
	ret;
}
)";

void *driver_symbol(const char *name) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void *p = driver != nullptr ? dlsym(driver, name) : nullptr;
  if (p == nullptr) {
    std::fprintf(stderr, "error: dlsym(libcuda.so.1, %s) failed\n", name);
    std::exit(1);
  }
  return p;
}

const char *err(CUresult r) {
  const char *name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) return "unknown CUresult";
  return name;
}

void must(CUresult r, const char *call) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "error: %s failed: %s (%d)\n", call, err(r), static_cast<int>(r));
  std::exit(1);
}

const char *func_name(CUfunction f) {
  if (f == nullptr) return "null";
  const char *name = nullptr;
  const CUresult r = cuFuncGetName(&name, f);
  return r == CUDA_SUCCESS ? name : err(r);
}

const char *kernel_name(CUkernel k) {
  if (k == nullptr) return "null";
  const char *name = nullptr;
  const CUresult r = cuKernelGetName(&name, k);
  return r == CUDA_SUCCESS ? name : err(r);
}

CUdeviceptr g_buffer = 0;
void *g_caller_args = nullptr;  // the kernelParams array the program passed (must be copied)

// What a kernel node's arguments hold: the device pointer as "ptr+<offset into the buffer>",
// then the u32 value of two-parameter kernels.
void print_args(const CUDA_KERNEL_NODE_PARAMS_v2 &p, int params) {
  if (p.kernelParams != nullptr) {
    const CUdeviceptr ptr = *static_cast<CUdeviceptr *>(p.kernelParams[0]);
    std::printf(" kernelParams=%s ptr+%llu",
                p.kernelParams == g_caller_args ? "caller's" : "copied",
                static_cast<unsigned long long>(ptr - g_buffer));
    if (params == 2) std::printf(",%u", *static_cast<unsigned *>(p.kernelParams[1]));
  } else if (p.extra != nullptr) {
    const void *buffer = nullptr;
    size_t size = 0;
    for (size_t i = 0; p.extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = p.extra[i + 1];
      if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t *>(p.extra[i + 1]);
    }
    CUdeviceptr ptr = 0;
    unsigned value = 0;
    if (buffer != nullptr && size >= 12) {
      std::memcpy(&ptr, buffer, sizeof ptr);
      std::memcpy(&value, static_cast<const char *>(buffer) + 8, sizeof value);
    }
    std::printf(" extra size=%zu ptr+%llu,%u", size,
                static_cast<unsigned long long>(ptr - g_buffer), value);
  } else {
    std::printf(" no arguments");
  }
}

}  // namespace

int main() {
  // Stand-in only: cuGetProcAddress then answers with the exported functions, which dlsym can
  // compare (read at its first use, below).
  setenv("FERRUM_STANDIN_PROC_EXPORTED", "1", 1);
  const bool standin = dlsym(RTLD_DEFAULT, "ferrum_standin_driver_marker") != nullptr;
  std::printf("driver: %s\n", standin ? "stand-in" : "NVIDIA");
  legacy_add_kernel_node =
      reinterpret_cast<PFN_cuGraphAddKernelNode_v10000>(driver_symbol("cuGraphAddKernelNode"));
  legacy_get_params = reinterpret_cast<PFN_cuGraphKernelNodeGetParams_v10000>(
      driver_symbol("cuGraphKernelNodeGetParams"));

  must(cuInit(0), "cuInit");
  CUdevice dev = 0;
  must(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  must(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  must(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  must(cuMemAlloc(&g_buffer, 4096), "cuMemAlloc");

  // Modules: one function per .entry, looked up by its (mangled) name.
  CUmodule module = nullptr;
  must(cuModuleLoadData(&module, kPtx), "cuModuleLoadData");
  CUfunction prefill = nullptr, decode = nullptr, missing = nullptr;
  must(cuModuleGetFunction(&prefill, module, "prefill_attention"), "cuModuleGetFunction");
  must(cuModuleGetFunction(&decode, module, "_Z6decodePfi"), "cuModuleGetFunction");
  std::printf("cuModuleGetFunction(decode): %s\n",
              err(cuModuleGetFunction(&missing, module, "decode")));
  std::printf("cuFuncGetName: %s %s\n", func_name(prefill), func_name(decode));

  // Libraries: context-independent kernels.
  CUlibrary library = nullptr;
  must(cuLibraryLoadData(&library, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
       "cuLibraryLoadData");
  CUkernel sampling = nullptr, no_kernel = nullptr;
  must(cuLibraryGetKernel(&sampling, library, "sampling"), "cuLibraryGetKernel");
  std::printf("cuLibraryGetKernel(prefill_attention): %s\n",
              err(cuLibraryGetKernel(&no_kernel, library, "prefill_attention")));
  CUfunction sampling_function = nullptr;
  must(cuKernelGetFunction(&sampling_function, sampling), "cuKernelGetFunction");
  std::printf("cuKernelGetName: %s; cuFuncGetName(cuKernelGetFunction): %s\n",
              kernel_name(sampling), func_name(sampling_function));

  // The graph.
  CUgraph graph = nullptr;
  must(cuGraphCreate(&graph, 0), "cuGraphCreate");
  CUgraphNode first = nullptr, memset = nullptr, k1 = nullptr, k2 = nullptr, k3 = nullptr,
              k4 = nullptr, last = nullptr;
  must(cuGraphAddEmptyNode(&first, graph, nullptr, 0), "cuGraphAddEmptyNode");
  CUDA_MEMSET_NODE_PARAMS ms{};
  ms.dst = g_buffer;
  ms.elementSize = 4;
  ms.width = 1024;
  ms.height = 1;
  ms.value = 0;
  must(cuGraphAddMemsetNode(&memset, graph, &first, 1, &ms, ctx), "cuGraphAddMemsetNode");

  CUdeviceptr out = g_buffer;
  unsigned value = 7;
  void *args[] = {&out, &value};
  g_caller_args = args;
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = prefill;
  p.gridDimX = 2;
  p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 64;
  p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  must(cuGraphAddKernelNode(&k1, graph, &memset, 1, &p), "cuGraphAddKernelNode_v2");

  struct {
    CUdeviceptr ptr;
    unsigned value;
    unsigned pad;
  } packed = {g_buffer, 9, 0};
  size_t packed_size = sizeof packed;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  CUDA_KERNEL_NODE_PARAMS d{};
  d.func = decode;
  d.gridDimX = d.gridDimY = d.gridDimZ = 1;
  d.blockDimX = d.blockDimY = d.blockDimZ = 1;
  d.extra = extra;
  must(cuGraphAddKernelNode(&k2, graph, &k1, 1, &d), "cuGraphAddKernelNode_v2");

  void *sampling_args[] = {&out};
  CUDA_KERNEL_NODE_PARAMS s{};
  s.kern = sampling;
  s.gridDimX = s.gridDimY = s.gridDimZ = 1;
  s.blockDimX = s.blockDimY = s.blockDimZ = 1;
  s.kernelParams = sampling_args;
  must(cuGraphAddKernelNode(&k3, graph, &k2, 1, &s), "cuGraphAddKernelNode_v2 (kern)");

  CUDA_KERNEL_NODE_PARAMS_v1 legacy{};
  legacy.func = prefill;
  legacy.gridDimX = legacy.gridDimY = legacy.gridDimZ = 1;
  legacy.blockDimX = 32;
  legacy.blockDimY = legacy.blockDimZ = 1;
  legacy.kernelParams = args;
  must(legacy_add_kernel_node(&k4, graph, &k3, 1, &legacy), "cuGraphAddKernelNode (legacy)");
  must(cuGraphAddEmptyNode(&last, graph, &k4, 1), "cuGraphAddEmptyNode");
  value = 8;  // the nodes copied 7: this must not show

  // cuGraphGetNodes: count, a short array, a long one.
  size_t count = 0;
  must(cuGraphGetNodes(graph, nullptr, &count), "cuGraphGetNodes(count)");
  std::printf("cuGraphGetNodes(NULL): count=%zu\n", count);
  CUgraphNode nodes[16] = {};
  size_t n = 2;
  must(cuGraphGetNodes(graph, nodes, &n), "cuGraphGetNodes(2)");
  std::printf("cuGraphGetNodes(2 slots): numNodes=%zu\n", n);
  for (CUgraphNode &node : nodes) node = reinterpret_cast<CUgraphNode>(uintptr_t{1});
  n = count + 3;
  must(cuGraphGetNodes(graph, nodes, &n), "cuGraphGetNodes(count + 3)");
  bool tail_null = true;
  for (size_t i = count; i < count + 3; ++i) tail_null = tail_null && nodes[i] == nullptr;
  std::printf("cuGraphGetNodes(%zu slots): numNodes=%zu rest NULL=%s\n", count + 3, n,
              tail_null ? "yes" : "no");
  const CUgraphNode added[] = {first, memset, k1, k2, k3, k4, last};
  bool all_found = count == sizeof added / sizeof added[0];
  for (CUgraphNode a : added) {
    bool found = false;
    for (size_t i = 0; i < n; ++i) found = found || nodes[i] == a;
    all_found = all_found && found;
  }
  std::printf("every added node listed: %s\n", all_found ? "yes" : "no");

  // Each node, in the order added.
  for (size_t i = 0; i < sizeof added / sizeof added[0]; ++i) {
    CUgraphNodeType type{};
    must(cuGraphNodeGetType(added[i], &type), "cuGraphNodeGetType");
    std::printf("node %zu: type=%d", i, static_cast<int>(type));
    CUDA_KERNEL_NODE_PARAMS v2{};
    const CUresult r = cuGraphKernelNodeGetParams(added[i], &v2);
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) {
      std::printf(" cuGraphKernelNodeGetParams_v2=%s\n", err(r));
      continue;
    }
    must(r, "cuGraphKernelNodeGetParams_v2");
    std::printf(" v2: func=%s kern=%s grid=%u,%u,%u block=%u,%u,%u", func_name(v2.func),
                kernel_name(v2.kern), v2.gridDimX, v2.gridDimY, v2.gridDimZ, v2.blockDimX,
                v2.blockDimY, v2.blockDimZ);
    print_args(v2, added[i] == k3 ? 1 : 2);
    CUDA_KERNEL_NODE_PARAMS_v1 v1{};
    must(legacy_get_params(added[i], &v1), "cuGraphKernelNodeGetParams");
    std::printf("; v1: func=%s\n", func_name(v1.func));
  }

  // Invalid arguments.
  const char *name = nullptr;
  std::printf(
      "invalid: cuFuncGetName(NULL, f)=%s cuFuncGetName(&n, NULL)=%s "
      "cuKernelGetName(&n, NULL)=%s cuGraphGetNodes(g, n, NULL)=%s "
      "cuGraphNodeGetType(n, NULL)=%s\n",
      err(cuFuncGetName(nullptr, prefill)), err(cuFuncGetName(&name, nullptr)),
      err(cuKernelGetName(&name, nullptr)), err(cuGraphGetNodes(graph, nodes, nullptr)),
      err(cuGraphNodeGetType(first, nullptr)));

  // Images the JIT rejects.
  char log[256] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *option_values[] = {log, reinterpret_cast<void *>(uintptr_t{sizeof log})};
  CUmodule bad = nullptr;
  const CUresult bad_ptx = cuModuleLoadDataEx(
      &bad, ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry broken( {\n", 2,
      options, option_values);
  std::printf("broken PTX: %s, error log %s\n", err(bad_ptx), log[0] != '\0' ? "written" : "empty");
  std::printf("PTX without .version: %s\n", err(cuModuleLoadData(&bad, ".target sm_80\n")));

  // cuGetProcAddress: versions of the introspection entry points.
  void *fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  CUresult r = cuGetProcAddress("cuFuncGetName", &fn, 12030, 0, &status);
  std::printf("cuGetProcAddress(cuFuncGetName, 12030): %s status=%d\n", err(r), status);
  r = cuGetProcAddress("cuFuncGetName", &fn, 12020, 0, &status);
  std::printf("cuGetProcAddress(cuFuncGetName, 12020): %s status=%d\n", err(r), status);
  r = cuGetProcAddress("cuKernelGetName", &fn, 12030, 0, &status);
  std::printf("cuGetProcAddress(cuKernelGetName, 12030): %s status=%d\n", err(r), status);
  void *v1_fn = nullptr, *v2_fn = nullptr;
  must(cuGetProcAddress("cuGraphKernelNodeGetParams", &v1_fn, 11000, 0, nullptr),
       "cuGetProcAddress(cuGraphKernelNodeGetParams, 11000)");
  must(cuGetProcAddress("cuGraphKernelNodeGetParams", &v2_fn, 12000, 0, nullptr),
       "cuGetProcAddress(cuGraphKernelNodeGetParams, 12000)");
  std::printf("cuGraphKernelNodeGetParams @11000 and @12000 differ: %s\n",
              v1_fn != v2_fn ? "yes" : "no");
  for (const char *sym : {"cuGraphGetNodes", "cuGraphNodeGetType", "cuModuleLoadData",
                          "cuModuleGetFunction", "cuLibraryGetKernel"}) {
    r = cuGetProcAddress(sym, &fn, 12000, 0, &status);
    std::printf("cuGetProcAddress(%s, 12000): %s\n", sym, err(r));
  }
  if (standin) {
    std::printf("stand-in: @11000 is cuGraphKernelNodeGetParams: %s, @12000 is _v2: %s\n",
                v1_fn == dlsym(RTLD_DEFAULT, "cuGraphKernelNodeGetParams") ? "yes" : "no",
                v2_fn == dlsym(RTLD_DEFAULT, "cuGraphKernelNodeGetParams_v2") ? "yes" : "no");
  }

  // Instantiate and run it once.
  CUgraphExec exec = nullptr;
  must(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  must(cuGraphLaunch(exec, nullptr), "cuGraphLaunch");
  must(cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf("instantiated and launched\n");

  must(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  must(cuGraphDestroy(graph), "cuGraphDestroy");
  must(cuModuleUnload(module), "cuModuleUnload");
  must(cuLibraryUnload(library), "cuLibraryUnload");
  if (standin) {
    CUgraphNodeType type{};
    std::printf(
        "stand-in: after unloading and destroying: cuFuncGetName=%s cuKernelGetName=%s "
        "cuGraphNodeGetType=%s\n",
        err(cuFuncGetName(&name, prefill)), err(cuKernelGetName(&name, sampling)),
        err(cuGraphNodeGetType(first, &type)));
  }
  must(cuMemFree(g_buffer), "cuMemFree");
  must(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  return 0;
}
