#include "utf8.hpp"

#include <cstdint>

namespace ferrum_replay::recorder {

size_t encode_utf8(char32_t cp, char out[4]) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementChar;
  if (cp < 0x80) {
    out[0] = static_cast<char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<char>(0xC0 | (cp >> 6));
    out[1] = static_cast<char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<char>(0xE0 | (cp >> 12));
    out[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<char>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<char>(0xF0 | (cp >> 18));
  out[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<char>(0x80 | (cp & 0x3F));
  return 4;
}

void append_utf8(std::string &out, char32_t cp) {
  char bytes[4];
  out.append(bytes, encode_utf8(cp, bytes));
}

void append_wide_as_utf8(std::string &out, const wchar_t *text, size_t max_bytes) {
  if (!text) return;
  static_assert(sizeof(wchar_t) == 4, "wchar_t is UTF-32 on the platforms we support");
  for (; *text; ++text) {
    const size_t before = out.size();
    append_utf8(out, static_cast<char32_t>(static_cast<uint32_t>(*text)));
    if (out.size() > max_bytes) {
      out.resize(before);
      return;
    }
  }
}

size_t wide_as_utf8_into(char *out, size_t capacity, const wchar_t *text) {
  size_t used = 0;
  for (; text && *text; ++text) {
    char bytes[4];
    const size_t length = encode_utf8(static_cast<char32_t>(static_cast<uint32_t>(*text)), bytes);
    if (length > capacity - used) break;
    for (size_t i = 0; i < length; ++i) out[used++] = bytes[i];
  }
  return used;
}

std::string_view bounded_name(std::string_view text) {
  if (text.size() <= kMaxNameBytes) return text;
  size_t end = kMaxNameBytes;
  // Back to the start of the character that straddles the bound (continuation bytes are
  // 10xxxxxx); malformed bytes are cut like any other.
  for (size_t back = 0;
       back < 3 && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80; ++back)
    --end;
  return text.substr(0, end);
}

size_t decode_utf8(std::string_view s, size_t i, char32_t *cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  char32_t value, min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return 0;
    value = (value << 6) | (b & 0x3F);
  }
  if (value < min || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return len;
}

namespace {

// East Asian wide and fullwidth blocks (and emoji), which terminals draw two columns wide. A
// coarse table, not full Unicode width data: enough to keep the table aligned for CJK names.
bool is_wide(char32_t cp) {
  return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0x303E) ||
         (cp >= 0x3041 && cp <= 0x33FF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xA000 && cp <= 0xA4CF) ||
         (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
         (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1F64F) ||
         (cp >= 0x1F900 && cp <= 0x1F9FF) || (cp >= 0x20000 && cp <= 0x3FFFD);
}

}  // namespace

size_t display_width(std::string_view s) {
  size_t width = 0;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const size_t len = decode_utf8(s, i, &cp);
    // A malformed byte is shown as one replacement character.
    width += len && is_wide(cp) ? 2 : 1;
    i += len ? len : 1;
  }
  return width;
}

}  // namespace ferrum_replay::recorder
