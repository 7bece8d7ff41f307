/* libferrum-bench-empty.so: a preloaded library that does nothing, depends on nothing but libc
 * and has no constructor. Its start-up cost is the floor any LD_PRELOAD pays (the loader
 * opening, mapping and relocating one more object); bench/run_bench.py shows it next to the
 * shim's, so the shim's own share of the start-up cost is visible. */
__attribute__((visibility("default"))) int ferrum_bench_empty_marker;
