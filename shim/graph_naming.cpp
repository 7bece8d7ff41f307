#include "graph_naming.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activation.hpp"
#include "graph_registry.hpp"
#include "log.hpp"
#include "message_template.hpp"
#include "names_file.hpp"
#include "text_util.hpp"

namespace ferrum {
namespace {

NameRules g_rules;  // written once at activation, before any registration reads it

void say_on_stderr(const char *sentence, void *) {
  warn_line("%s", sentence);
}

}  // namespace

void load_names_file(const char *path) {
  g_rules = read_names_file(path, say_on_stderr, nullptr);
}

bool compose_message(GraphRecord &record, char *out, size_t out_size) {
  bool chosen_by_person = record.user_named;
  if (!record.user_named) {
    if (const char *rule = find_rule_name(g_rules, record.ordinal, record.site, record.content)) {
      copy_printable_utf8(rule, record.name, sizeof record.name);
      chosen_by_person = true;
    } else if (record.site[0]) {
      copy_printable_utf8(record.site, record.name, sizeof record.name);
    } else {
      snprintf(record.name, sizeof record.name, "graph %u", record.ordinal);
    }
  }
  const TemplateValues values{record.name, record.ordinal, record.site, record.content, record.api};
  render_message(settings().message_template, values, out, out_size);
  if (!out[0]) snprintf(out, out_size, "graph %u", record.ordinal);  // e.g. "{site}" unknown
  return chosen_by_person;
}

}  // namespace ferrum
