/* An NVTX tool whose initialisation fails: NVTX must unload it and carry on with no tool, and
 * the program and the shim with it (tests/reliability/test_faults.py tool_init_fails). With
 * FERRUM_TEST_TOOL_SLEEP_MS it first sleeps that long: a tool slow to initialise
 * (fork_during_activation); with FERRUM_TEST_TOOL_STARTED=PATH it first creates the file PATH,
 * so that a test program knows its initialisation is under way (launch_during_activation). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void *(*get_export_table)(uint32_t)) {
  (void)get_export_table;
  const char *started = getenv("FERRUM_TEST_TOOL_STARTED");
  if (started) {
    const int fd = open(started, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
  const char *sleep_ms = getenv("FERRUM_TEST_TOOL_SLEEP_MS");
  if (sleep_ms) {
    const long ms = strtol(sleep_ms, NULL, 10);
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
  }
  return 0;
}
