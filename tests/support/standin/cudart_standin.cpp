// Stand-in for NVIDIA's CUDA runtime, built twice from this file: as the shared libcudart.so.13
// (symbols versioned `libcudart.so.13` and linked -Bsymbolic, as the real one) and as a static
// library with hidden visibility that a program links in, like the libcudart_static.a nvcc
// links by default (then cudaGraphLaunch is a local symbol of the executable that nothing can
// interpose).
//
// What is faithful is how it reaches the driver (docs/architecture.md, "Following a launch"): it
// never calls a driver function by name and never links libcuda. On first use it does, in the order
// the real CUDA 13.0 runtime does,
//   dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); dlsym(handle, "cuGetProcAddress_v2");
//   a probe with the empty name at version 0; cuInit@2000 through that pointer; the
//   self-query "cuGetProcAddress" at 11030 and at 12000,
// replaces its own lookup pointer with the 12000 answer, and fetches the rest of its table
// through that pointer: cuGraphLaunch@10000 with flags 0 and with flags 2
// (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), cuGraphInstantiate@10000 and @11000,
// cuGraphInstantiateWithFlags@11040, cuGraphInstantiateWithParams@12000 (flags 0 and 2),
// cuGraphUpload@11010 (0 and 2), cuGraphExecDestroy, cuStreamSynchronize (0 and 2), and the
// init, device, primary context, stream, memory and graph-building functions it needs.
// cudaGetDriverEntryPoint[ByVersion] answer through the same replaced pointer.
// Stream routing: cudaGraphLaunch(exec, cudaStreamPerThread) uses the per-thread (flags 2)
// driver entry, any other stream (0, cudaStreamLegacy, created) the legacy one;
// cudaGraphLaunch_ptsz (what code compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM imports)
// always uses the per-thread entry. Likewise cudaGraphUpload, cudaStreamSynchronize and
// cudaGraphInstantiateWithParams.
//
// What is simplified: one device; the primary context of device 0 is retained at
// initialisation and made current on each thread at its first runtime call; CUresult codes map
// to cudaError_t as SUCCESS->cudaSuccess, INVALID_VALUE->cudaErrorInvalidValue,
// OUT_OF_MEMORY->cudaErrorMemoryAllocation, NOT_INITIALIZED->cudaErrorInitializationError,
// INVALID_DEVICE->cudaErrorInvalidDevice, INVALID_CONTEXT->cudaErrorDeviceUninitialized,
// INVALID_HANDLE->cudaErrorInvalidResourceHandle, NOT_FOUND->cudaErrorSymbolNotFound,
// ILLEGAL_ADDRESS->cudaErrorIllegalAddress, LAUNCH_FAILED->cudaErrorLaunchFailure,
// NOT_SUPPORTED->cudaErrorNotSupported, anything else->cudaErrorUnknown; no sticky errors
// (cudaGetLastError returns and clears the calling thread's last error). If libcuda.so.1
// cannot be loaded, lacks cuGetProcAddress_v2, reports a version below 13000 or lacks an entry
// point the runtime needs, every call returns cudaErrorInsufficientDriver.
//
// Environment: FERRUM_STANDIN_TRACE=1 prints the runtime's driver-loading steps to stderr
// (`ferrum-standin-cudart: ...`).

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

struct Driver {
  cudaError_t status = cudaErrorInsufficientDriver;
  int version = 0;
  CUcontext primary = nullptr;
  PFN_cuGetProcAddress_v12000 getProcAddress = nullptr;  // the replaced lookup pointer

  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDriverGetVersion_v2020 driverGetVersion = nullptr;
  PFN_cuDeviceGet_v2000 deviceGet = nullptr;
  PFN_cuDeviceGetCount_v2000 deviceGetCount = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 primaryCtxRetain = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctxSetCurrent = nullptr;
  PFN_cuCtxSynchronize_v2000 ctxSynchronize = nullptr;
  PFN_cuStreamCreate_v2000 streamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 streamDestroy = nullptr;
  PFN_cuStreamSynchronize_v2000 streamSynchronize = nullptr;
  PFN_cuStreamSynchronize_v7000_ptsz streamSynchronizePtsz = nullptr;
  PFN_cuMemAlloc_v3020 memAlloc = nullptr;
  PFN_cuMemFree_v3020 memFree = nullptr;
  PFN_cuGraphCreate_v10000 graphCreate = nullptr;
  PFN_cuGraphDestroy_v10000 graphDestroy = nullptr;
  PFN_cuGraphAddEmptyNode_v10000 graphAddEmptyNode = nullptr;
  PFN_cuGraphAddMemsetNode_v10000 graphAddMemsetNode = nullptr;
  PFN_cuGraphAddKernelNode_v12000 graphAddKernelNode = nullptr;
  PFN_cuGraphInstantiate_v10000 graphInstantiateV10 = nullptr;  // fetched as the real runtime
  PFN_cuGraphInstantiate_v11000 graphInstantiateV11 = nullptr;  // does; not called
  PFN_cuGraphInstantiateWithFlags_v11040 graphInstantiateWithFlags = nullptr;
  PFN_cuGraphInstantiateWithParams_v12000 graphInstantiateWithParams = nullptr;
  PFN_cuGraphInstantiateWithParams_v12000_ptsz graphInstantiateWithParamsPtsz = nullptr;
  PFN_cuGraphUpload_v11010 graphUpload = nullptr;
  PFN_cuGraphUpload_v11010_ptsz graphUploadPtsz = nullptr;
  PFN_cuGraphLaunch_v10000 graphLaunch = nullptr;
  PFN_cuGraphLaunch_v10000_ptsz graphLaunchPtsz = nullptr;
  PFN_cuGraphExecDestroy_v10000 graphExecDestroy = nullptr;
};

bool trace_enabled() {
  static const bool on = [] {
    const char *v = std::getenv("FERRUM_STANDIN_TRACE");
    return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

#define TRACE(...)                                                 \
  do {                                                             \
    if (trace_enabled()) {                                         \
      std::fprintf(stderr, "ferrum-standin-cudart: " __VA_ARGS__); \
    }                                                              \
  } while (0)

cudaError_t to_cuda_error(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE:
      return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED:
      return cudaErrorInitializationError;
    case CUDA_ERROR_INVALID_DEVICE:
      return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT:
      return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE:
      return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND:
      return cudaErrorSymbolNotFound;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      return cudaErrorIllegalAddress;
    case CUDA_ERROR_LAUNCH_FAILED:
      return cudaErrorLaunchFailure;
    case CUDA_ERROR_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    default:
      return cudaErrorUnknown;
  }
}

// Fetches one entry point through the (replaced) lookup pointer; false if the driver has none.
template <class Fn>
bool fetch(const Driver &d, Fn &out, const char *name, int version, cuuint64_t flags) {
  void *p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = d.getProcAddress(name, &p, version, flags, &status);
  TRACE("fetch %s@%d flags=%llu -> result=%d status=%d %p\n", name, version,
        static_cast<unsigned long long>(flags), static_cast<int>(r), static_cast<int>(status), p);
  out = reinterpret_cast<Fn>(p);
  return r == CUDA_SUCCESS && p != nullptr;
}

Driver load_driver() {
  Driver d;
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    TRACE("dlopen(libcuda.so.1) failed: %s\n", dlerror());
    return d;
  }
  d.getProcAddress =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  TRACE("dlsym(cuGetProcAddress_v2) = %p\n", reinterpret_cast<void *>(d.getProcAddress));
  if (d.getProcAddress == nullptr) return d;

  // The order the real CUDA 13.0 libcudart.so.13 uses (observed with this stand-in driver's
  // FERRUM_STANDIN_TRACE): a probe with the empty name at version 0 (the driver must answer
  // NOT_FOUND), cuInit@2000 through the dlsym'd pointer, the self-query at the two ABI versions
  // of cuGetProcAddress; the 12000 answer becomes the lookup pointer for everything else.
  void *p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult r = d.getProcAddress("", &p, 0, 0, &status);
  TRACE("probe \"\" -> result=%d status=%d\n", static_cast<int>(r), static_cast<int>(status));
  if (!fetch(d, d.init, "cuInit", 2000, 0)) return d;
  void *self11030 = nullptr;
  r = d.getProcAddress("cuGetProcAddress", &self11030, 11030, 0, &status);
  TRACE("self-query @11030 -> result=%d %p\n", static_cast<int>(r), self11030);
  void *self12000 = nullptr;
  r = d.getProcAddress("cuGetProcAddress", &self12000, 12000, 0, &status);
  TRACE("self-query @12000 -> result=%d %p\n", static_cast<int>(r), self12000);
  if (r != CUDA_SUCCESS || self12000 == nullptr) return d;
  d.getProcAddress = reinterpret_cast<PFN_cuGetProcAddress_v12000>(self12000);

  constexpr cuuint64_t kPtsz = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  bool ok = true;
  ok &= fetch(d, d.driverGetVersion, "cuDriverGetVersion", 2020, 0);
  ok &= fetch(d, d.deviceGet, "cuDeviceGet", 2000, 0);
  ok &= fetch(d, d.deviceGetCount, "cuDeviceGetCount", 2000, 0);
  ok &= fetch(d, d.primaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0);
  ok &= fetch(d, d.ctxSetCurrent, "cuCtxSetCurrent", 4000, 0);
  ok &= fetch(d, d.ctxSynchronize, "cuCtxSynchronize", 2000, 0);
  ok &= fetch(d, d.streamCreate, "cuStreamCreate", 2000, 0);
  ok &= fetch(d, d.streamDestroy, "cuStreamDestroy", 4000, 0);
  ok &= fetch(d, d.streamSynchronize, "cuStreamSynchronize", 2000, 0);
  ok &= fetch(d, d.streamSynchronizePtsz, "cuStreamSynchronize", 7000, kPtsz);
  ok &= fetch(d, d.memAlloc, "cuMemAlloc", 3020, 0);
  ok &= fetch(d, d.memFree, "cuMemFree", 3020, 0);
  ok &= fetch(d, d.graphCreate, "cuGraphCreate", 10000, 0);
  ok &= fetch(d, d.graphDestroy, "cuGraphDestroy", 10000, 0);
  ok &= fetch(d, d.graphAddEmptyNode, "cuGraphAddEmptyNode", 10000, 0);
  ok &= fetch(d, d.graphAddMemsetNode, "cuGraphAddMemsetNode", 10000, 0);
  ok &= fetch(d, d.graphAddKernelNode, "cuGraphAddKernelNode", 12000, 0);
  ok &= fetch(d, d.graphInstantiateV10, "cuGraphInstantiate", 10000, 0);
  ok &= fetch(d, d.graphInstantiateV11, "cuGraphInstantiate", 11000, 0);
  ok &= fetch(d, d.graphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, 0);
  ok &= fetch(d, d.graphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, 0);
  ok &= fetch(d, d.graphInstantiateWithParamsPtsz, "cuGraphInstantiateWithParams", 12000, kPtsz);
  ok &= fetch(d, d.graphUpload, "cuGraphUpload", 11010, 0);
  ok &= fetch(d, d.graphUploadPtsz, "cuGraphUpload", 11010, kPtsz);
  ok &= fetch(d, d.graphLaunch, "cuGraphLaunch", 10000, 0);
  ok &= fetch(d, d.graphLaunchPtsz, "cuGraphLaunch", 10000, kPtsz);
  ok &= fetch(d, d.graphExecDestroy, "cuGraphExecDestroy", 10000, 0);
  if (!ok) return d;

  if (d.driverGetVersion(&d.version) != CUDA_SUCCESS || d.version < CUDART_VERSION) {
    TRACE("driver version %d < %d\n", d.version, CUDART_VERSION);
    return d;
  }
  r = d.init(0);
  if (r != CUDA_SUCCESS) {
    d.status = to_cuda_error(r);
    return d;
  }
  CUdevice dev = 0;
  r = d.deviceGet(&dev, 0);
  if (r == CUDA_SUCCESS) r = d.primaryCtxRetain(&d.primary, dev);
  d.status = to_cuda_error(r);
  return d;
}

const Driver &driver() {
  static const Driver d = load_driver();
  return d;
}

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local bool t_context_current = false;

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

cudaError_t record(CUresult r) {
  return record(to_cuda_error(r));
}

// The driver, initialised, with the primary context current on this thread; nullptr if not.
const Driver *ready(cudaError_t *error) {
  const Driver &d = driver();
  if (d.status != cudaSuccess) {
    *error = record(d.status);
    return nullptr;
  }
  if (!t_context_current) {
    const CUresult r = d.ctxSetCurrent(d.primary);
    if (r != CUDA_SUCCESS) {
      *error = record(r);
      return nullptr;
    }
    t_context_current = true;
  }
  return &d;
}

#define READY_OR_RETURN(d)                \
  cudaError_t ready_error_ = cudaSuccess; \
  const Driver *d = ready(&ready_error_); \
  if (d == nullptr) return ready_error_

struct ErrorText {
  cudaError_t code;
  const char *name;
  const char *text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText *find_error(cudaError_t e) {
  for (const ErrorText &t : kErrors) {
    if (t.code == e) return &t;
  }
  return nullptr;
}

cudaError_t graph_launch(const Driver &d, cudaGraphExec_t exec, cudaStream_t stream, bool ptsz) {
  return record(ptsz ? d.graphLaunchPtsz(exec, stream) : d.graphLaunch(exec, stream));
}

cudaError_t graph_upload(const Driver &d, cudaGraphExec_t exec, cudaStream_t stream, bool ptsz) {
  return record(ptsz ? d.graphUploadPtsz(exec, stream) : d.graphUpload(exec, stream));
}

cudaError_t stream_synchronize(const Driver &d, cudaStream_t stream, bool ptsz) {
  return record(ptsz ? d.streamSynchronizePtsz(stream) : d.streamSynchronize(stream));
}

cudaError_t instantiate_with_params(const Driver &d, cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                    cudaGraphInstantiateParams *params, bool ptsz) {
  if (params == nullptr) return record(cudaErrorInvalidValue);
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  p.flags = params->flags;
  p.hUploadStream = params->uploadStream;
  const CUresult r = ptsz ? d.graphInstantiateWithParamsPtsz(pGraphExec, graph, &p)
                          : d.graphInstantiateWithParams(pGraphExec, graph, &p);
  params->errNode_out = p.hErrNode_out;
  params->result_out = static_cast<cudaGraphInstantiateResult>(p.result_out);
  return record(r);
}

cudaError_t entry_point(const char *symbol, void **funcPtr, int cudaVersion,
                        unsigned long long flags, cudaDriverEntryPointQueryResult *driverStatus) {
  if (symbol == nullptr || funcPtr == nullptr) return record(cudaErrorInvalidValue);
  const Driver &d = driver();
  if (d.status != cudaSuccess) return record(d.status);
  if (cudaVersion > d.version) return record(cudaErrorInvalidValue);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = d.getProcAddress(symbol, funcPtr, cudaVersion, flags, &status);
  if (driverStatus != nullptr) *driverStatus = static_cast<cudaDriverEntryPointQueryResult>(status);
  if (r == CUDA_ERROR_NOT_FOUND) {
    *funcPtr = nullptr;
    return cudaSuccess;  // as documented: success, NULL pointer, the reason in driverStatus
  }
  return record(r);
}

unsigned long long per_thread_default(unsigned long long flags) {
  if ((flags & (cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream)) == 0) {
    flags |= cudaEnablePerThreadDefaultStream;
  }
  return flags;
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion) {
  if (driverVersion == nullptr) return record(cudaErrorInvalidValue);
  const Driver &d = driver();
  *driverVersion = d.version;  // 0 when no driver could be loaded, as documented
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion) {
  if (runtimeVersion == nullptr) return record(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count) {
  if (count == nullptr) return record(cudaErrorInvalidValue);
  READY_OR_RETURN(d);
  return record(d->deviceGetCount(count));
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  READY_OR_RETURN(d);
  int count = 0;
  const CUresult r = d->deviceGetCount(&count);
  if (r != CUDA_SUCCESS) return record(r);
  return device >= 0 && device < count ? cudaSuccess : record(cudaErrorInvalidDevice);
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  READY_OR_RETURN(d);
  return record(d->ctxSynchronize());
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream) {
  READY_OR_RETURN(d);
  return record(d->streamCreate(pStream, CU_STREAM_DEFAULT));
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  READY_OR_RETURN(d);
  return record(d->streamDestroy(stream));
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  READY_OR_RETURN(d);
  return stream_synchronize(*d, stream, stream == cudaStreamPerThread);
}

cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  READY_OR_RETURN(d);
  return stream_synchronize(*d, stream, true);
}

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size) {
  if (devPtr == nullptr) return record(cudaErrorInvalidValue);
  READY_OR_RETURN(d);
  CUdeviceptr p = 0;
  const CUresult r = d->memAlloc(&p, size);
  *devPtr = r == CUDA_SUCCESS ? reinterpret_cast<void *>(static_cast<uintptr_t>(p)) : nullptr;
  return record(r);
}

cudaError_t CUDARTAPI cudaFree(void *devPtr) {
  READY_OR_RETURN(d);
  if (devPtr == nullptr) return cudaSuccess;
  return record(d->memFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(devPtr))));
}

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
  READY_OR_RETURN(d);
  return record(d->graphCreate(pGraph, flags));
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  READY_OR_RETURN(d);
  return record(d->graphDestroy(graph));
}

cudaError_t CUDARTAPI cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                            const cudaGraphNode_t *pDependencies,
                                            size_t numDependencies) {
  READY_OR_RETURN(d);
  return record(d->graphAddEmptyNode(pGraphNode, graph, pDependencies, numDependencies));
}

cudaError_t CUDARTAPI cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t *pDependencies,
                                             size_t numDependencies,
                                             const struct cudaMemsetParams *pMemsetParams) {
  if (pMemsetParams == nullptr) return record(cudaErrorInvalidValue);
  READY_OR_RETURN(d);
  CUDA_MEMSET_NODE_PARAMS p{};
  p.dst = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pMemsetParams->dst));
  p.pitch = pMemsetParams->pitch;
  p.value = pMemsetParams->value;
  p.elementSize = pMemsetParams->elementSize;
  p.width = pMemsetParams->width;
  p.height = pMemsetParams->height;
  return record(
      d->graphAddMemsetNode(pGraphNode, graph, pDependencies, numDependencies, &p, d->primary));
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags) {
  READY_OR_RETURN(d);
  return record(d->graphInstantiateWithFlags(pGraphExec, graph, flags));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags) {
  READY_OR_RETURN(d);
  return record(d->graphInstantiateWithFlags(pGraphExec, graph, flags));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithParams(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *instantiateParams) {
  READY_OR_RETURN(d);
  return instantiate_with_params(*d, pGraphExec, graph, instantiateParams, false);
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithParams_ptsz(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *instantiateParams) {
  READY_OR_RETURN(d);
  return instantiate_with_params(*d, pGraphExec, graph, instantiateParams, true);
}

cudaError_t CUDARTAPI cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  READY_OR_RETURN(d);
  return graph_upload(*d, graphExec, stream, stream == cudaStreamPerThread);
}

cudaError_t CUDARTAPI cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  READY_OR_RETURN(d);
  return graph_upload(*d, graphExec, stream, true);
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  READY_OR_RETURN(d);
  return graph_launch(*d, graphExec, stream, stream == cudaStreamPerThread);
}

cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  READY_OR_RETURN(d);
  return graph_launch(*d, graphExec, stream, true);
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  READY_OR_RETURN(d);
  return record(d->graphExecDestroy(graphExec));
}

const char *CUDARTAPI cudaGetErrorName(cudaError_t error) {
  const ErrorText *t = find_error(error);
  return t != nullptr ? t->name : "unrecognized error code";
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error) {
  const ErrorText *t = find_error(error);
  return t != nullptr ? t->text : "unrecognized error code";
}

cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                              unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *driverStatus) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

cudaError_t CUDARTAPI
cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                             enum cudaDriverEntryPointQueryResult *driverStatus) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, per_thread_default(flags), driverStatus);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
  return entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
  return entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), per_thread_default(flags),
                     driverStatus);
}

}  // extern "C"
