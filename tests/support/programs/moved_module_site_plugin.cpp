// moved_module_site_plugin: a plugin whose graph is instantiated in a function of its own that
// is not exported (hidden: only the plugin's full symbol table, .symtab, names it), SITE_FUNCTION
// (a macro: two builds of this file, `site_in_loaded_build` and `site_in_other_build`, stand
// for a library and its next version). Used by moved_module_sites.cpp.
#include <cuda.h>

__attribute__((visibility("hidden"), noinline)) CUresult SITE_FUNCTION(CUgraphExec *exec,
                                                                       CUgraph graph) {
  const CUresult result = cuGraphInstantiate(exec, graph, 0);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return result;
}

// The plugin's one export, through which the program reaches the hidden site.
extern "C" __attribute__((visibility("default"), noinline)) CUresult instantiate_here(
    CUgraphExec *exec, CUgraph graph) {
  const CUresult result = SITE_FUNCTION(exec, graph);
  asm volatile("" ::: "memory");
  return result;
}
