// by_name_lookup_instances: a program linked to the driver (libcuda.so.1, its own binding) that
// also holds a second instance of it, as a component opening the CUDA forward-compatibility
// driver by path does, or a dlmopen sandbox; the second instance's cuGetProcAddress_v2 and
// cuGetProcAddress are looked up on its handle (and used once), then the program calls both
// lookups BY NAME for cuDeviceGet and calls the answers. Without the shim, the calls by name
// reach the linked driver, initialised by the program's own cuInit; the second instance is
// never initialised, so an answer from it says CUDA_ERROR_NOT_INITIALIZED (F158).
//
//   by_name_lookup_instances copy PATH    the second instance: dlopen(PATH, RTLD_LOCAL), PATH a
//                                         copy of the driver at another path
//   by_name_lookup_instances dlmopen      the second instance: dlmopen(LM_ID_NEWLM,
//                                         "libcuda.so.1")
//
// Prints one line per lookup: `by name LOOKUP: result=R from=linked|other cuDeviceGet=D`, and
// exits 0 when both answers came from the linked driver and worked, 3 otherwise, 1 on a setup
// error.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

namespace {

void *base_of(const void *function) {
  Dl_info info{};
  return dladdr(function, &info) ? info.dli_fbase : nullptr;
}

// One by-name lookup's answer for cuDeviceGet, called; true when it is the linked driver's and
// works.
bool report(const char *lookup, CUresult result, void *answer) {
  const bool linked = answer && base_of(answer) == base_of(reinterpret_cast<void *>(&cuInit));
  CUdevice device = 0;
  const CUresult called =
      answer ? reinterpret_cast<PFN_cuDeviceGet_v2000>(answer)(&device, 0) : CUDA_ERROR_NOT_FOUND;
  printf("by name %s: result=%d from=%s cuDeviceGet=%d\n", lookup, result,
         linked ? "linked" : "other", called);
  return result == CUDA_SUCCESS && linked && called == CUDA_SUCCESS;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "copy") == 0 && argc != 3) ||
      (strcmp(argv[1], "copy") != 0 && strcmp(argv[1], "dlmopen") != 0)) {
    fprintf(stderr, "usage: by_name_lookup_instances copy PATH | dlmopen\n");
    return 2;
  }
  if (cuInit(0) != CUDA_SUCCESS) return fprintf(stderr, "cuInit failed\n"), 1;
  void *second = strcmp(argv[1], "copy") == 0
                     ? dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)
                     : dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!second) return fprintf(stderr, "by_name_lookup_instances: %s\n", dlerror()), 1;
  // The second instance's lookups, met first and used once (a plugin's own driver, say).
  auto theirs_v2 =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(second, "cuGetProcAddress_v2"));
  auto theirs = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(second, "cuGetProcAddress"));
  if (!theirs_v2 || !theirs) return fprintf(stderr, "by_name_lookup_instances: no lookup\n"), 1;
  void *answer = nullptr;
  (void)theirs_v2("cuDeviceGet", &answer, 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);
  (void)theirs("cuDeviceGet", &answer, 12000, CU_GET_PROC_ADDRESS_DEFAULT);
  // The program's own, by name: the linked driver's.
  answer = nullptr;
  CUdriverProcAddressQueryResult status{};
  const CUresult v2 =
      cuGetProcAddress_v2("cuDeviceGet", &answer, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  bool ok = report("cuGetProcAddress_v2", v2, answer);
  answer = nullptr;
  using Legacy = CUresult (*)(const char *, void **, int, cuuint64_t);
  // The 4-argument export by name (cuda.h maps the name to _v2 from CUDA 12 on).
  auto legacy = reinterpret_cast<Legacy>(dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
  const CUresult v1 = legacy ? legacy("cuDeviceGet", &answer, 12000, CU_GET_PROC_ADDRESS_DEFAULT)
                             : CUDA_ERROR_NOT_FOUND;
  ok = report("cuGetProcAddress", v1, answer) && ok;
  fflush(stdout);
  return ok ? 0 : 3;
}
