#include "naming/graph_content.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naming/symbol_names.hpp"
#include "resolve/real_functions.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

using KernelGetName = CUresult(CUDAAPI *)(const char **, CUkernel);

constinit RealFunction<PFN_cuGraphGetNodes_v10000> g_get_nodes{"cuGraphGetNodes"};
constinit RealFunction<PFN_cuGraphNodeGetType_v10000> g_node_type{"cuGraphNodeGetType"};
constinit RealFunction<PFN_cuGraphKernelNodeGetParams_v12000> g_kernel_params{
    "cuGraphKernelNodeGetParams_v2"};
constinit RealFunction<PFN_cuFuncGetName_v12030> g_func_name{"cuFuncGetName"};
constinit RealFunction<KernelGetName> g_kernel_name{"cuKernelGetName"};

const char *type_name(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return "memset";
    case CU_GRAPH_NODE_TYPE_HOST:
      return "host";
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return "child graph";
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return "event";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return "alloc";
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return "free";
    default:
      return "other";
  }
}

// A kernel node's function name, demangled and without parameters ("" if unknown).
void kernel_name(CUgraphNode node, char *out, size_t out_size) {
  out[0] = '\0';
  PFN_cuGraphKernelNodeGetParams_v12000 get_params = g_kernel_params.get();
  if (!get_params) return;
  CUDA_KERNEL_NODE_PARAMS_v2 params{};
  if (get_params(node, &params) != CUDA_SUCCESS) return;
  const char *name = nullptr;
  if (params.func) {
    if (PFN_cuFuncGetName_v12030 func_name = g_func_name.get()) func_name(&name, params.func);
  } else if (params.kern) {
    if (KernelGetName get_name = g_kernel_name.get()) get_name(&name, params.kern);
  }
  if (name) readable_symbol_name(name, out, out_size);
}

void tally(NodeTally *tallies, size_t &count, size_t capacity, const char *name) {
  for (size_t i = 0; i < count; ++i) {
    if (strcmp(tallies[i].name, name) == 0) {
      ++tallies[i].count;
      return;
    }
  }
  if (count == capacity) return;
  common::printable_copy(name, tallies[count].name, sizeof tallies[count].name);
  tallies[count++].count = 1;
}

}  // namespace

void format_content(size_t node_count, NodeTally *tallies, size_t tally_count, size_t shown,
                    char *out, size_t out_size) {
  // Most frequent first, ties by name: stable across runs.
  if (tally_count > 1)  // (qsort's pointer must not be null, even for no element)
    qsort(tallies, tally_count, sizeof(NodeTally), [](const void *a, const void *b) {
      auto *left = static_cast<const NodeTally *>(a);
      auto *right = static_cast<const NodeTally *>(b);
      if (left->count != right->count) return left->count > right->count ? -1 : 1;
      return strcmp(left->name, right->name);
    });
  int used = snprintf(out, out_size, "%zu node%s", node_count, node_count == 1 ? "" : "s");
  for (size_t i = 0;
       i < tally_count && i < shown && used > 0 && static_cast<size_t>(used) < out_size; ++i) {
    used += snprintf(out + used, out_size - used, "%s%s x%u", i == 0 ? ": " : ", ", tallies[i].name,
                     tallies[i].count);
  }
  if (tally_count > shown && used > 0 && static_cast<size_t>(used) < out_size)
    snprintf(out + used, out_size - used, ", ...");
  // snprintf may have cut a character in two: make it printable UTF-8 again.
  char clean[256];
  common::printable_copy(out, clean, out_size < sizeof clean ? out_size : sizeof clean);
  common::printable_copy(clean, out, out_size);
}

void describe_graph_content(const void *graph, char *out, size_t out_size) {
  out[0] = '\0';
  PFN_cuGraphGetNodes_v10000 get_nodes = g_get_nodes.get();
  PFN_cuGraphNodeGetType_v10000 node_type = g_node_type.get();
  if (!graph || !get_nodes || !node_type) return;
  CUgraph handle = static_cast<CUgraph>(const_cast<void *>(graph));
  size_t count = 0;
  if (get_nodes(handle, nullptr, &count) != CUDA_SUCCESS) return;
  constexpr size_t kMaxNodes = 4096;  // describe big graphs by their first 4096 nodes
  const size_t wanted = count < kMaxNodes ? count : kMaxNodes;
  auto *nodes = static_cast<CUgraphNode *>(malloc((wanted ? wanted : 1) * sizeof(CUgraphNode)));
  if (!nodes) return;
  size_t filled = wanted;
  if (wanted && get_nodes(handle, nodes, &filled) != CUDA_SUCCESS) filled = 0;
  NodeTally tallies[32];
  size_t tally_count = 0;
  for (size_t i = 0; i < filled && i < wanted; ++i) {
    CUgraphNodeType type;
    if (node_type(nodes[i], &type) != CUDA_SUCCESS) continue;
    char name[64] = "";
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) kernel_name(nodes[i], name, sizeof name);
    tally(tallies, tally_count, 32, name[0] ? name : type_name(type));
  }
  free(nodes);
  format_content(count, tallies, tally_count, 3, out, out_size);
}

}  // namespace ferrum_replay::shim
