// The naming rule: how a graph's name and message are chosen (docs/naming.md). One place for
// all of it, fed plain values:
//   name    = the program's own name, else the names file's (FERRUM_REPLAY_NAMES), else the
//             call site, else "graph N". The program's own name is the latest it gave: the
//             innermost naming scope open on the instantiating thread when the graph was
//             instantiated (ferrum_replay_push_graph_name), replaced by any later
//             ferrum_replay_name_graph_exec for that graph (NamingInputs::user_name);
//   message = FERRUM_REPLAY_FORMAT rendered with that name (default "{name}");
//   a message that another live graph already shows gets " (graph N)" appended, unless the
//   user or the names file chose the name, the message shows it whole (the template has
//   {name}; neither the name nor the message was cut, no byte replaced) and every graph that
//   shows the message shows it for that same name: two graphs share a message only if a person
//   named them alike, whichever was named first.
// And where names go: the NVTX domain in which messages are registered.
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <stddef.h>
#include <stdint.h>

#include "naming/message_template.hpp"
#include "naming/names_file.hpp"

namespace ferrum_replay::shim {

// Fixed at activation, before any graph is named (activation.cpp), then read-only.
struct NamingEnvironment {
  NameRules rules;                      // FERRUM_REPLAY_NAMES, parsed
  MessageTemplate message_template;     // FERRUM_REPLAY_FORMAT, parsed
  nvtxDomainHandle_t domain = nullptr;  // where messages are registered; null: no tool
};
void set_naming_environment(const NamingEnvironment &environment);
const NamingEnvironment &naming_environment();

// What is known of a graph when it is (re)named.
struct NamingInputs {
  const char *user_name;  // the program's own name (see above); null unless it gave one
  uint32_t ordinal;
  const char *site;     // "" when unknown
  const char *content;  // "" unless FERRUM_REPLAY_CONTENT
  const char *api;      // the function that instantiated it
  // user_name is the program's name as it gave it: not cut, no byte replaced (it is stored
  // printable and cut, so only the one who stored it knows).
  bool user_name_whole;
};

// Is this message shown by another live graph it may not share with? (The registry's counts of
// live messages.) `shared_name`: the person's name this message shows whole — graphs that show
// that same name in that same message may share it, no other — or null: no graph may.
using MessageTaken = bool (*)(const char *message, const char *shared_name, void *context);

// Chooses the {name} field (into `name`) and the message (into `message`) by the rule above.
// True when the message shows a person's whole name and may be shared with the graphs that show
// the same (the registry counts it so: MessageTaken's `shared_name`).
bool choose_name(const NamingInputs &inputs, MessageTaken taken, void *taken_context, char *name,
                 size_t name_size, char *message, size_t message_size);

}  // namespace ferrum_replay::shim
