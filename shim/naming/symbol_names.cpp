#include "naming/symbol_names.hpp"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "loader_error.hpp"
#include "resolve/libc_symbols.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

using Demangle = char *(*)(const char *, char *, size_t *, int *);

// __cxa_demangle lives in libstdc++, which the shim does not link; a C++ program has it.
Demangle find_demangler() {
  static std::atomic<Demangle> demangler{nullptr};
  static std::atomic<bool> looked{false};
  if (!looked.load(std::memory_order_acquire)) {
    if (DlsymFunction lookup = libc_dlsym()) {
      const common::LoaderErrorCleared loader_error;  // loader_error.hpp: a C program has none
      demangler.store(reinterpret_cast<Demangle>(lookup(RTLD_DEFAULT, "__cxa_demangle")),
                      std::memory_order_release);
    }
    looked.store(true, std::memory_order_release);
  }
  return demangler.load(std::memory_order_acquire);
}

}  // namespace

void readable_symbol_name(const char *mangled, char *out, size_t out_size) {
  out[0] = '\0';
  if (!mangled || !*mangled) return;
  char *demangled = nullptr;
  if (Demangle demangle = find_demangler(); demangle && mangled[0] == '_' && mangled[1] == 'Z') {
    int status = 0;
    demangled = demangle(mangled, nullptr, nullptr, &status);  // malloc'd by libstdc++
    if (status != 0) demangled = nullptr;
  }
  common::printable_copy(demangled ? demangled : mangled, out, out_size);
  free(demangled);
  strip_parameters(out);
}

void strip_parameters(char *name) {
  int depth = 0;
  for (char *p = name; *p; ++p) {
    if (*p == '<' || *p == '{' || *p == '[') ++depth;
    if ((*p == '>' || *p == '}' || *p == ']') && depth > 0) --depth;
    if (*p == '(' && strncmp(p, "(anonymous namespace)", 21) == 0) {
      p += 20;  // a name part, not a parameter list
      continue;
    }
    if (*p == '(' && depth == 0) {
      if (p - name >= 8 && strncmp(p - 8, "operator", 8) == 0 && p[1] == ')') {
        ++p;  // "operator()" is a name, not a parameter list
        continue;
      }
      *p = '\0';
      return;
    }
  }
}

}  // namespace ferrum_replay::shim
