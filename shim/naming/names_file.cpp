#include "naming/names_file.hpp"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

// [begin, end) trimmed of surrounding blanks.
void trim(const char *&begin, const char *&end) {
  while (begin < end && is_space(*begin)) ++begin;
  while (end > begin && is_space(end[-1])) --end;
}

bool starts_with(const char *begin, const char *end, const char *prefix) {
  size_t length = strlen(prefix);
  return static_cast<size_t>(end - begin) >= length && memcmp(begin, prefix, length) == 0;
}

// Parses one line into `rule`; returns null on success or the problem.
const char *parse_line(const char *begin, const char *end, NameRule &rule) {
  const char *equals = static_cast<const char *>(memchr(begin, '=', end - begin));
  if (!equals)
    return "expected 'KEY = NAME' (KEY: a graph number, site:PATTERN or content:PATTERN)";
  const char *key = begin, *key_end = equals, *name = equals + 1, *name_end = end;
  trim(key, key_end);
  trim(name, name_end);
  if (name == name_end) return "the name after '=' is empty";
  if (static_cast<size_t>(name_end - name) >= sizeof rule.name)
    return "the name is longer than 127 bytes";
  if (key == key_end) return "the key before '=' is empty";
  if (starts_with(key, key_end, "site:") || starts_with(key, key_end, "content:")) {
    const bool site = key[0] == 's';
    rule.kind = site ? NameRule::Kind::site : NameRule::Kind::content;
    key += site ? 5 : 8;
    trim(key, key_end);
    if (key == key_end) return "the pattern is empty";
    if (static_cast<size_t>(key_end - key) >= sizeof rule.pattern)
      return "the pattern is longer than 127 bytes";
    memcpy(rule.pattern, key, key_end - key);
    rule.pattern[key_end - key] = '\0';
  } else {
    unsigned long long value = 0;
    for (const char *p = key; p < key_end; ++p) {
      if (*p < '0' || *p > '9')
        return "the key is neither a graph number nor site:PATTERN / content:PATTERN";
      value = value * 10 + static_cast<unsigned>(*p - '0');
      if (value > 0xFFFFFFFFull) return "the graph number is too large";
    }
    if (value == 0) return "graph numbers start at 1";
    rule.kind = NameRule::Kind::ordinal;
    rule.ordinal = static_cast<unsigned>(value);
  }
  common::printable_copy(name, strnlen(name, static_cast<size_t>(name_end - name)), rule.name,
                         sizeof rule.name);
  return nullptr;
}

}  // namespace

NameRules parse_names_file(const char *text, size_t length, NamesFileComplaint complain,
                           void *context) {
  NameRules result;
  size_t capacity = 0;
  int line_number = 0;
  // A UTF-8 byte order mark, which some editors write first, is not part of line 1's key: read
  // as one, it would turn that rule into a bad line (or a pattern that matches nothing).
  if (length >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
    text += 3;
    length -= 3;
  }
  for (const char *line = text, *text_end = text + length; line < text_end;) {
    const char *newline = static_cast<const char *>(memchr(line, '\n', text_end - line));
    const char *line_end = newline ? newline : text_end;
    ++line_number;
    const char *begin = line, *end = line_end;
    trim(begin, end);
    if (begin != end && *begin != '#') {
      NameRule rule{};
      rule.line = line_number;
      if (memchr(begin, '\0', end - begin)) {
        complain(line_number, "the line contains a NUL byte", context);
      } else if (const char *problem = parse_line(begin, end, rule)) {
        complain(line_number, problem, context);
      } else {
        if (result.count == capacity) {
          size_t grown = capacity ? capacity * 2 : 16;
          auto *rules = static_cast<NameRule *>(realloc(result.rules, grown * sizeof(NameRule)));
          if (!rules) break;  // out of memory: keep what we have
          result.rules = rules;
          capacity = grown;
        }
        result.rules[result.count++] = rule;
      }
    }
    line = newline ? newline + 1 : text_end;
  }
  return result;
}

void free_name_rules(NameRules &rules) {
  free(rules.rules);
  rules = NameRules{};
}

const char *find_rule_name(const NameRules &rules, unsigned ordinal, const char *site,
                           const char *content) {
  for (size_t i = 0; i < rules.count; ++i) {
    const NameRule &rule = rules.rules[i];
    switch (rule.kind) {
      case NameRule::Kind::ordinal:
        if (rule.ordinal == ordinal) return rule.name;
        break;
      case NameRule::Kind::site:
        if (site && *site && fnmatch(rule.pattern, site, 0) == 0) return rule.name;
        break;
      case NameRule::Kind::content:
        if (content && *content && fnmatch(rule.pattern, content, 0) == 0) return rule.name;
        break;
    }
  }
  return nullptr;
}

}  // namespace ferrum_replay::shim
