// probe_cuda_names: a process that never loads CUDA but asks whether it is there, the way
// Python's ctypes.CDLL(None).cuGraphLaunch or a library's "is CUDA loaded?" check does: it
// looks each name up through a handle — the main program's (dlopen(NULL)) and the shim's own
// (dlopen of SHIM, which is the preloaded shim when preloaded, and loads it RTLD_LOCAL when
// not) — with dlsym and dlvsym, and compares each answer with the same lookup through
// RTLD_DEFAULT.
//
//   probe_cuda_names SHIM NAME...
//
// Prints one line per probe, `HANDLE ROUTE NAME: ANSWER [= RTLD_DEFAULT]` (ANSWER: `null`, or
// the answering library's file name and the symbol's name), then, for the libraries a started
// shim would bring in, `mapped LIBRARY: yes|no` (from /proc/self/maps). Exit status 0; 1 on a
// setup error. Links nothing but the C library (and libdl).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

namespace {

const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

// `by_default`: the same lookup through RTLD_DEFAULT, which the shim never sees.
void print_answer(const char *handle_name, const char *route, const char *name, void *found,
                  void *by_default) {
  Dl_info info{};
  if (!found) {
    printf("%s %s %s: null", handle_name, route, name);
  } else if (dladdr(found, &info) && info.dli_fname) {
    printf("%s %s %s: %s %s", handle_name, route, name, base_name(info.dli_fname),
           info.dli_sname ? info.dli_sname : "?");
  } else {
    printf("%s %s %s: unknown", handle_name, route, name);
  }
  printf("%s\n", found == by_default ? " = RTLD_DEFAULT" : "");
}

// Whether a file whose name starts with `prefix` (a library's base name, up to its version)
// is mapped.
bool mapped(const char *prefix) {
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, maps)) {
    const char *path = strchr(line, '/');
    if (!path) continue;
    line[strcspn(line, "\n")] = '\0';
    found = strncmp(base_name(path), prefix, strlen(prefix)) == 0;
  }
  fclose(maps);
  return found;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: probe_cuda_names SHIM NAME...\n");
    return 1;
  }
  void *program = dlopen(nullptr, RTLD_NOW);
  void *shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!program || !shim) {
    fprintf(stderr, "probe_cuda_names: dlopen: %s\n", dlerror());
    return 1;
  }
  const struct {
    const char *name;
    void *handle;
  } handles[] = {{"program", program}, {"shim", shim}};
  for (int i = 2; i < argc; ++i) {
    for (const auto &handle : handles) {
      print_answer(handle.name, "dlsym", argv[i], dlsym(handle.handle, argv[i]),
                   dlsym(RTLD_DEFAULT, argv[i]));
      // The shim's exports carry no version, and glibc's dlvsym finds only the version asked
      // for: null, and the route must stay as inert.
      print_answer(handle.name, "dlvsym", argv[i], dlvsym(handle.handle, argv[i], "PROBE_1.0"),
                   dlvsym(RTLD_DEFAULT, argv[i], "PROBE_1.0"));
    }
  }
  const char *libraries[] = {"libferrum-replay-last.so", "libferrum-replay-recorder.so",
                             "libcuda.so", "libcudart.so"};
  for (const char *library : libraries)
    printf("mapped %s: %s\n", library, mapped(library) ? "yes" : "no");
  return 0;
}
