// The balanced range around one graph launch, and the per-thread depth guard.
//
// Invariant: every push this shim issues is followed by exactly one pop on the same thread
// and domain — whatever the push returned (a tool rejects with a negative value and then
// swallows the matching pop), whether the launch failed, and whatever unwinds through the
// launch (the pop is in a destructor; the shim is built with unwind tables and a
// personality routine, see unwind_support.cpp).
//
// Modelled on nvtx3.hpp's scoped_range_in: cannot be copied, moved or heap-allocated.
#pragma once

#include <nvtx3/nvToolsExt.h>

#include "activation.hpp"
#include "graph_registry.hpp"

namespace ferrum {

// Intercepted calls open on this thread. The runtime's cudaGraphLaunch reaches the driver's
// cuGraphLaunch underneath (and cudaGraphInstantiate the driver's instantiate); both layers
// are intercepted, and the inner one must not open a second range or register the graph
// twice. Initial-exec TLS: a plain %fs-relative access, no __tls_get_addr call per launch.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local unsigned t_intercept_depth;

class LaunchRange {
 public:
  LaunchRange(GraphRecord &record, nvtxDomainHandle_t domain) : record_(record), domain_(domain) {
    ++t_intercept_depth;
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.category = record.ordinal;
    attributes.colorType = NVTX_COLOR_ARGB;
    attributes.color = record.color.load(std::memory_order_relaxed);
    // Payload: this graph's replay number (1-based), so summaries group by name while each
    // instance stays identifiable.
    attributes.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    attributes.payload.ullValue = record.launches.fetch_add(1, std::memory_order_relaxed) + 1;
    if (nvtxStringHandle_t message = record.message.load(std::memory_order_acquire)) {
      attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
      attributes.message.registered = message;
    } else {  // the tool registers no strings: the label's text, which outlives us
      attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
      attributes.message.ascii = record.label.load(std::memory_order_acquire)->text;
    }
    const int depth = nvtxDomainRangePushEx(domain_, &attributes);
    // -2 (NVTX_NO_PUSH_POP_TRACKING) means no tool; other negatives are a tool's refusal.
    if (depth < 0 && depth != NVTX_NO_PUSH_POP_TRACKING)
      record.rejected_pushes.fetch_add(1, std::memory_order_relaxed);
  }

  ~LaunchRange() {
    nvtxDomainRangePop(domain_);  // unconditionally: see the invariant above
    --t_intercept_depth;
  }

  void note_failed_launch() { record_.failed_launches.fetch_add(1, std::memory_order_relaxed); }

  LaunchRange(const LaunchRange &) = delete;
  LaunchRange &operator=(const LaunchRange &) = delete;
  LaunchRange(LaunchRange &&) = delete;
  LaunchRange &operator=(LaunchRange &&) = delete;
  static void *operator new(decltype(sizeof 0)) = delete;
  static void *operator new[](decltype(sizeof 0)) = delete;

 private:
  GraphRecord &record_;
  nvtxDomainHandle_t domain_;
};

// Runs `call` (the real launch) inside one range named after `exec`, unless this thread is
// already inside a launch scope or the shim is off. The result is returned unchanged.
template <typename Result, typename Call>
inline Result launch_in_range(const void *exec, Result success, Call &&call) {
  if (t_intercept_depth != 0 || !shim_active()) return call();
  LaunchRange range(graph_registry().record_for_launch(exec), shim_domain());
  Result result = call();
  if (result != success) range.note_failed_launch();
  return result;
}

}  // namespace ferrum

namespace ferrum {

// Marks this thread as inside an intercepted call for the scope (see t_intercept_depth).
class InterceptScope {
 public:
  InterceptScope() { ++t_intercept_depth; }
  ~InterceptScope() { --t_intercept_depth; }
  InterceptScope(const InterceptScope &) = delete;
  InterceptScope &operator=(const InterceptScope &) = delete;
};

// Runs `call` (a real instantiate) and gives the new executable graph an identity: ordinal,
// call site, content and name. The outermost layer registers (the runtime's instantiate
// reaches the driver's underneath). The result is returned unchanged.
template <typename Result, typename Exec, typename Call>
inline Result instantiate_and_register(Result success, Exec *out_exec, const void *graph,
                                       const char *api, Call &&call) {
  if (t_intercept_depth != 0 || !shim_active()) return call();
  Result result;
  {
    InterceptScope scope;
    result = call();
  }
  if (result == success && out_exec && *out_exec)
    graph_registry().on_instantiate(*out_exec, graph, api);
  return result;
}

// Forgets `exec` before the real destroy runs: once destroyed, the driver may hand the same
// handle to another graph at any moment.
template <typename Exec, typename Call>
inline auto destroy_and_forget(Exec exec, Call &&call) {
  if (t_intercept_depth != 0 || !shim_active()) return call();
  graph_registry().on_destroy(exec);
  InterceptScope scope;
  return call();
}

}  // namespace ferrum
