/* The program's own fast interval timer, preloaded beside the shim (test_output_safety.py
 * output_lock_held_under_fast_timer): from load to exit, SIGALRM every FERRUM_TEST_TIMER_US
 * microseconds (default 20) to a handler installed without SA_RESTART, as a 20 kHz control loop
 * or a wall-clock sampling profiler does. Every sleep of ours is interrupted that often: one
 * restarted with what remained never ended (review DD-4). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static volatile sig_atomic_t g_ticks;

static void on_alarm(int signo) {
  (void)signo;
  g_ticks = g_ticks + 1;
}

__attribute__((constructor)) static void start_timer(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_alarm;  // no SA_RESTART: interrupted calls fail with EINTR
  sigaction(SIGALRM, &action, NULL);
  const char *given = getenv("FERRUM_TEST_TIMER_US");
  long us = given ? atol(given) : 20;
  if (us <= 0 || us >= 1000000) us = 20;
  struct itimerval every = {{0, us}, {0, us}};
  setitimer(ITIMER_REAL, &every, NULL);
}
