#include "naming/graph_naming.hpp"

#include <stdio.h>
#include <string.h>

#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

NamingEnvironment g_environment;  // written once at activation, before any naming reads it

}  // namespace

void set_naming_environment(const NamingEnvironment &environment) {
  g_environment = environment;
}

const NamingEnvironment &naming_environment() {
  return g_environment;
}

bool choose_name(const NamingInputs &inputs, MessageTaken taken, void *taken_context, char *name,
                 size_t name_size, char *message, size_t message_size) {
  const NamingEnvironment &environment = g_environment;
  bool person = true;  // a person chose the name, and it is shown as they wrote it
  if (inputs.user_name) {
    person = inputs.user_name_whole;
    common::printable_copy(inputs.user_name, name, name_size);
    if (!name[0]) {  // nothing to show: "?", which is not what the person wrote
      common::printable_copy("?", name, name_size);
      person = false;
    }
  } else if (const char *rule =
                 find_rule_name(environment.rules, inputs.ordinal, inputs.site, inputs.content)) {
    common::printable_copy(rule, name, name_size);
    person = strcmp(rule, name) == 0;
  } else {
    person = false;
    if (inputs.site[0])
      common::printable_copy(inputs.site, name, name_size);
    else
      snprintf(name, name_size, "graph %u", inputs.ordinal);
  }
  const TemplateValues values{name, inputs.ordinal, inputs.site, inputs.content, inputs.api};
  if (environment.message_template.piece_count)
    render_message(environment.message_template, values, message, message_size);
  else  // no template set (a registry used before activation): the name, as "{name}" renders
    common::printable_copy(name, message, message_size);
  if (!message[0]) snprintf(message, message_size, "graph %u", inputs.ordinal);  // "{site}" unknown
  // Graphs a person named alike may share a message; that is the only way two live graphs do.
  // So a person's choice is exempt from the suffix only where the message shows that choice:
  // the template has {name}, and the name came through whole (not cut, no byte replaced).
  // Otherwise different names would collide unseen: "{site} [{content}]" shows no name, and two
  // long names that share their first kMaxNameLength bytes are cut alike.
  // Whole: the template has {name}, and the message, cut at its own bound, still holds it.
  const bool shows_person =
      person &&
      (!environment.message_template.piece_count || environment.message_template.shows_name) &&
      strstr(message, name) != nullptr;
  if (!taken(message, shows_person ? name : nullptr, taken_context)) return shows_person;
  // Another live graph shows this message: keep the two apart by the graph's number — and where
  // a person named another graph with that very text, by the number and a count (a few tries;
  // the last stays).
  char original[256];
  common::printable_copy(message, original, sizeof original);
  for (unsigned attempt = 1; attempt <= 4; ++attempt) {
    char suffix[48];
    if (attempt == 1)
      snprintf(suffix, sizeof suffix, " (graph %u)", inputs.ordinal);
    else
      snprintf(suffix, sizeof suffix, " (graph %u.%u)", inputs.ordinal, attempt);
    const size_t room = message_size - strlen(suffix);
    char shortened[256];
    common::printable_copy(original, shortened, room < sizeof shortened ? room : sizeof shortened);
    snprintf(message, message_size, "%s%s", shortened, suffix);
    if (!taken(message, nullptr, taken_context)) break;
  }
  return false;
}

}  // namespace ferrum_replay::shim
