// libFuzzer target: the recorder's text handling — JSON string escaping (json_text.hpp), UTF-8
// decoding and display width (utf8.hpp), the wide-character path NVTX's W functions take.
// Properties: no crash or UB; every escaped string is a valid JSON string literal of valid
// UTF-8 whatever bytes went in; decoding always makes progress.
#include <cctype>
#include <cstring>
#include <cwchar>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "json_text.hpp"
#include "utf8.hpp"

using namespace ferrum_replay::recorder;

namespace {

// A JSON string literal (RFC 8259): quotes, no raw control character, valid escapes, and
// (stricter than JSON) valid UTF-8 throughout.
bool valid_json_string(const std::string &s) {
  if (s.size() < 2 || s.front() != '"' || s.back() != '"') return false;
  const std::string body = s.substr(1, s.size() - 2);
  for (size_t i = 0; i < body.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(body[i]);
    if (c < 0x20 || c == '"') return false;
    if (c != '\\') continue;
    if (++i == body.size()) return false;
    const char e = body[i];
    if (e == 'u') {
      if (i + 4 >= body.size()) return false;
      for (int k = 1; k <= 4; ++k)
        if (!std::isxdigit(static_cast<unsigned char>(body[i + k]))) return false;
      i += 4;
    } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
      return false;
    }
  }
  // The escapes are ASCII; what remains must be valid UTF-8 (DEL is allowed in JSON).
  std::string unescaped_printables;
  for (char c : body)
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7F) unescaped_printables += c;
  return fuzz::printable_utf8(unescaped_printables);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  std::string out;
  append_json_string(out, text);
  FUZZ_CHECK(valid_json_string(out));

  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t length = decode_utf8(text, i, &cp);  // 0: not a valid sequence at i
    FUZZ_CHECK(length <= 4 && i + length <= text.size());
    if (length) FUZZ_CHECK(cp <= 0x10FFFF && fuzz::valid_utf8(text.substr(i, length)));
    i += length ? length : 1;
  }
  FUZZ_CHECK(display_width(text) <= text.size() * 2);

  // The same bytes as wide characters (what nvtxRangePushW hands the recorder).
  std::vector<wchar_t> wide(size / sizeof(wchar_t) + 1, 0);
  std::memcpy(wide.data(), data, size / sizeof(wchar_t) * sizeof(wchar_t));
  std::string utf8;
  append_wide_as_utf8(utf8, wide.data(), kMaxNameBytes);
  FUZZ_CHECK(fuzz::valid_utf8(utf8));
  std::string json;
  append_json_string(json, utf8);
  FUZZ_CHECK(valid_json_string(json));

  if (size >= 8) {
    uint64_t ns = 0;
    std::memcpy(&ns, data, 8);
    std::string micros;
    append_micros(micros, ns);
    FUZZ_CHECK(!micros.empty() && micros.find_first_not_of("0123456789.") == std::string::npos);
    double d = 0;
    std::memcpy(&d, data, 8);
    std::string number;
    append_json_double(number, d);
    FUZZ_CHECK(!number.empty());
    FUZZ_CHECK(number.find_first_not_of("0123456789.eE+-nul") == std::string::npos);
  }
  return 0;
}
