/* ferrum-bench-spawn: start-up cost of a program with and without a preloaded library.
 *
 *   ferrum-bench-spawn [--baseline=BASELINE] PRELOAD COUNT WARMUP program [args...]
 *
 * Spawns the program 2 * (WARMUP + COUNT) times with posix_spawn, in pairs: once without and
 * once with LD_PRELOAD=PRELOAD (any LD_PRELOAD of our own environment is removed from both;
 * which of a pair goes first alternates), stdout and stderr to /dev/null, and times each spawn
 * from posix_spawn to waitpid on CLOCK_MONOTONIC. The first WARMUP pairs are discarded.
 * Pairing keeps the two series under the same conditions (page cache, CPU frequency, other
 * load). With --baseline, the first of each pair runs with LD_PRELOAD=BASELINE instead of
 * none: PRELOAD against another library (the shim against an empty one) in the same pairs.
 * Prints ("without": the first of each pair):
 *   median_without_ns=<n>
 *   median_with_ns=<n>
 *   median_pair_ratio=<with/without of each pair, median>
 *   median_pair_diff_ns=<with - without of each pair, median>
 * Exit status 1 if any spawn failed or a child did not exit 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int compare_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}
static int compare_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n values (sorts them). */
static long long median_ll(long long *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_ll);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
static double median_d(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "LD_PRELOAD=<library>", allocated; null when out of memory. */
static char *preload_entry(const char *library) {
  size_t length = strlen(library) + sizeof "LD_PRELOAD=";
  char *entry = malloc(length);
  if (entry) snprintf(entry, length, "LD_PRELOAD=%s", library);
  return entry;
}

static long long spawn_once(char **argv, char **envp, const posix_spawn_file_actions_t *actions) {
  pid_t pid;
  int status = 0;
  long long start = now_ns();
  if (posix_spawn(&pid, argv[0], actions, NULL, argv, envp) != 0) return -1;
  if (waitpid(pid, &status, 0) != pid) return -1;
  long long elapsed = now_ns() - start;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? elapsed : -1;
}

int main(int argc, char **argv) {
  const char *baseline = NULL;
  if (argc > 1 && strncmp(argv[1], "--baseline=", 11) == 0) {
    baseline = argv[1] + 11;
    --argc, ++argv;
  }
  if (argc < 5) {
    fprintf(
        stderr,
        "usage: ferrum-bench-spawn [--baseline=BASELINE] PRELOAD COUNT WARMUP program [args...]\n");
    return 2;
  }
  const char *preload = argv[1];
  int count = atoi(argv[2]), warmup = atoi(argv[3]);
  char **program = argv + 4;
  if (count <= 0 || warmup < 0) return 2;

  /* The two environments: ours without LD_PRELOAD (or with LD_PRELOAD=BASELINE), and the same
   * plus LD_PRELOAD=PRELOAD. */
  int n = 0;
  while (environ[n]) ++n;
  char **without = calloc((size_t)n + 2, sizeof *without);
  char **with = calloc((size_t)n + 2, sizeof *with);
  if (!without || !with) return 1;
  int k = 0;
  for (int i = 0; i < n; ++i)
    if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) without[k] = with[k] = environ[i], ++k;
  with[k] = preload_entry(preload);
  if (baseline) without[k] = preload_entry(baseline);
  if (!with[k] || (baseline && !without[k])) return 1;

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);

  long long *t_without = calloc((size_t)count, sizeof *t_without);
  long long *t_with = calloc((size_t)count, sizeof *t_with);
  double *ratios = calloc((size_t)count, sizeof *ratios);
  long long *diffs = calloc((size_t)count, sizeof *diffs);
  if (!t_without || !t_with || !ratios || !diffs) return 1;
  for (int i = -warmup; i < count; ++i) {
    /* Alternate which of the pair goes first, so neither always follows the other. */
    long long a, b;
    if (i % 2) {
      b = spawn_once(program, with, &actions);
      a = spawn_once(program, without, &actions);
    } else {
      a = spawn_once(program, without, &actions);
      b = spawn_once(program, with, &actions);
    }
    if (a < 0 || b < 0) {
      fprintf(stderr, "ferrum-bench-spawn: %s failed or exited non-zero\n", program[0]);
      return 1;
    }
    if (i >= 0)
      t_without[i] = a, t_with[i] = b, ratios[i] = (double)b / (double)a, diffs[i] = b - a;
  }
  printf("median_without_ns=%lld\n", median_ll(t_without, count));
  printf("median_with_ns=%lld\n", median_ll(t_with, count));
  printf("median_pair_ratio=%.4f\n", median_d(ratios, count));
  printf("median_pair_diff_ns=%lld\n", median_ll(diffs, count));
  return 0;
}
