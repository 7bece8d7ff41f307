// runtime_copies: two libraries, each bringing its own copy of the CUDA runtime (a stand-in
// under two names), loaded RTLD_LOCAL — as two Python extension modules that vendor the runtime
// are. Each library's calls by name must reach its own copy.
//
//   runtime_copies PLUGIN_A PLUGIN_B
//
// 1. A, then B, then A again: each launches a graph 20 times, then once more after destroying
//    it; that error is its runtime's, and its own cudaGetLastError() must return it (a launch
//    that went to the other copy leaves the error there). Prints, per call,
//    `X: failed=F stale_launch=R last_error=E`.
// 2. A thread launches through B (200 launches) while the main thread unloads A and loads it
//    again, three times: B's launches never run inside A's copy as it goes.
// Then the launch harness's closing line, `launches=N failed=F result=R`, where F counts failed
// launches and calls whose error landed in another copy. Exit 0 when F is 0, 3 otherwise, 1 on
// a setup error.
#include <dlfcn.h>
#include <stdio.h>

#include <thread>

namespace {

using CopyCheck = int (*)(int, int *, int *, int *);

int g_launches = 0, g_failed = 0, g_result = 0;

CopyCheck load(const char *path, void **handle) {
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!*handle) return fprintf(stderr, "runtime_copies: %s\n", dlerror()), nullptr;
  return reinterpret_cast<CopyCheck>(dlsym(*handle, "copy_check"));
}

bool check(const char *label, CopyCheck copy_check, int launches) {
  int failed = 0, stale = 0, last = 0;
  if (copy_check(launches, &failed, &stale, &last) != 0) return false;
  printf("%s: failed=%d stale_launch=%d last_error=%d\n", label, failed, stale, last);
  g_launches += launches + 1;
  g_failed += failed + (stale == 0 || last != stale);
  if (last != stale) g_result = last;
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3) return fprintf(stderr, "usage: runtime_copies PLUGIN_A PLUGIN_B\n"), 2;
  void *a = nullptr, *b = nullptr;
  CopyCheck check_a = load(argv[1], &a), check_b = load(argv[2], &b);
  if (!check_a || !check_b) return 1;
  if (!check("A", check_a, 20) || !check("B", check_b, 20) || !check("A", check_a, 20))
    return fprintf(stderr, "runtime_copies: setup failed\n"), 1;
  bool b_ok = true;
  std::thread launcher([&] { b_ok = check("B while A comes and goes", check_b, 200); });
  for (int round = 0; round < 3; ++round) {
    dlclose(a);
    check_a = load(argv[1], &a);
    if (!check_a) return 1;
  }
  launcher.join();
  if (!b_ok) return fprintf(stderr, "runtime_copies: setup failed\n"), 1;
  printf("launches=%d failed=%d result=%d\n", g_launches, g_failed, g_result);
  fflush(stdout);
  return g_failed ? 3 : 0;
}
