// unloaded_site_plugin: a plugin that instantiates a graph in a function of its own,
// SITE_FUNCTION (a macro: two plugins are built from this file, `prefill_plugin_site` and
// `decode_plugin_site`). Loaded, used and unloaded in turn by unloaded_sites.cpp, so that the
// second lands at the first one's addresses.
#include <cuda.h>

extern "C" __attribute__((visibility("default"), noinline)) CUresult SITE_FUNCTION(
    CUgraphExec *exec, CUgraph graph) {
  const CUresult result = cuGraphInstantiate(exec, graph, 0);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return result;
}
