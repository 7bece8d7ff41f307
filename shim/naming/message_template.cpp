#include "naming/message_template.hpp"

#include <stdio.h>
#include <string.h>

#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

struct FieldName {
  const char *text;
  TemplateField field;
};
constexpr FieldName kFields[] = {{"name", TemplateField::name},
                                 {"ordinal", TemplateField::ordinal},
                                 {"site", TemplateField::site},
                                 {"content", TemplateField::content},
                                 {"api", TemplateField::api}};

bool add_piece(MessageTemplate &out, TemplateField field, size_t offset, size_t length) {
  if (out.piece_count == MessageTemplate::kMaxPieces) return false;
  out.pieces[out.piece_count++] = {field, static_cast<unsigned short>(offset),
                                   static_cast<unsigned short>(length)};
  return true;
}

}  // namespace

bool parse_message_template(const char *text, MessageTemplate &out, char *error,
                            size_t error_size) {
  out = MessageTemplate{};
  size_t literal_used = 0;
  size_t literal_start = 0;
  auto fail = [&](const char *why) {
    snprintf(error, error_size, "%s", why);
    return false;
  };
  auto close_literal = [&]() {
    if (literal_used > literal_start &&
        !add_piece(out, TemplateField::literal, literal_start, literal_used - literal_start))
      return false;
    literal_start = literal_used;
    return true;
  };
  for (size_t i = 0; text[i];) {
    const char c = text[i];
    if ((c == '{' && text[i + 1] == '{') || (c == '}' && text[i + 1] == '}')) {
      if (literal_used + 1 >= sizeof out.literals) return fail("the template is too long");
      out.literals[literal_used++] = c;
      i += 2;
    } else if (c == '{') {
      const char *close = strchr(text + i + 1, '}');
      if (!close) return fail("a '{' has no matching '}' (write '{{' for a literal brace)");
      const size_t length = static_cast<size_t>(close - (text + i + 1));
      const FieldName *found = nullptr;
      for (const FieldName &field : kFields)
        if (strlen(field.text) == length && strncmp(field.text, text + i + 1, length) == 0)
          found = &field;
      if (!found) return fail("unknown field (known: {name} {ordinal} {site} {content} {api})");
      if (!close_literal() || !add_piece(out, found->field, 0, 0))
        return fail("the template has too many parts");
      i += length + 2;
    } else if (c == '}') {
      return fail("a '}' has no matching '{' (write '}}' for a literal brace)");
    } else {
      if (literal_used + 1 >= sizeof out.literals) return fail("the template is too long");
      out.literals[literal_used++] = c;
      ++i;
    }
  }
  if (!close_literal()) return fail("the template has too many parts");
  if (out.piece_count == 0) return fail("the template is empty");
  out.uses_name_only = out.piece_count == 1 && out.pieces[0].field == TemplateField::name;
  for (int i = 0; i < out.piece_count; ++i)
    if (out.pieces[i].field == TemplateField::name) out.shows_name = true;
  return true;
}

size_t render_message(const MessageTemplate &tmpl, const TemplateValues &values, char *out,
                      size_t out_size) {
  if (out_size == 0) return 0;
  out[0] = '\0';
  size_t used = 0;
  for (int i = 0; i < tmpl.piece_count; ++i) {
    const MessageTemplate::Piece &piece = tmpl.pieces[i];
    char number[16];
    const char *text = nullptr;
    size_t length = 0;
    switch (piece.field) {
      case TemplateField::literal:
        text = tmpl.literals + piece.offset;
        length = piece.length;
        break;
      case TemplateField::ordinal:
        snprintf(number, sizeof number, "%u", values.ordinal);
        text = number;
        break;
      case TemplateField::name:
        text = values.name;
        break;
      case TemplateField::site:
        text = values.site;
        break;
      case TemplateField::content:
        text = values.content;
        break;
      case TemplateField::api:
        text = values.api;
        break;
    }
    if (!text) continue;
    if (piece.field != TemplateField::literal) length = strlen(text);
    // A NUL ends a piece; what is appended follows the printable rule (docs/text-rules.md).
    used += common::printable_copy(text, strnlen(text, length), out + used, out_size - used);
  }
  return used;
}

}  // namespace ferrum_replay::shim
