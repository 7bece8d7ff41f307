/* A library fault_program links (DT_NEEDED) whose ELF destructor makes one last launch, as a
 * library flushing its work at unload does: `fault_program library-destructor-launch` hands it
 * the launch. At exit its destructor runs after the preloaded shim's own (load order): F70. */
#include <stdio.h>

typedef int (*last_flush_launch_fn)(void *exec, void *stream);

static last_flush_launch_fn g_launch;
static void *g_exec;

__attribute__((visibility("default"))) void last_flush_arm(last_flush_launch_fn launch,
                                                           void *exec) {
  g_launch = launch;
  g_exec = exec;
}

__attribute__((destructor)) static void last_flush(void) {
  if (!g_launch) return;
  printf("destructor_launch=%d\n", g_launch(g_exec, NULL));
  fflush(stdout);
}
