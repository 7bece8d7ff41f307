// JSON text building blocks of the recorder's trace: every NVTX message, whatever its bytes, must
// come out as a string any JSON parser accepts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "json_text.hpp"
#include "utf8.hpp"

using namespace ferrum_replay::recorder;

namespace {
std::string json(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}
}  // namespace

TEST_CASE("plain ASCII is quoted unchanged") {
  CHECK(json("prefill") == "\"prefill\"");
  CHECK(json("") == "\"\"");
}

TEST_CASE("quote and backslash are escaped") {
  CHECK(json("a\"b") == "\"a\\\"b\"");
  CHECK(json("a\\b") == "\"a\\\\b\"");
  CHECK(json("/") == "\"/\"");
}

TEST_CASE("control characters become \\u00XX") {
  CHECK(json("a\nb") == "\"a\\u000ab\"");
  CHECK(json(std::string_view("\x00", 1)) == "\"\\u0000\"");
  CHECK(json("\x1f\t") == "\"\\u001f\\u0009\"");
  CHECK(json("\x7f") == "\"\x7f\"");  // DEL is legal in JSON strings
}

TEST_CASE("valid UTF-8 passes through") {
  CHECK(json("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
  CHECK(json("\xe4\xb8\xad") == "\"\xe4\xb8\xad\"");
  CHECK(json("\xf0\x9f\x98\x80") == "\"\xf0\x9f\x98\x80\"");
}

TEST_CASE("malformed UTF-8 becomes U+FFFD per byte") {
  const std::string fffd = "\xef\xbf\xbd";
  CHECK(json("\xff") == "\"" + fffd + "\"");
  CHECK(json("a\x80z") == "\"a" + fffd + "z\"");
  CHECK(json("\xc3") == "\"" + fffd + "\"");                                   // truncated
  CHECK(json("\xc0\xaf") == "\"" + fffd + fffd + "\"");                        // overlong '/'
  CHECK(json("\xed\xa0\x80") == "\"" + fffd + fffd + fffd + "\"");             // UTF-16 surrogate
  CHECK(json("\xf4\x90\x80\x80") == "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
}

TEST_CASE("micros keep nanosecond resolution with three decimals") {
  std::string out;
  append_micros(out, 0);
  CHECK(out == "0.000");
  out.clear();
  append_micros(out, 1234567);
  CHECK(out == "1234.567");
  out.clear();
  append_micros(out, 5);
  CHECK(out == "0.005");
}

TEST_CASE("doubles are exact and JSON-legal") {
  const auto d = [](double v) {
    std::string out;
    append_json_double(out, v);
    return out;
  };
  CHECK(d(0.1) == "0.1");
  CHECK(d(2.5) == "2.5");
  CHECK(d(-3) == "-3");
  CHECK(std::stod(d(1.0 / 3.0)) == 1.0 / 3.0);
  CHECK(d(std::numeric_limits<double>::quiet_NaN()) == "null");
  CHECK(d(std::numeric_limits<double>::infinity()) == "null");
}

// The trace writer formats every number and string by hand (json_text.hpp's write_* functions,
// no printf per event): each must write exactly what the printf formulas it replaced wrote.
namespace {

std::string printed(const char *format, auto... values) {
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, format, values...);
  return std::string(buf, static_cast<size_t>(n));
}

// Edge values: 0, every power of ten and its neighbours (a digit more or less), the largest
// values, and a fixed pseudo-random sample of every magnitude.
std::vector<uint64_t> edge_values() {
  std::vector<uint64_t> v{0,
                          1,
                          std::numeric_limits<uint64_t>::max(),
                          std::numeric_limits<uint64_t>::max() - 1,
                          uint64_t{std::numeric_limits<int64_t>::max()},
                          uint64_t{std::numeric_limits<int64_t>::max()} + 1,
                          uint64_t{std::numeric_limits<uint32_t>::max()}};
  for (uint64_t p = 1; p <= std::numeric_limits<uint64_t>::max() / 10; p *= 10)
    for (uint64_t x : {p - 1, p, p + 1, p * 10 - 1}) v.push_back(x);
  std::mt19937_64 random(14);
  for (int i = 0; i < 2000; ++i) v.push_back(random() >> (random() % 64));
  return v;
}

template <class Write>
std::string written(size_t bound, Write write) {
  std::string out(bound + 8, '#');  // what lies past the bound must stay untouched
  const char *end = write(out.data());
  REQUIRE(end >= out.data());
  REQUIRE(static_cast<size_t>(end - out.data()) <= bound);
  CHECK(out.substr(bound) == "########");
  return out.substr(0, static_cast<size_t>(end - out.data()));
}

// The string escaping as it was written before the buffer writer: one byte at a time.
std::string reference_json_string(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
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
  return out + "\"";
}

}  // namespace

TEST_CASE("integers are written as printf's %llu and %lld write them") {
  for (uint64_t v : edge_values()) {
    CAPTURE(v);
    CHECK(written(kU64Chars, [&](char *p) { return write_u64(p, v); }) ==
          printed("%llu", static_cast<unsigned long long>(v)));
    // Both signs of every value (negated in unsigned arithmetic: INT64_MIN is its own).
    const int64_t i = static_cast<int64_t>(v), negated = static_cast<int64_t>(uint64_t{0} - v);
    for (int64_t x : {i, negated, i / 3, -(i / 3)})
      CHECK(written(kI64Chars, [&](char *p) { return write_i64(p, x); }) ==
            printed("%lld", static_cast<long long>(x)));
  }
  const int64_t min = std::numeric_limits<int64_t>::min();
  CHECK(written(kI64Chars, [&](char *p) { return write_i64(p, min); }) == "-9223372036854775808");
  CHECK(written(kU64Chars, [&](char *p) { return write_u64(p, ~uint64_t{0}); }) ==
        "18446744073709551615");
}

TEST_CASE("hexadecimal is written as printf's %llx and %06x (colours, start/end ids)") {
  for (uint64_t v : edge_values()) {
    CAPTURE(v);
    CHECK(written(16, [&](char *p) { return write_hex(p, v); }) ==
          printed("%llx", static_cast<unsigned long long>(v)));
    const unsigned rgb = static_cast<unsigned>(v & 0xFFFFFFu);
    CHECK(written(6, [&](char *p) { return write_hex(p, rgb, 6); }) == printed("%06x", rgb));
  }
  CHECK(written(6, [&](char *p) { return write_hex(p, 0, 6); }) == "000000");
  CHECK(written(16, [&](char *p) { return write_hex(p, ~uint64_t{0}); }) == "ffffffffffffffff");
}

TEST_CASE("microseconds are written as the %llu.%03u formula wrote them") {
  std::vector<uint64_t> values = edge_values();
  for (uint64_t f : {0, 1, 5, 9, 10, 99, 100, 999, 1000, 1001, 1999, 999999, 1000000})
    values.push_back(f);
  for (uint64_t ns : values) {
    CAPTURE(ns);
    const std::string expected = printed("%llu.%03u", static_cast<unsigned long long>(ns / 1000),
                                         static_cast<unsigned>(ns % 1000));
    CHECK(written(kMicrosChars, [&](char *p) { return write_micros(p, ns); }) == expected);
    std::string appended = "x";
    append_micros(appended, ns);
    CHECK(appended == "x" + expected);
  }
  CHECK(written(kMicrosChars, [&](char *p) { return write_micros(p, ~uint64_t{0}); }) ==
        "18446744073709551.615");
}

TEST_CASE("doubles: the writer and the append form agree, within their bound") {
  for (double v :
       {0.0, -0.0, 0.1, -1e-300, 1e300, 5e-324, -1.7976931348623157e308, 1.0 / 3.0,
        std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::infinity()}) {
    CAPTURE(v);
    std::string appended;
    append_json_double(appended, v);
    CHECK(written(kDoubleChars, [&](char *p) { return write_json_double(p, v); }) == appended);
  }
}

TEST_CASE("strings are escaped byte for byte as the one-byte-at-a-time rule did") {
  std::vector<std::string> texts{"",
                                 "prefill",
                                 "a\"b\\c",
                                 std::string("\0x\0", 3),
                                 "\x7f\x80\xff",
                                 "caf\xc3\xa9",
                                 "\xf0\x9f\x98\x80\xf0\x9f",
                                 std::string(300, '\x01')};
  std::string every_byte;
  for (int c = 0; c < 256; ++c) every_byte += static_cast<char>(c);
  texts.push_back(every_byte);
  // Random bytes biased towards what needs care: quotes, controls, UTF-8 lead and tail bytes.
  std::mt19937 random(14);
  const std::string special = "\"\\\n\x01\x1f\x7f\x80\xbf\xc2\xc3\xe0\xed\xef\xf0\xf4\xf8\xff";
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    const size_t length = random() % 40;
    for (size_t k = 0; k < length; ++k)
      t += random() % 2 ? special[random() % special.size()]
                        : static_cast<char>(random() % 2 ? 'a' + random() % 26 : random() % 256);
    texts.push_back(t);
  }
  for (const std::string &t : texts) {
    CAPTURE(t);
    const std::string expected = reference_json_string(t);
    CHECK(written(json_string_bound(t.size()), [&](char *p) { return write_json_string(p, t); }) ==
          expected);
    std::string appended = "x";
    append_json_string(appended, t);
    CHECK(appended == "x" + expected);
  }
}

TEST_CASE("wide strings convert to UTF-8") {
  std::string out;
  append_wide_as_utf8(out, L"a\u00e9\u4e2d\U0001F600", kMaxNameBytes);
  CHECK(out == "a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
  out.clear();
  const wchar_t bad[] = {static_cast<wchar_t>(0xD800), static_cast<wchar_t>(0x110000), 0};
  append_wide_as_utf8(out, bad, kMaxNameBytes);
  CHECK(out == "\xef\xbf\xbd\xef\xbf\xbd");
  out.clear();
  append_wide_as_utf8(out, nullptr, kMaxNameBytes);
  CHECK(out.empty());
}

TEST_CASE("a kept name is at most kMaxNameBytes, cut before a character that does not fit") {
  const std::string short_name(kMaxNameBytes, 'a');
  CHECK(bounded_name(short_name) == short_name);
  CHECK(bounded_name(std::string(10u << 20, 'b')) == std::string(kMaxNameBytes, 'b'));
  // A 3-byte character (U+4E2D) straddling the bound goes whole.
  std::string straddling(kMaxNameBytes - 1, 'c');
  straddling += "\xe4\xb8\xad tail";
  CHECK(bounded_name(straddling) == std::string(kMaxNameBytes - 1, 'c'));
  // One that ends exactly at the bound stays.
  std::string fitting(kMaxNameBytes - 3, 'd');
  fitting += "\xe4\xb8\xad tail";
  CHECK(bounded_name(fitting) == fitting.substr(0, kMaxNameBytes));
  // Wide text stops before the character that would pass the bound.
  std::wstring wide(kMaxNameBytes - 1, L'w');
  wide += L"\u4e2d and more";
  std::string out;
  append_wide_as_utf8(out, wide.c_str(), kMaxNameBytes);
  CHECK(out == std::string(kMaxNameBytes - 1, 'w'));
}

TEST_CASE("display width counts terminal columns") {
  CHECK(display_width("abc") == 3);
  CHECK(display_width("caf\xc3\xa9") == 4);
  CHECK(display_width("\xff\xfe") == 2);
  CHECK(display_width("\xe4\xb8\xad") == 2);  // CJK ideograph: two columns
}
