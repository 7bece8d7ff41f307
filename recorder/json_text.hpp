// The few JSON building blocks the trace needs. Written by hand rather than with a JSON library
// because the recorder must not drag dependencies into the processes it observes, and because
// NVTX messages are arbitrary bytes that must still yield a file every JSON parser accepts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferrum_replay::recorder {

// Appends `text` as a quoted JSON string: `"` and `\` escaped, control characters as \u00XX,
// malformed UTF-8 replaced by U+FFFD (one per malformed byte), everything else as UTF-8.
void append_json_string(std::string &out, std::string_view text);

// Nanoseconds as microseconds with exactly three decimals ("1234.567"): exact, no float rounding,
// which keeps nesting intact after a round trip through the file.
void append_micros(std::string &out, uint64_t ns);

// A double as the shortest exact JSON number; NaN and infinities (not JSON) become null.
void append_json_double(std::string &out, double value);

}  // namespace ferrum_replay::recorder
