// Small string helpers for the shim, which cannot use std::string (no libstdc++ at run time).
#pragma once

#include <stddef.h>

namespace ferrum {

// Copies `in` into `out` (size > 0, always terminated) as printable UTF-8 by the rule of
// docs/text-rules.md (common/text_rules.hpp): C0, DEL, C1, U+2028/U+2029 and each byte of a
// malformed sequence become '?', and truncation never splits a character; a NUL ends `in`. Returns
// the length written. Names come from programs, files and the environment: they must not be able to
// garble a terminal, a table or a trace.
size_t copy_printable_utf8(const char *in, size_t in_length, char *out, size_t out_size);
size_t copy_printable_utf8(const char *in, char *out, size_t out_size);

// Appends `in` (at most `in_length` bytes) to the terminated string in `out`, printable as
// above. Returns the new length.
size_t append_printable_utf8(char *out, size_t out_size, const char *in, size_t in_length);

// 64-bit FNV-1a.
unsigned long long hash_text(const char *text);

}  // namespace ferrum
