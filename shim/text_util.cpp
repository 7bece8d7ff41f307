#include "text_util.hpp"

#include <string.h>

#include "text_rules.hpp"

namespace ferrum {

// Forwards into the one implementation of the printable rule (docs/text-rules.md). A NUL ends
// the input: these take C strings and name buffers.
size_t append_printable_utf8(char *out, size_t out_size, const char *in, size_t in_length) {
  if (out_size == 0) return 0;
  const size_t used = strnlen(out, out_size - 1);
  return used + ferrum_common::printable_copy(in, in ? strnlen(in, in_length) : 0, out + used,
                                              out_size - used);
}

size_t copy_printable_utf8(const char *in, size_t in_length, char *out, size_t out_size) {
  if (out_size == 0) return 0;
  return ferrum_common::printable_copy(in, in ? strnlen(in, in_length) : 0, out, out_size);
}

size_t copy_printable_utf8(const char *in, char *out, size_t out_size) {
  return copy_printable_utf8(in, in ? strlen(in) : 0, out, out_size);
}

unsigned long long hash_text(const char *text) {
  unsigned long long hash = 1469598103934665603ull;
  for (const unsigned char *p = reinterpret_cast<const unsigned char *>(text); *p; ++p)
    hash = (hash ^ *p) * 1099511628211ull;
  return hash;
}

}  // namespace ferrum
