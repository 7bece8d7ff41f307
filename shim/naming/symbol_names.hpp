// Readable function names from symbols: demangled (with the process's own demangler, when it
// has one) and without parameter lists. Used for call sites (call_site.cpp) and for kernel
// names in content descriptions (graph_content.cpp).
#pragma once

#include <stddef.h>

namespace ferrum_replay::shim {

// `symbol` (mangled or not) demangled when the process has a demangler (C++ programs carry
// libstdc++'s; the shim does not link it) and stripped of its parameters, into `out`.
void readable_symbol_name(const char *symbol, char *out, size_t out_size);

// Exposed for tests: "ns::f(int) const" -> "ns::f"; keeps "operator()" and templates.
void strip_parameters(char *name);

}  // namespace ferrum_replay::shim
