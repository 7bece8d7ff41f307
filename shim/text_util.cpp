#include "text_util.hpp"

#include <string.h>

namespace ferrum {
namespace {

// Length of the well-formed UTF-8 sequence starting at `in`, or 0 if malformed.
size_t utf8_sequence_length(const unsigned char *in, size_t available) {
  const unsigned char lead = in[0];
  size_t length;
  unsigned min_second = 0x80, max_second = 0xBF;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) min_second = 0xA0;  // overlong
    if (lead == 0xED) max_second = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) min_second = 0x90;
    if (lead == 0xF4) max_second = 0x8F;
  } else {
    return 0;
  }
  if (available < length) return 0;
  if (in[1] < min_second || in[1] > max_second) return 0;
  for (size_t i = 2; i < length; ++i)
    if (in[i] < 0x80 || in[i] > 0xBF) return 0;
  return length;
}

}  // namespace

size_t append_printable_utf8(char *out, size_t out_size, const char *in, size_t in_length) {
  if (out_size == 0) return 0;
  size_t used = strnlen(out, out_size - 1);
  const auto *bytes = reinterpret_cast<const unsigned char *>(in);
  for (size_t i = 0; i < in_length && bytes[i];) {
    size_t length = utf8_sequence_length(bytes + i, in_length - i);
    if (length == 1 && (bytes[i] < 0x20 || bytes[i] == 0x7f)) length = 0;
    const size_t emit = length ? length : 1;
    if (used + emit > out_size - 1) break;  // never split a character
    if (length)
      memcpy(out + used, bytes + i, length);
    else
      out[used] = '?';
    used += emit;
    i += length ? length : 1;
  }
  out[used] = '\0';
  return used;
}

size_t copy_printable_utf8(const char *in, size_t in_length, char *out, size_t out_size) {
  if (out_size == 0) return 0;
  out[0] = '\0';
  return append_printable_utf8(out, out_size, in, in_length);
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
