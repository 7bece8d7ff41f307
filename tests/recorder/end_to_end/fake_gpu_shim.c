/* A stand-in for the shim's GPU-time hand-off (include/ferrum_replay/ferrum_replay.h), preloaded
 * before an nvtx_client run so that the recorder's side is tested end to end without the shim.
 *
 *   FAKE_GPU_SHIM=off           set_gpu_sink and gpu_flush answer -ENOTSUP (timing switched off)
 *   FAKE_GPU_SHIM=on            both work; the flush delivers FAKE_GPU_REPLAYS:
 *   FAKE_GPU_REPLAYS=NAME=N[:US],...   N replays of NAME on device 0, stream 0x5000, each US
 *                               microseconds long (default 2), back to back from registration; the
 *                               status reports 1 in flight, 2 not timed, 250 ns alignment error.
 *   FAKE_GPU_START_GRID_NS=G    the replays run end to end instead, and each start (its length
 *                               kept) is handed over rounded to a multiple of G ns, with an
 *                               alignment error of 250 + G/2: what an engine reading float
 *                               offsets from a reference minutes old delivered (F138).
 * The sink is called from the flush (the exiting thread) and, for the first replay only, from a
 * thread of this library at registration (a shim thread delivering while the program runs). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferrum_replay/ferrum_replay.h"

static ferrum_replay_gpu_sink_fn g_sink;
static void *g_context;
static uint64_t g_delivered;
static uint64_t g_registered_ns; /* after the recorder's origin: every replay starts later */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static int enabled(void) {
  const char *mode = getenv("FAKE_GPU_SHIM");
  return mode && strcmp(mode, "on") == 0;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *early_delivery(void *unused) {
  (void)unused;
  ferrum_replay_gpu_replay r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  r.device = 1;
  r.stream = 0x6000;
  r.name = "early";
  r.replay = 1;
  r.start_ns = now_ns();
  r.end_ns = r.start_ns + 500;
  pthread_mutex_lock(&g_mu);
  if (g_sink) g_sink(&r, 1, g_context);
  ++g_delivered;
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

/* As the shim does: a tool hands its sink only to an object that says it is the shim
 * (common/shim_identity.hpp). */
__attribute__((visibility("default"))) const char *ferrum_replay_shim_identity(void) {
  return "fake GPU-time hand-off";
}

__attribute__((visibility("default"))) int ferrum_replay_set_gpu_sink(
    ferrum_replay_gpu_sink_fn sink, void *context) {
  if (!enabled()) return -ENOTSUP;
  pthread_mutex_lock(&g_mu);
  g_sink = sink;
  g_context = context;
  g_registered_ns = now_ns();
  pthread_mutex_unlock(&g_mu);
  if (sink) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, early_delivery, NULL) == 0) pthread_join(thread, NULL);
  }
  return 0;
}

__attribute__((visibility("default"))) int ferrum_replay_gpu_flush(
    ferrum_replay_gpu_status *status) {
  if (!enabled()) return -ENOTSUP;
  const char *spec = getenv("FAKE_GPU_REPLAYS");
  char *copy = strdup(spec ? spec : "");
  uint64_t at = g_registered_ns + 1000;
  const char *grid_text = getenv("FAKE_GPU_START_GRID_NS");
  const uint64_t grid = grid_text ? strtoull(grid_text, NULL, 10) : 0;
  const uint64_t error = 250 + grid / 2;
  pthread_mutex_lock(&g_mu);
  for (char *save = NULL, *item = strtok_r(copy, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    char *eq = strrchr(item, '=');
    if (!eq) continue;
    *eq = '\0';
    unsigned long us = 2;
    char *colon = strchr(eq + 1, ':');
    if (colon) us = strtoul(colon + 1, NULL, 10);
    const unsigned long n = strtoul(eq + 1, NULL, 10);
    for (unsigned long i = 0; i < n; ++i) {
      ferrum_replay_gpu_replay r;
      memset(&r, 0, sizeof r);
      r.size = sizeof r;
      r.device = 0;
      r.stream = 0x5000;
      r.name = item;
      r.category = 1;
      r.replay = i + 1;
      r.start_ns = grid ? (at + grid / 2) / grid * grid : at;
      at += us * 1000 + (grid ? 0 : 100);
      r.end_ns = r.start_ns + us * 1000;
      r.align_error_ns = error;
      if (g_sink) g_sink(&r, 1, g_context);
      ++g_delivered;
    }
  }
  pthread_mutex_unlock(&g_mu);
  free(copy);
  if (status) {
    status->timed = g_delivered;
    status->in_flight = 1;
    status->not_timed = 2;
    status->sampled_out = 0;
    status->align_error_ns = error;
  }
  return 0;
}
