// Helpers shared by the libFuzzer targets in tests/fuzz/ (see tests/fuzz/README.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace fuzz {

// A failed property: print it and abort, so libFuzzer saves the input as a crash.
#define FUZZ_CHECK(condition)                                                               \
  do {                                                                                      \
    if (!(condition)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

// The input as a fake environment: NUL-separated fields, field i the value of names[i]; a
// missing field (input too short) is an unset variable, and a field starting with 0x01 too.
struct Environment {
  std::vector<std::string> names;
  std::vector<std::string> values;
  std::vector<bool> set;

  Environment(std::vector<std::string> variable_names, const uint8_t *data, size_t size)
      : names(std::move(variable_names)), values(names.size()), set(names.size(), false) {
    size_t field = 0, start = 0;
    for (size_t i = 0; i <= size && field < names.size(); ++i) {
      if (i == size || data[i] == 0) {
        std::string value(reinterpret_cast<const char *>(data) + start, i - start);
        if (value.empty() || value[0] != '\x01') {
          values[field] = value;
          set[field] = true;
        }
        ++field;
        start = i + 1;
      }
    }
  }

  static const char *lookup(const char *name, void *context) {
    auto *self = static_cast<Environment *>(context);
    for (size_t i = 0; i < self->names.size(); ++i)
      if (self->names[i] == name) return self->set[i] ? self->values[i].c_str() : nullptr;
    return nullptr;
  }
};

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
inline bool valid_utf8(std::string_view s, bool allow_controls = true) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (!allow_controls && (c < 0x20 || c == 0x7F)) return false;
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Valid UTF-8 with no C0 control byte and no DEL: what may reach a terminal, table or trace.
inline bool printable_utf8(std::string_view s) {
  return valid_utf8(s, false);
}

}  // namespace fuzz
