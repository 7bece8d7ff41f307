// Loads a test program built as a plugin (a shared module whose entry point is plugin_main, see
// launch_runtime.cpp and launch_driver.cpp) and runs it — as a Python extension module or
// ctypes.CDLL is loaded: dlopen(RTLD_LOCAL), so the CUDA runtime or driver it links comes in as
// its dependency, in no scope but its own, out of reach of dlsym(RTLD_NEXT).
//
//   plugin_loader local|global PLUGIN [PROGRAM ARGS...]
//
// Exit status: the plugin's (its output is the launch harness's), 1 when it cannot be loaded.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "local") != 0 && strcmp(argv[1], "global") != 0)) {
    fprintf(stderr, "usage: plugin_loader local|global PLUGIN [ARGS...]\n");
    return 2;
  }
  const int scope = strcmp(argv[1], "local") == 0 ? RTLD_LOCAL : RTLD_GLOBAL;
  void *plugin = dlopen(argv[2], RTLD_NOW | scope);
  if (!plugin) {
    fprintf(stderr, "plugin_loader: %s\n", dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<int (*)(int, char **)>(dlsym(plugin, "plugin_main"));
  if (!entry) {
    fprintf(stderr, "plugin_loader: no plugin_main in %s\n", argv[2]);
    return 1;
  }
  return entry(argc - 2, argv + 2);
}
