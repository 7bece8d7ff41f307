/* An NVTX tool whose initialisation fails: NVTX must unload it and carry on with no tool, and
 * the program and the shim with it (tests/reliability/test_faults.py tool_init_fails). */
#include <stdint.h>

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void *(*get_export_table)(uint32_t)) {
  (void)get_export_table;
  return 0;
}
