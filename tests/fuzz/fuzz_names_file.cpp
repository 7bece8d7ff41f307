// libFuzzer target: the FERRUM_REPLAY_NAMES file (shim/naming/names_file.hpp). The input is the
// file; lookups use names derived from it. Properties: no crash, UB or leak; complaints name a line
// of the file; every rule's name and pattern are terminated; a lookup's answer is a rule's name.
#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "naming/names_file.hpp"

namespace {

struct Complaints {
  int lines;
  int count = 0;
};

void complain(int line, const char *problem, void *context) {
  auto *c = static_cast<Complaints *>(context);
  FUZZ_CHECK(line >= 1 && line <= c->lines);
  FUZZ_CHECK(problem != nullptr && fuzz::printable_utf8(problem));
  ++c->count;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = reinterpret_cast<const char *>(data);
  // Lines as the parser may count them: '\n' separated (a '\r' before it, or none at the end).
  Complaints complaints{1};
  for (size_t i = 0; i < size; ++i) complaints.lines += data[i] == '\n';
  ferrum_replay::shim::NameRules rules =
      ferrum_replay::shim::parse_names_file(text, size, complain, &complaints);
  FUZZ_CHECK(rules.count == 0 || rules.rules != nullptr);
  for (size_t i = 0; i < rules.count; ++i) {
    const ferrum_replay::shim::NameRule &r = rules.rules[i];
    FUZZ_CHECK(strnlen(r.pattern, sizeof r.pattern) < sizeof r.pattern);
    FUZZ_CHECK(strnlen(r.name, sizeof r.name) < sizeof r.name);
    FUZZ_CHECK(r.line >= 1 && r.line <= complaints.lines);
  }
  // Look up with strings taken from the input itself, so patterns have something to match.
  const std::string whole(text, size);
  const std::string site = whole.substr(0, whole.size() / 2);
  const std::string content = whole.substr(whole.size() / 2);
  for (unsigned ordinal : {0u, 1u, 3u, 1000u}) {
    for (const char *s : {static_cast<const char *>(nullptr), "", site.c_str()}) {
      const char *name = ferrum_replay::shim::find_rule_name(rules, ordinal, s, content.c_str());
      if (!name) continue;
      bool from_a_rule = false;
      for (size_t i = 0; i < rules.count; ++i) from_a_rule |= name == rules.rules[i].name;
      FUZZ_CHECK(from_a_rule);
    }
  }
  ferrum_replay::shim::free_name_rules(rules);
  return 0;
}
