/* A launcher written in C, whose process has no unwinder (libgcc_s.so.1) loaded, that forks
 * while another of its threads walks the loaded objects (dl_iterate_phdr holds the loader's
 * write lock for the walk; fork() does not reset it). The parent loads the driver and looks its
 * functions up (the shim starts there) but instantiates nothing; each child instantiates a
 * graph (the shim's first call-site walk in that process) and launches it once, then _exits.
 * The parent waits for each at most 2 s, then kills it.
 *
 *   fork_first_walk N      prints forks=N hung=H failed=F unwinder_loaded=0|1 (in the parent,
 *                          after the forks: whether anything loaded libgcc_s.so.1 there)
 *
 * Run with LD_LIBRARY_PATH naming the runtime-free driver stand-in
 * (tests/support/standin/runtime_free). C, not C++: a C++ program has the unwinder loaded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/c_driver.h"

static volatile int g_stop;

static int walk_slowly(struct dl_phdr_info *info, size_t size, void *data) {
  (void)info;
  (void)size;
  (void)data;
  usleep(200); /* the walk, and the lock it holds, lasts a while */
  return 0;
}

static void *walker(void *unused) {
  (void)unused;
  while (!g_stop) dl_iterate_phdr(walk_slowly, NULL);
  return NULL;
}

int main(int argc, char **argv) {
  const long n = argc > 1 ? atol(argv[1]) : 20;
  const struct c_driver d = c_driver_set_up();
  pthread_t thread;
  if (pthread_create(&thread, NULL, walker, NULL) != 0) return 1;
  usleep(20000);
  long hung = 0, failed = 0;
  for (long i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      CUgraphExec exec;
      d.ctx_set_current(d.context);
      _exit(d.instantiate(&exec, d.graph, 0) || d.launch(exec, NULL) ? 3 : 0);
    }
    int status = -1;
    for (int waited = 0; waited < 2000; ++waited) {
      int raw;
      if (waitpid(pid, &raw, WNOHANG) == pid) {
        status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        break;
      }
      usleep(1000);
    }
    if (status < 0) {
      ++hung;
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    } else if (status != 0) {
      ++failed;
    }
  }
  g_stop = 1;
  pthread_join(thread, NULL);
  printf("forks=%ld hung=%ld failed=%ld unwinder_loaded=%d\n", n, hung, failed,
         dlopen("libgcc_s.so.1", RTLD_LAZY | RTLD_NOLOAD) != NULL);
  return 0;
}
