// Loads a test program built as a plugin (a shared module whose entry point is plugin_main, see
// launch_runtime.cpp and launch_driver.cpp) and runs it — as a Python extension module or
// ctypes.CDLL is loaded: dlopen(RTLD_LOCAL), so the CUDA runtime or driver it links comes in as
// its dependency, in no scope but its own, out of reach of dlsym(RTLD_NEXT).
//
//   plugin_loader local|global PLUGIN [PROGRAM ARGS...]
//
// PLUGIN_LOADER_FIRST=PATH (or global:PATH): dlopen PATH first, RTLD_LOCAL (RTLD_GLOBAL): a
// program that loads ferrum-replay itself for its naming API, from another path than the
// preloaded one, or instead of preloading it. Several, separated by ';', are loaded in turn.
//
// Exit status: the plugin's (its output is the launch harness's), 1 when it cannot be loaded.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "local") != 0 && strcmp(argv[1], "global") != 0)) {
    fprintf(stderr, "usage: plugin_loader local|global PLUGIN [ARGS...]\n");
    return 2;
  }
  if (const char *list = getenv("PLUGIN_LOADER_FIRST")) {
    char paths[4096];
    snprintf(paths, sizeof paths, "%s", list);
    char *rest = paths;
    for (char *first = strtok_r(paths, ";", &rest); first; first = strtok_r(nullptr, ";", &rest)) {
      const bool global = strncmp(first, "global:", 7) == 0;
      if (!dlopen(global ? first + 7 : first, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL))) {
        fprintf(stderr, "plugin_loader: %s\n", dlerror());
        return 1;
      }
    }
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
