// FERRUM_REPLAY_FORMAT: the template of a range's message. Pure (parse and render), so that
// it is unit-tested and fuzzed.
//
//   fields: {name} the graph's name (user's, names file's, call site, or "graph N")
//           {ordinal} N, the graph's number in instantiation order
//           {site} the call site ("" when unknown)   {content} the content description
//           {api} the function that instantiated the graph (or "launch" if first seen there)
//   "{{" and "}}" stand for literal braces. Default: "{name}".
#pragma once

#include <stddef.h>

namespace ferrum_replay::shim {

inline constexpr char kDefaultMessageTemplate[] = "{name}";

enum class TemplateField : unsigned char { literal, name, ordinal, site, content, api };

struct MessageTemplate {
  struct Piece {
    TemplateField field;
    unsigned short offset;  // literal text: in `literals`
    unsigned short length;
  };
  static constexpr int kMaxPieces = 32;
  Piece pieces[kMaxPieces] = {};
  int piece_count = 0;
  char literals[256] = {};
  bool uses_name_only = false;  // exactly "{name}": the common case
  bool shows_name = false;      // "{name}" is one of its fields
};

struct TemplateValues {
  const char *name;
  unsigned ordinal;
  const char *site;
  const char *content;
  const char *api;
};

// False (with a reason in `error`) for an unknown field, an unmatched brace, or a template
// longer than the buffers allow.
bool parse_message_template(const char *text, MessageTemplate &out, char *error, size_t error_size);

// Renders into `out` as printable UTF-8, truncated on a character boundary. Returns length.
size_t render_message(const MessageTemplate &tmpl, const TemplateValues &values, char *out,
                      size_t out_size);

}  // namespace ferrum_replay::shim
