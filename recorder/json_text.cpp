#include "json_text.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "utf8.hpp"

namespace ferrum_replay::recorder {

void append_json_string(std::string &out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      char32_t cp;
      const size_t len = decode_utf8(text, i, &cp);
      if (len == 0) {
        append_utf8(out, kReplacementChar);
        ++i;
      } else {
        out.append(text.data() + i, len);
        i += len;
      }
    }
  }
  out += '"';
}

void append_micros(std::string &out, uint64_t ns) {
  char buf[32];
  const int n =
      std::snprintf(buf, sizeof buf, "%llu.%03u", static_cast<unsigned long long>(ns / 1000),
                    static_cast<unsigned>(ns % 1000));
  out.append(buf, static_cast<size_t>(n));
}

void append_json_double(std::string &out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  // The shortest of %.15g..%.17g that reads back as the same double: 0.1 stays "0.1" while
  // every value still round-trips (%.17g always does).
  char buf[40];
  int n = 0;
  for (int precision = 15; precision <= 17; ++precision) {
    n = std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  // printf follows LC_NUMERIC, and a host program may have set a locale whose decimal
  // separator is a comma; JSON only knows the dot.
  for (int k = 0; k < n; ++k)
    if (buf[k] == ',') buf[k] = '.';
  out.append(buf, static_cast<size_t>(n));
}

}  // namespace ferrum_replay::recorder
