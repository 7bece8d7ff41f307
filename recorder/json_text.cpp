#include "json_text.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "utf8.hpp"

namespace ferrum_replay::recorder {

namespace {

// Whether byte `c` is copied as it is: printable ASCII other than `"` and `\`.
constexpr bool plain(unsigned char c) {
  return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

// The writer's tail as a std::string: room for `bound` more bytes, then cut to what was written.
template <class Write>
void append_with(std::string &out, size_t bound, Write write) {
  const size_t old = out.size();
  out.resize(old + bound);
  char *const begin = out.data();
  out.resize(static_cast<size_t>(write(begin + old) - begin));
}

}  // namespace

char *write_json_string(char *p, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  *p++ = '"';
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    // The common case, a run of plain ASCII, is copied in one go.
    size_t run = i;
    while (run < n && plain(static_cast<unsigned char>(text[run]))) ++run;
    if (run != i) {
      std::memcpy(p, text.data() + i, run - i);
      p += run - i;
      i = run;
      if (i == n) break;
    }
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      *p++ = '\\';
      *p++ = static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      std::memcpy(p, "\\u00", 4);
      p[4] = kHex[c >> 4];
      p[5] = kHex[c & 0xF];
      p += 6;
      ++i;
    } else {
      char32_t cp;
      const size_t len = decode_utf8(text, i, &cp);
      if (len == 0) {
        static constexpr char kReplacement[] = "\xef\xbf\xbd";  // U+FFFD (kReplacementChar)
        static_assert(kReplacementChar == 0xFFFD);
        std::memcpy(p, kReplacement, 3);
        p += 3;
        ++i;
      } else {
        std::memcpy(p, text.data() + i, len);
        p += len;
        i += len;
      }
    }
  }
  *p++ = '"';
  return p;
}

void append_json_string(std::string &out, std::string_view text) {
  append_with(out, json_string_bound(text.size()),
              [&](char *p) { return write_json_string(p, text); });
}

char *write_u64(char *p, uint64_t value) {
  return std::to_chars(p, p + kU64Chars, value).ptr;
}

char *write_i64(char *p, int64_t value) {
  return std::to_chars(p, p + kI64Chars, value).ptr;
}

char *write_hex(char *p, uint64_t value, int min_digits) {
  char digits[16];
  const char *end = std::to_chars(digits, digits + sizeof digits, value, 16).ptr;
  const int n = static_cast<int>(end - digits);
  for (int k = n; k < min_digits; ++k) *p++ = '0';
  std::memcpy(p, digits, static_cast<size_t>(n));
  return p + n;
}

char *write_micros(char *p, uint64_t ns) {
  p = write_u64(p, ns / 1000);
  const unsigned fraction = static_cast<unsigned>(ns % 1000);
  p[0] = '.';
  p[1] = static_cast<char>('0' + fraction / 100);
  p[2] = static_cast<char>('0' + fraction / 10 % 10);
  p[3] = static_cast<char>('0' + fraction % 10);
  return p + 4;
}

void append_micros(std::string &out, uint64_t ns) {
  append_with(out, kMicrosChars, [&](char *p) { return write_micros(p, ns); });
}

char *write_json_double(char *p, double value) {
  if (!std::isfinite(value)) {
    std::memcpy(p, "null", 4);
    return p + 4;
  }
  // The shortest of %.15g..%.17g that reads back as the same double: 0.1 stays "0.1" while
  // every value still round-trips (%.17g always does). Rare in a trace (payloads of type
  // double), so printf's formatting is kept as it is.
  char buf[kDoubleChars];
  int n = 0;
  for (int precision = 15; precision <= 17; ++precision) {
    n = std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  // printf follows LC_NUMERIC: the exit report runs in the C locale (common/c_locale.hpp).
  std::memcpy(p, buf, static_cast<size_t>(n));
  return p + n;
}

void append_json_double(std::string &out, double value) {
  append_with(out, kDoubleChars, [&](char *p) { return write_json_double(p, value); });
}

}  // namespace ferrum_replay::recorder
