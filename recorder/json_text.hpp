// The few JSON building blocks the trace needs. Written by hand rather than with a JSON library
// because the recorder must not drag dependencies into the processes it observes, and because
// NVTX messages are arbitrary bytes that must still yield a file every JSON parser accepts.
//
// Each rule has one implementation, a write_* function that formats into a caller's buffer
// (the trace writer's, a million times at exit: no allocation, no printf); the append_*
// functions put the same text at the end of a std::string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferrum_replay::recorder {

// The most bytes each writer below produces.
inline constexpr size_t kU64Chars = 20;     // 18446744073709551615
inline constexpr size_t kI64Chars = 20;     // -9223372036854775808
inline constexpr size_t kMicrosChars = 21;  // 18446744073709551.615
inline constexpr size_t kDoubleChars = 40;
constexpr size_t json_string_bound(size_t length) {
  return 2 + 6 * length;  // quotes; a control character becomes \u00XX
}

// `text` as a quoted JSON string: `"` and `\` escaped, control characters as \u00XX, malformed
// UTF-8 replaced by U+FFFD (one per malformed byte), everything else as UTF-8. Writes at `p`
// (room for json_string_bound(text.size()) bytes) and returns the end.
char *write_json_string(char *p, std::string_view text);
void append_json_string(std::string &out, std::string_view text);

// Decimal integers, as printf's %llu / %lld writes them.
char *write_u64(char *p, uint64_t value);
char *write_i64(char *p, int64_t value);

// Lowercase hexadecimal with at least `min_digits` digits (leading zeros), as printf's %0Nllx.
char *write_hex(char *p, uint64_t value, int min_digits = 1);

// Nanoseconds as microseconds with exactly three decimals ("1234.567"): exact, no float rounding,
// which keeps nesting intact after a round trip through the file.
char *write_micros(char *p, uint64_t ns);
void append_micros(std::string &out, uint64_t ns);

// A double as the shortest exact JSON number; NaN and infinities (not JSON) become null.
char *write_json_double(char *p, double value);
void append_json_double(std::string &out, double value);

}  // namespace ferrum_replay::recorder
