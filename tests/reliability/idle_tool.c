/* An NVTX tool that attaches (its initialisation succeeds) but answers no domain creation:
 * nvtxDomainCreateA returns NULL. The shim must say that a tool is loaded and handles no domain,
 * not that it failed (tests/reliability/test_host_resources.py tool_without_handlers).
 *
 * Alone it installs no handler: every NVTX call stays a no-op. Asked by its environment:
 *   FERRUM_TEST_TOOL_COUNT_RANGES  it handles ranges pushed and popped — in NVTX's global domain
 *                                  (nvtxRangePushA, nvtxRangePop) and in any domain handle, NULL
 *                                  included (nvtxDomainRangePushEx, nvtxDomainRangePop) — counts
 *                                  them, and writes "idle tool: pushes=N pops=M" to stderr at
 *                                  exit: what a tool that never answers nvtxDomainCreateA sees of
 *                                  the shim's ranges;
 *   FERRUM_TEST_TOOL_DOMAINS       it answers nvtxDomainCreateA after all (one handle for every
 *                                  name), so that the shim pushes its ranges to it;
 *   FERRUM_TEST_TOOL_DIRTY_ERRNO=N its push and pop handlers leave errno set to N, as a tool may
 *                                  (test_faults.py errno_passes_through: the program must not see
 *                                  it after a launch). */
/* Types and callback tables only: NVTX's implementation would make this tool a client too. */
#define NVTX_NO_IMPL
#include <errno.h>
#include <nvtx3/nvToolsExt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_ulong pushes, pops;
static int counting;
static int dirty_errno;
static char domain_storage;

static int push_a(const char *message) {
  (void)message;
  const int depth = (int)atomic_fetch_add(&pushes, 1);
  if (dirty_errno) errno = dirty_errno;
  return depth;
}
static int pop(void) {
  atomic_fetch_add(&pops, 1);
  if (dirty_errno) errno = dirty_errno;
  return 0;
}
static int domain_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attributes) {
  (void)domain;
  (void)attributes;
  return push_a(NULL);
}
static int domain_pop(nvtxDomainHandle_t domain) {
  (void)domain;
  return pop();
}
static nvtxDomainHandle_t domain_create(const char *name) {
  (void)name;
  return (nvtxDomainHandle_t)&domain_storage;
}

static void install(const NvtxExportTableCallbacks *callbacks, NvtxCallbackModule module,
                    unsigned id, NvtxFunctionPointer handler) {
  NvtxFunctionTable table = NULL;
  unsigned size = 0;
  if (callbacks->GetModuleFunctionTable(module, &table, &size) && table && id < size && table[id])
    *table[id] = handler;
}

__attribute__((destructor)) static void report(void) {
  if (!counting) return;
  char line[96];
  const int n = snprintf(line, sizeof line, "idle tool: pushes=%lu pops=%lu\n",
                         atomic_load(&pushes), atomic_load(&pops));
  if (n > 0 && write(2, line, (size_t)n) < 0) return;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void *(*get_export_table)(uint32_t)) {
  counting = getenv("FERRUM_TEST_TOOL_COUNT_RANGES") != NULL;
  const int domains = getenv("FERRUM_TEST_TOOL_DOMAINS") != NULL;
  const char *dirty = getenv("FERRUM_TEST_TOOL_DIRTY_ERRNO");
  dirty_errno = dirty ? atoi(dirty) : 0;
  if ((!counting && !domains && !dirty_errno) || !get_export_table) return 1;
  const NvtxExportTableCallbacks *callbacks =
      (const NvtxExportTableCallbacks *)get_export_table(NVTX_ETID_CALLBACKS);
  if (!callbacks || !callbacks->GetModuleFunctionTable) return 1;
  install(callbacks, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)push_a);
  install(callbacks, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)pop);
  install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx,
          (NvtxFunctionPointer)domain_push);
  install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop,
          (NvtxFunctionPointer)domain_pop);
  if (domains)
    install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA,
            (NvtxFunctionPointer)domain_create);
  return 1;
}
