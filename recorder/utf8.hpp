// Text conversions the recorder needs: NVTX accepts wchar_t messages and arbitrary bytes, while
// the trace is JSON (UTF-8) and the table is read in a terminal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferrum_replay::recorder {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// `cp` as UTF-8 into out[0..3]; surrogates and values above U+10FFFF become U+FFFD. Its length.
size_t encode_utf8(char32_t cp, char out[4]);
void append_utf8(std::string &out, char32_t cp);

// wchar_t is UTF-32 on Linux; surrogates and values above U+10FFFF become U+FFFD. Stops before
// a character that would take `out` past `max_bytes` (names: kMaxNameBytes).
void append_wide_as_utf8(std::string &out, const wchar_t *text, size_t max_bytes);
// The same into out[0..capacity), allocating nothing (a signal handler's call): the bytes
// written, whole characters only.
size_t wide_as_utf8_into(char *out, size_t capacity, const wchar_t *text);

// The one bound on every name the recorder keeps (range messages, registered strings, domain,
// category and thread names): a program's NVTX text is copied, kept until exit, written into
// the trace and shown in the table, so a 10 MB message cost hundreds of megabytes at exit and
// padded every row of the table to its width. A longer name keeps its first kMaxNameBytes
// bytes, cut before a UTF-8 character that would not fit whole (names of C++ templates, the
// longest real ones, stay well below).
inline constexpr size_t kMaxNameBytes = 4096;
std::string_view bounded_name(std::string_view text);

// Length of the well-formed UTF-8 sequence starting at s[i] (1..4), storing its code point;
// 0 if the bytes there are not well-formed (overlong, surrogate, truncated, out of range).
size_t decode_utf8(std::string_view s, size_t i, char32_t *cp);

// Terminal columns `s` takes: one per code point (or malformed byte), two for East Asian wide
// characters. Good enough to align the summary table.
size_t display_width(std::string_view s);

}  // namespace ferrum_replay::recorder
