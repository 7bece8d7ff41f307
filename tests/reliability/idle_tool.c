/* An NVTX tool that attaches (its initialisation succeeds) but installs no handler: every NVTX
 * call stays a no-op, nvtxDomainCreateA returns NULL. The shim must say that a tool is loaded
 * and handles no domain, not that it failed (tests/reliability/test_host_resources.py
 * tool_without_handlers). */
#include <stdint.h>

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void *(*get_export_table)(uint32_t)) {
  (void)get_export_table;
  return 1;
}
