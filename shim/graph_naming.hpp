// How a graph's name and message are chosen (docs/naming.md):
//   name    = the user's name (ferrum_replay_name_graph_exec), else the names file's
//             (FERRUM_REPLAY_NAMES), else the call site, else "graph N";
//   message = FERRUM_REPLAY_FORMAT rendered with that name (default "{name}").
// A message that another live graph already shows gets " (graph N)" appended, unless the
// user or the names file chose the name: two graphs share a message only if named alike.
#pragma once

#include <stddef.h>

namespace ferrum {

struct GraphRecord;

// Reads and parses FERRUM_REPLAY_NAMES once (at activation); bad lines are reported.
void load_names_file(const char *path);

// Fills record.name (unless user-named) and renders the message into `out`. Returns true
// when the name was chosen by a person (user or names file) and may be shared.
bool compose_message(GraphRecord &record, char *out, size_t out_size);

}  // namespace ferrum
