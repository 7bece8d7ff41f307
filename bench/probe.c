/* ferrum-bench-probe: a process that never uses CUDA describes itself, so that a run without
 * and a run with LD_PRELOAD=libferrum-replay.so can be compared (bench/run_bench.py): the
 * preload must add no thread, open no file, change no environment variable, and bring no
 * library but itself. Prints, one per line:
 *   threads=<entries of /proc/self/task>
 *   fd=<n> <target>          every open descriptor but the one listing /proc/self/fd
 *   env=<NAME=value>         every environment entry, in order
 *   lib=<path>               every distinct file mapped executable (from /proc/self/maps) */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static int count_entries(const char *path) {
  DIR *dir = opendir(path);
  if (!dir) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(dir));)
    if (e->d_name[0] != '.') ++n;
  closedir(dir);
  return n;
}

int main(void) {
  /* Collect everything first: printing may allocate stdio's buffer, which we do not count. */
  int threads = count_entries("/proc/self/task");
  printf("threads=%d\n", threads);

  DIR *fds = opendir("/proc/self/fd");
  if (fds) {
    int own = dirfd(fds);
    for (struct dirent *e; (e = readdir(fds));) {
      if (e->d_name[0] == '.' || atoi(e->d_name) == own) continue;
      char link[300], target[4096];
      snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
      ssize_t n = readlink(link, target, sizeof target - 1);
      target[n > 0 ? n : 0] = '\0';
      /* stdio's own descriptors point at whatever the parent gave: print them as such. */
      printf("fd=%s %s\n", e->d_name, atoi(e->d_name) <= 2 ? "(inherited)" : target);
    }
    closedir(fds);
  }

  for (char **e = environ; *e; ++e) printf("env=%s\n", *e);

  FILE *maps = fopen("/proc/self/maps", "r");
  if (maps) {
    char line[4608], last[4096] = "";
    while (fgets(line, sizeof line, maps)) {
      char perms[8], path[4096] = "";
      if (sscanf(line, "%*s %7s %*s %*s %*s %4095[^\n]", perms, path) < 1) continue;
      if (perms[2] != 'x' || path[0] != '/' || strcmp(path, last) == 0) continue;
      snprintf(last, sizeof last, "%s", path);
      printf("lib=%s\n", path);
    }
    fclose(maps);
  }
  return 0;
}
