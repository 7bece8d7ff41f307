/* An NVTX tool whose initialisation fails: NVTX must unload it and carry on with no tool, and
 * the program and the shim with it (tests/reliability/test_faults.py tool_init_fails). With
 * FERRUM_TEST_TOOL_SLEEP_MS it first sleeps that long: a tool slow to initialise
 * (fork_during_activation). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void *(*get_export_table)(uint32_t)) {
  (void)get_export_table;
  const char *sleep_ms = getenv("FERRUM_TEST_TOOL_SLEEP_MS");
  if (sleep_ms) {
    const long ms = strtol(sleep_ms, NULL, 10);
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
  }
  return 0;
}
