// FERRUM_REPLAY_CONTENT=on: a short description of a graph from the driver, taken at
// instantiation — its node count and its most frequent kernels, e.g.
// "7 nodes: decode_attention x2, rmsnorm x2, memset x2, empty". Graphs from the same call
// site (every PyTorch graph is instantiated from the same place) are told apart by it.
#pragma once

#include <stddef.h>

namespace ferrum_replay::shim {

// `graph` is a CUgraph (cudaGraph_t is the same handle). Fills `out` ("" when the driver
// cannot describe it). Calls the genuine driver functions, never our wrappers.
void describe_graph_content(const void *graph, char *out, size_t out_size);

// Exposed for tests: the description from `tallies` (kernel name, count), counted already and
// in any order; most frequent first, ties by name, at most `shown` names.
struct NodeTally {
  char name[64];
  unsigned count;
};
void format_content(size_t node_count, NodeTally *tallies, size_t tally_count, size_t shown,
                    char *out, size_t out_size);

}  // namespace ferrum_replay::shim
