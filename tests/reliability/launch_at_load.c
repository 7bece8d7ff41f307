/* A library whose constructor makes the process's first graph call and launch (a framework
 * that warms up at load), linked by a program that does nothing else (launch_at_load_main.c).
 * The C library runs the constructors of the libraries a program links before a preloaded
 * library's: the shim's own constructor has not run yet when this one calls CUDA. C, with the
 * runtime-free driver stand-in: no unwinder is loaded until the shim's first call-site walk
 * loads one. Prints "launched" on stderr; exits 1 on a CUDA error. */
#define _GNU_SOURCE
#include <stdio.h>

#include "../support/c_driver.h"

/* Set once the constructor has launched: the program's exit status reads it. */
int launched_at_load;

/* The call site the graph is named after. */
__attribute__((noinline)) void warm_up_at_load(void) {
  struct c_driver d = c_driver_set_up();
  CUgraphExec exec;
  if (d.instantiate(&exec, d.graph, 0) || d.launch(exec, NULL)) {
    fprintf(stderr, "a CUDA call failed\n");
    exit(1);
  }
  launched_at_load = 1;
  fprintf(stderr, "launched\n");
}

__attribute__((constructor)) static void at_load(void) {
  warm_up_at_load();
}
