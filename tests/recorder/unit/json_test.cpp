// JSON text building blocks of the recorder's trace: every NVTX message, whatever its bytes, must
// come out as a string any JSON parser accepts.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

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

TEST_CASE("wide strings convert to UTF-8") {
  std::string out;
  append_wide_as_utf8(out, L"a\u00e9\u4e2d\U0001F600");
  CHECK(out == "a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
  out.clear();
  const wchar_t bad[] = {static_cast<wchar_t>(0xD800), static_cast<wchar_t>(0x110000), 0};
  append_wide_as_utf8(out, bad);
  CHECK(out == "\xef\xbf\xbd\xef\xbf\xbd");
  out.clear();
  append_wide_as_utf8(out, nullptr);
  CHECK(out.empty());
}

TEST_CASE("display width counts terminal columns") {
  CHECK(display_width("abc") == 3);
  CHECK(display_width("caf\xc3\xa9") == 4);
  CHECK(display_width("\xff\xfe") == 2);
  CHECK(display_width("\xe4\xb8\xad") == 2);  // CJK ideograph: two columns
}
