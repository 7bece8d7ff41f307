// The NVTX side of the recorder: the entry point NVTX's loader calls (once per module that uses
// NVTX, possibly from several threads at once), the handlers it installs in each module's callback
// tables, and the exit hook that writes the report.
//
// NVTX_INJECTION64_PATH=/path/libferrum-replay-recorder.so makes every NVTX3 module of a process
// report to this library; no Nsight Systems needed. See settings.hpp for FERRUM_RECORD_*.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "c_locale.hpp"
#include "clock.hpp"
#include "errno_kept.hpp"
#include "exit_report.hpp"
#include "fork_window.hpp"
#include "held_here.hpp"
#include "loader_error.hpp"
#include "name_registry.hpp"
#include "no_cancel.hpp"
#include "nvtx_tool.hpp"
#include "output_file.hpp"
#include "own_process.hpp"
#include "recorder.hpp"
#include "secure_execution.hpp"
#include "settings.hpp"
#include "shared_memory_child.hpp"
#include "shim_identity.hpp"
#include "stack_room.hpp"
#include "utf8.hpp"

extern "C" int __cxa_atexit(void (*function)(void *), void *argument, void *dso_handle);

namespace ferrum_replay::recorder {
namespace {

// The process-wide recorder. Created once, never destroyed: threads may still be recording while
// the exit report is written, and C++ static destructors would race with them.
std::atomic<Recorder *> g_recorder{nullptr};
Settings *g_settings = nullptr;  // written once under g_init_mu before g_recorder is published
std::string *g_cwd = nullptr;
std::mutex g_init_mu;
std::atomic<bool> g_reported{false};
// The thread that called exit(), for the report another thread may write (stack_room.hpp).
uint32_t g_exiting_tid = 0;
// The shim's GPU-time hand-off (ferrum_replay.h), when the recorder's sink was taken.
ferrum_replay_gpu_flush_fn g_gpu_flush = nullptr;
ferrum_replay_set_gpu_sink_fn g_set_gpu_sink = nullptr;

inline Recorder &rec() {
  return *g_recorder.load(std::memory_order_acquire);
}

inline const nvtxDomainRegistration_st &domain_of(nvtxDomainHandle_t domain) {
  return domain ? *domain : rec().names().global_domain();
}

inline void count_memory_drop() {
  if (Recorder *r = g_recorder.load(std::memory_order_acquire)) r->count_memory_drop();
}

// Runs a handler's work that allocates (names, domains, wide-character text): memory that ran out
// (std::bad_alloc) must never unwind into the program that called NVTX. The call is then
// counted as not recorded and `fallback` returned (a null handle: NVTX's own answer when no tool
// is attached). Push, pop and the other recording calls need none of this: they are noexcept
// and degrade inside (thread_buffer.hpp).
template <typename Result, typename Work>
Result or_fallback(Result fallback, Work &&work) noexcept {
  try {
    return work();
  } catch (const std::bad_alloc &) {
    count_memory_drop();
    return fallback;
  }
}

template <typename Work>
void or_nothing(Work &&work) noexcept {
  try {
    work();
  } catch (const std::bad_alloc &) {
    count_memory_drop();
  }
}

// A wide-character message as UTF-8 for the length of one NVTX call (until the recorder has
// interned it): in the calling thread's scratch (ThreadBuffer::claim_scratch), up to
// kMaxNameBytes; in a call nested in one that holds the scratch (a signal handler's: review
// NT-2), in this object's own bytes, cut at kNestedWideBytes. Lives in the NVTX entry's frame.
class WideText {
 public:
  static constexpr size_t kNestedWideBytes = 128;
  WideText() = default;
  ~WideText() {
    if (claimed_) claimed_->release_scratch();
  }
  WideText(const WideText &) = delete;
  WideText &operator=(const WideText &) = delete;

  // kNameLostToMemory (stable) for a thread without a buffer, or without memory for the text.
  MessageText convert(const wchar_t *text) noexcept {
    ThreadBuffer *thread = rec().current_thread();
    if (!thread || claimed_) return {kNameLostToMemory, true};
    if (std::string *utf8 = thread->claim_scratch()) {
      claimed_ = thread;
      try {
        append_wide_as_utf8(*utf8, text, kMaxNameBytes);
        return {*utf8, false};
      } catch (const std::bad_alloc &) {
        return {kNameLostToMemory, true};
      }
    }
    return {std::string_view(own_, wide_as_utf8_into(own_, sizeof own_, text)), false};
  }

 private:
  ThreadBuffer *claimed_ = nullptr;
  char own_[kNestedWideBytes];  // not initialised: written before it is read
};

// nvtxEventAttributes_t carries its own size so that older callers pass shorter structs: read a
// field only if the caller's struct reaches past its end.
#define FERRUM_ATTR_HAS(attr, field) \
  ((attr)->size >= offsetof(nvtxEventAttributes_t, field) + sizeof((attr)->field))

// The payload as the trace keeps it: 32-bit integers and floats widened to their 64-bit kind.
[[gnu::always_inline]] inline Payload payload_of(const nvtxEventAttributes_t &attr) {
  const auto &v = attr.payload;
  switch (attr.payloadType) {
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
      return Payload(uint64_t{v.ullValue});
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32:
      return Payload(uint64_t{v.uiValue});
    case NVTX_PAYLOAD_TYPE_INT64:
      return Payload(int64_t{v.llValue});
    case NVTX_PAYLOAD_TYPE_INT32:
      return Payload(int64_t{v.iValue});
    case NVTX_PAYLOAD_TYPE_DOUBLE:
      return Payload(v.dValue);
    case NVTX_PAYLOAD_TYPE_FLOAT:
      return Payload(double{v.fValue});
    default:
      return Payload();
  }
}

// What an event's attributes say, decoded once for every kind of event (push, mark, start):
// written into `out` in place (a push decodes straight into its frame), the message returned.
// Inlined into each handler, so that a push makes no call of its own before the clock.
[[gnu::always_inline]] inline MessageText decode_into(RangeAttrs &out,
                                                      const nvtxEventAttributes_t *attr,
                                                      WideText &wide) noexcept {
  MessageText message{std::string_view(), true};  // stable: a literal or a registered string
  if (attr) {
    if (FERRUM_ATTR_HAS(attr, category)) out.category = attr->category;
    if (FERRUM_ATTR_HAS(attr, color) && attr->colorType == NVTX_COLOR_ARGB) {
      out.has_color = true;
      out.color = attr->color;
    }
    if (FERRUM_ATTR_HAS(attr, payload)) out.payload = payload_of(*attr);
    if (FERRUM_ATTR_HAS(attr, message)) {
      switch (attr->messageType) {
        case NVTX_MESSAGE_TYPE_ASCII:
          if (attr->message.ascii) message = {attr->message.ascii, false};
          break;
        case NVTX_MESSAGE_TYPE_UNICODE:
          message = wide.convert(attr->message.unicode);
          break;
        case NVTX_MESSAGE_TYPE_REGISTERED:
          // Registered strings live as long as the recorder: no copy per range.
          if (const nvtxStringRegistration_st *r = attr->message.registered)
            message.text = std::string_view(r->text, r->size);
          break;
        default:
          break;
      }
    }
  }
  if (message.stable && message.text.empty()) message.text = "";
  return message;
}

// The handlers of push, mark and start, installed as they are: `Fn` is Recorder::push, mark or
// start_range (a template argument, so each call is direct). The Ex forms, global and domain:
template <auto Fn>
auto NVTX_API global_attributes(const nvtxEventAttributes_t *attr) {
  RangeAttrs attrs;
  WideText wide;
  const MessageText message = decode_into(attrs, attr, wide);
  return (rec().*Fn)(rec().names().global_domain(), message.text, message.stable, attrs);
}

template <auto Fn>
auto NVTX_API domain_attributes(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr) {
  RangeAttrs attrs;
  WideText wide;
  const MessageText message = decode_into(attrs, attr, wide);
  return (rec().*Fn)(domain_of(domain), message.text, message.stable, attrs);
}

// Push, the hot path, decodes in place (Recorder::push_in_place).
int NVTX_API global_push(const nvtxEventAttributes_t *attr) {
  WideText wide;
  return rec().push_in_place(rec().names().global_domain(), [attr, &wide](RangeAttrs &out) {
    return decode_into(out, attr, wide);
  });
}

int NVTX_API domain_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr) {
  WideText wide;
  return rec().push_in_place(
      domain_of(domain), [attr, &wide](RangeAttrs &out) { return decode_into(out, attr, wide); });
}

// The A and W forms: a plain message in the global domain.
template <auto Fn>
auto NVTX_API global_message(const char *message) {
  return (rec().*Fn)(rec().names().global_domain(), message ? message : "", !message, {});
}

template <auto Fn>
auto NVTX_API global_message(const wchar_t *message) {
  WideText wide;
  const MessageText text = wide.convert(message);
  return (rec().*Fn)(rec().names().global_domain(), text.text, text.stable, {});
}

#undef FERRUM_ATTR_HAS

// ---- NVTX_CB_MODULE_CORE ----

int NVTX_API range_pop() {
  return rec().pop(rec().names().global_domain());
}

void NVTX_API range_end(nvtxRangeId_t id) {
  rec().end_range(rec().names().global_domain(), id);
}

void NVTX_API name_category_a(uint32_t category, const char *name) {
  or_nothing([&] { rec().names().name_category(0, category, name ? name : ""); });
}

void NVTX_API name_category_w(uint32_t category, const wchar_t *name) {
  or_nothing([&] {
    std::string utf8;
    append_wide_as_utf8(utf8, name, kMaxNameBytes);
    rec().names().name_category(0, category, utf8);
  });
}

void NVTX_API name_os_thread_a(uint32_t thread_id, const char *name) {
  or_nothing([&] { rec().names().name_thread(thread_id, name ? name : ""); });
}

void NVTX_API name_os_thread_w(uint32_t thread_id, const wchar_t *name) {
  or_nothing([&] {
    std::string utf8;
    append_wide_as_utf8(utf8, name, kMaxNameBytes);
    rec().names().name_thread(thread_id, utf8);
  });
}

// ---- NVTX_CB_MODULE_CORE2 ----

int NVTX_API domain_range_pop(nvtxDomainHandle_t domain) {
  return rec().pop(domain_of(domain));
}

void NVTX_API domain_range_end(nvtxDomainHandle_t domain, nvtxRangeId_t id) {
  rec().end_range(domain_of(domain), id);
}

void NVTX_API domain_name_category_a(nvtxDomainHandle_t domain, uint32_t category,
                                     const char *name) {
  or_nothing(
      [&] { rec().names().name_category(domain_of(domain).id, category, name ? name : ""); });
}

void NVTX_API domain_name_category_w(nvtxDomainHandle_t domain, uint32_t category,
                                     const wchar_t *name) {
  or_nothing([&] {
    std::string utf8;
    append_wide_as_utf8(utf8, name, kMaxNameBytes);
    rec().names().name_category(domain_of(domain).id, category, utf8);
  });
}

// A null domain (no memory for it) is what NVTX hands out with no tool: the program's ranges in
// it then go to the global domain.
nvtxDomainHandle_t NVTX_API domain_create_a(const char *name) {
  return or_fallback(nvtxDomainHandle_t{},
                     [&] { return rec().names().create_domain(name ? name : ""); });
}

nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t *name) {
  return or_fallback(nvtxDomainHandle_t{}, [&] {
    std::string utf8;
    append_wide_as_utf8(utf8, name, kMaxNameBytes);
    return rec().names().create_domain(utf8);
  });
}

// Handles stay valid: completed ranges refer to the domain, and a module may recreate it.
void NVTX_API domain_destroy(nvtxDomainHandle_t) {}

// A null string handle (no memory for it): ranges naming it have an empty name.
nvtxStringHandle_t NVTX_API domain_register_string_a(nvtxDomainHandle_t, const char *text) {
  return or_fallback(nvtxStringHandle_t{}, [&] { return rec().register_string(text ? text : ""); });
}

nvtxStringHandle_t NVTX_API domain_register_string_w(nvtxDomainHandle_t, const wchar_t *text) {
  return or_fallback(nvtxStringHandle_t{}, [&] {
    std::string utf8;
    append_wide_as_utf8(utf8, text, kMaxNameBytes);
    return rec().register_string(utf8);
  });
}

// ---- installation ----

template <class Fn>
void install(NvtxFunctionTable table, unsigned size, unsigned id, Fn handler) {
  // A module built against an older NVTX has a shorter table: never write past its end.
  if (!table || id >= size || !table[id]) return;
  *table[id] = reinterpret_cast<NvtxFunctionPointer>(handler);
}

// The Ex, A and W forms of push, mark or start in NVTX's global domain (`ex_handler`: the Ex
// form's, when not global_attributes<Fn>).
template <auto Fn, class Ex, class A, class W>
void install_forms(NvtxFunctionTable table, unsigned size, unsigned ex, unsigned a, unsigned w,
                   Ex ex_handler = global_attributes<Fn>) {
  install<Ex>(table, size, ex, ex_handler);
  install<A>(table, size, a, global_message<Fn>);
  install<W>(table, size, w, global_message<Fn>);
}

bool install_core(const NvtxExportTableCallbacks &callbacks) {
  NvtxFunctionTable t = nullptr;
  unsigned n = 0;
  if (!callbacks.GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n) || !t) return false;
  install_forms<&Recorder::mark, nvtxMarkEx_impl_fntype, nvtxMarkA_impl_fntype,
                nvtxMarkW_impl_fntype>(t, n, NVTX_CBID_CORE_MarkEx, NVTX_CBID_CORE_MarkA,
                                       NVTX_CBID_CORE_MarkW);
  install_forms<&Recorder::start_range, nvtxRangeStartEx_impl_fntype, nvtxRangeStartA_impl_fntype,
                nvtxRangeStartW_impl_fntype>(
      t, n, NVTX_CBID_CORE_RangeStartEx, NVTX_CBID_CORE_RangeStartA, NVTX_CBID_CORE_RangeStartW);
  install<nvtxRangeEnd_impl_fntype>(t, n, NVTX_CBID_CORE_RangeEnd, range_end);
  install_forms<&Recorder::push, nvtxRangePushEx_impl_fntype, nvtxRangePushA_impl_fntype,
                nvtxRangePushW_impl_fntype>(t, n, NVTX_CBID_CORE_RangePushEx,
                                            NVTX_CBID_CORE_RangePushA, NVTX_CBID_CORE_RangePushW,
                                            global_push);
  install<nvtxRangePop_impl_fntype>(t, n, NVTX_CBID_CORE_RangePop, range_pop);
  install<nvtxNameCategoryA_impl_fntype>(t, n, NVTX_CBID_CORE_NameCategoryA, name_category_a);
  install<nvtxNameCategoryW_impl_fntype>(t, n, NVTX_CBID_CORE_NameCategoryW, name_category_w);
  install<nvtxNameOsThreadA_impl_fntype>(t, n, NVTX_CBID_CORE_NameOsThreadA, name_os_thread_a);
  install<nvtxNameOsThreadW_impl_fntype>(t, n, NVTX_CBID_CORE_NameOsThreadW, name_os_thread_w);
  return true;
}

bool install_core2(const NvtxExportTableCallbacks &callbacks) {
  NvtxFunctionTable t = nullptr;
  unsigned n = 0;
  if (!callbacks.GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n) || !t) return false;
  install<nvtxDomainRangePushEx_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainRangePushEx, domain_push);
  install<nvtxDomainRangePop_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainRangePop, domain_range_pop);
  install<nvtxDomainMarkEx_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainMarkEx,
                                        domain_attributes<&Recorder::mark>);
  install<nvtxDomainRangeStartEx_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainRangeStartEx,
                                              domain_attributes<&Recorder::start_range>);
  install<nvtxDomainRangeEnd_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainRangeEnd, domain_range_end);
  install<nvtxDomainNameCategoryA_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainNameCategoryA,
                                               domain_name_category_a);
  install<nvtxDomainNameCategoryW_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainNameCategoryW,
                                               domain_name_category_w);
  install<nvtxDomainCreateA_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainCreateA, domain_create_a);
  install<nvtxDomainCreateW_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainCreateW, domain_create_w);
  install<nvtxDomainDestroy_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainDestroy, domain_destroy);
  install<nvtxDomainRegisterStringA_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainRegisterStringA,
                                                 domain_register_string_a);
  install<nvtxDomainRegisterStringW_impl_fntype>(t, n, NVTX_CBID_CORE2_DomainRegisterStringW,
                                                 domain_register_string_w);
  return true;
}

void before_fork() {
  rec().before_fork();
}
void after_fork_in_parent() {
  rec().after_fork_in_parent();
}
void after_fork_in_child() {
  rec().after_fork_in_child();
}

// The shim's GPU-time hand-off: its three functions, all from the one object that names the
// replays. Looked up one by one in the global scope, they could come from different objects:
// with an older copy of the shim first (no sized way) and today's after it, the sink went to
// the copy that steps aside and every GPU time was lost, the trace saying "0 timed" for ten
// timed replays (review CP-3); and a program that exports a function of one of these names was
// called as if it were the shim. So the object that answers for the flush (the first in the
// global scope: the copy that names the replays, later ones step aside) must be a copy of the
// shim (common/shim_identity.hpp), and the sinks are taken from its own export table alone.
struct ShimHandOff {
  ferrum_replay_set_gpu_sink_fn set_sink = nullptr;
  ferrum_replay_set_gpu_sink_sized_fn set_sink_sized = nullptr;
  ferrum_replay_gpu_flush_fn flush = nullptr;
};

ShimHandOff find_shim_hand_off() {
  ShimHandOff found;
  // A program that exports a flush of its own answers first: then the first copy with the
  // marker (its GPU times were lost: review CR-3).
  // Copies are judged by their own export tables (common::shim_copy_answering): asked through
  // dlsym, an older shim's dlsym hook answered a CUDA name by starting that shim, whose first
  // NVTX call came back here and waited for this very start (review CQ-1: a hang).
  const link_map *object = common::shim_copy_answering(dlsym, FERRUM_REPLAY_GPU_FLUSH);
  if (!object) object = common::shim_copy_answering(dlsym, FERRUM_REPLAY_SHIM_IDENTITY);
  if (!object) return found;
  found.flush = reinterpret_cast<ferrum_replay_gpu_flush_fn>(
      common::exported_function(object, FERRUM_REPLAY_GPU_FLUSH));
  found.set_sink = reinterpret_cast<ferrum_replay_set_gpu_sink_fn>(
      common::exported_function(object, FERRUM_REPLAY_SET_GPU_SINK));
  found.set_sink_sized = reinterpret_cast<ferrum_replay_set_gpu_sink_sized_fn>(
      common::exported_function(object, FERRUM_REPLAY_SET_GPU_SINK_SIZED));
  return found;
}

// Creates the process-wide recorder on the first call from any module; later calls only return
// it. Must not call NVTX: we are inside NVTX's initialisation of some module.
Recorder *ensure_recorder() {
  if (Recorder *r = g_recorder.load(std::memory_order_acquire)) return r;
  std::lock_guard lock(g_init_mu);
  if (Recorder *r = g_recorder.load(std::memory_order_relaxed)) return r;

  common::note_standard_streams();  // before any line of ours: stdout and stderr as they are
  std::vector<std::string> warnings;
  g_settings = new Settings(parse_settings(common::process_env, nullptr, &warnings));
  say_unknown_settings(&warnings);  // a FERRUM_RECORD_* variable nothing reads: one line each
  for (const std::string &w : warnings) write_stderr(w);
  // A trace to /dev/fd/N: descriptor N as it is now, the only file it may be written to.
  common::note_output_stream(g_settings->out_pattern.c_str());

  // Relative output paths name a file in the directory the process was in when the recorder
  // was initialised (its first NVTX call; the recorder is not loaded before), even if the
  // program changes directory again before it exits.
  // A directory deeper than 4 KiB (getcwd: ERANGE) is read with a larger buffer: "." resolved the
  // name at exit, wherever the program had gone. (Its trace then cannot be opened by an absolute
  // name longer than PATH_MAX: the one line at exit says so.)
  std::vector<char> buf(4096);
  bool known = false;
  while (!(known = getcwd(buf.data(), buf.size()) != nullptr) && errno == ERANGE &&
         buf.size() < (size_t{1} << 20))
    buf.assign(buf.size() * 4, '\0');
  g_cwd = new std::string(known ? buf.data() : ".");

  // The two clocks read back to back: ts 0 of the trace, in monotonic and in wall-clock time.
  const uint64_t origin = monotonic_ns();
  auto *r = new Recorder(*g_settings, origin, realtime_ns());
  // GPU time per replay: the shim's completed replays, when it is loaded and timing. Without
  // it (or with -ENOTSUP) nothing changes: no GPU tracks, no "gpu" block.
  // Filed under the domain the shim's ranges are in: the shim's own rule (text_rules.hpp), so
  // that a name it refused (and said so) does not split a graph's CPU and GPU rows.
  r->set_gpu_domain(common::domain_name(common::process_env("FERRUM_REPLAY_DOMAIN", nullptr)));
  // Without the shim these lookups fail: no message of ours for the program's dlerror()
  // (its NVTX call started us). loader_error.hpp.
  const common::LoaderErrorCleared loader_error;
  const ShimHandOff shim = find_shim_hand_off();
  const auto set_sink = shim.set_sink;
  // With our own layout where the shim takes it (a shim before the struct grew has only the
  // first way, and delivers its own, shorter layout: GpuTracks::add steps by `size`).
  const auto set_sink_sized = shim.set_sink_sized;
  const auto flush = shim.flush;
  g_recorder.store(r, std::memory_order_release);
  const int registration =
      set_sink_sized ? set_sink_sized(&GpuTracks::sink, &r->gpu(), sizeof(ferrum_replay_gpu_replay))
      : set_sink     ? set_sink(&GpuTracks::sink, &r->gpu())
                     : -ENOSYS;
  if (registration == 0) {
    g_set_gpu_sink = set_sink;
    g_gpu_flush = flush;
    GpuStatus registered;
    registered.registered = true;
    r->set_gpu_status(registered);
  }
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  common::note_own_process();  // own_process.hpp
  return r;
}

// Runs when the process exits normally (exit() from any thread, or return from main) and after
// every atexit handler, so that ranges closed by the program's own exit handlers are complete.
// _exit() and fatal signals skip it: that data is lost by design.
void write_report_on_this_thread(void *recorder) {
  const common::CLocaleScope c_locale;  // c_locale.hpp: the trace's and the table's numbers
  try {
    write_exit_report(*static_cast<Recorder *>(recorder), *g_settings, *g_cwd, g_gpu_flush,
                      g_exiting_tid);
  } catch (const std::bad_alloc &) {
    // The snapshot, the trace or the table needed memory the host no longer had. A temporary
    // being written was removed (write_trace_file; or here, where its bookkeeping ran out of
    // memory first); say so without allocating.
    common::remove_temp_in_progress();
    static const char kLine[] =
        "ferrum-replay recorder: out of memory at exit: trace or table not written\n";
    write_stderr(std::string_view(kLine, sizeof kLine - 1));
  }
}

void remove_trace_temp_at_second_exit() {
  if (!common::remove_temp_in_progress()) return;
  static const char kLine[] =
      "ferrum-replay recorder: exit() was called again while the trace was being written (a "
      "signal handler's?): trace not written, its temporary removed\n";
  write_stderr(std::string_view(kLine, sizeof kLine - 1));
}

void report_at_exit();
void report_at_exit_handler(void *) {
  report_at_exit();
}

// A vfork() child's exit() (shared_memory_child.hpp) ran the exit handlers and the destructors
// of the memory it shares with its parent, this one included: the parent's exit() will run
// none of them. So the report is handed to the parent's exit as a handler of its own, and the
// child ended (with its status) before the C library goes on consuming its parent's state.
// (Where the shim is loaded, its exit handler ended the child before any destructor ran.)
// The child that handed it (in the shared memory): where the child could not be ended, the
// handler runs again in that child, which must not hand it again (for ever).
std::atomic<pid_t> g_handed_by{0};
void report_at_the_parents_exit() {
  const pid_t self = getpid();
  if (g_handed_by.exchange(self) == self) return;
  // Registered for no library (atexit() would tie it to ours, and the C library's finalisation
  // of this library, next in the child's exit, would run it there).
  if (__cxa_atexit(report_at_exit_handler, nullptr, nullptr) != 0) return;
  common::end_shared_memory_children_at_exit();
}

__attribute__((destructor)) void report_at_exit() {
  Recorder *r = g_recorder.load(std::memory_order_acquire);
  if (r && common::shares_owners_memory()) {
    report_at_the_parents_exit();
    return;
  }
  // A child made without fork handlers (own_process.hpp): what the recorder holds is its
  // parent's ranges, and a trace of them would be counted twice by whoever reads both. Nothing
  // is written (its own ranges cannot be told apart from them) — and nothing changed, before
  // anything else: a vfork() child (or clone(CLONE_VM)) that calls exit() shares its parent's
  // memory, and marking the report done there left the parent with no trace and no table (F162).
  if (!r || !common::state_is_this_process() || g_reported.exchange(true)) return;
  // The exiting thread may have a cancellation request pending: acted on in here, it ended that
  // thread inside exit(), with no trace, and a process whose other threads lived on never
  // exited (no_cancel.hpp).
  const common::NoCancel no_cancel;
  // exit() from a signal handler that interrupted this thread inside the recorder, holding a
  // lock the report needs: waiting for it would never end (held_here.hpp). Nothing is written.
  if (common::inside_our_lock()) {
    static const char kLine[] =
        "ferrum-replay recorder: exit() was called from a signal handler that interrupted the "
        "recorder on the same thread: no trace or table written\n";
    write_stderr(std::string_view(kLine, sizeof kLine - 1));
    return;
  }
  // The same inside fork(), where this thread holds every lock of ours for the fork
  // (fork_window.hpp): a signal handler that landed there, or a fork handler, called exit().
  if (cannot_wait_for_our_locks()) {
    static const char kLine[] =
        "ferrum-replay recorder: exit() was called inside fork() (from a signal handler or a fork "
        "handler), where the recorder holds its locks for the fork: no trace or table written\n";
    write_stderr(std::string_view(kLine, sizeof kLine - 1));
    return;
  }
  // exit() called again while the trace is written (a SIGTERM handler's exit() on this thread,
  // another thread's) runs the exit handlers registered since, not this one: the process ends
  // before the trace is placed. Registered now, this handler removes the temporary then (a
  // dead process's file under a name no later run removes) and says why there is no trace;
  // run after the report, it finds nothing in progress.
  atexit(remove_trace_temp_at_second_exit);
  // On a stack with room for it (stack_room.hpp): exit() may come from a thread or a signal
  // handler whose stack is far smaller than the report's buffers.
  g_exiting_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  if (!common::run_with_stack_room(write_report_on_this_thread, r, common::kExitReportStack)) {
    static const char kLine[] =
        "ferrum-replay recorder: too little stack left where exit() was called, and no thread "
        "could be made for the report: trace or table not written\n";
    write_stderr(std::string_view(kLine, sizeof kLine - 1));
  }
  // Replays completing from now on have no report to go to.
  if (g_set_gpu_sink) g_set_gpu_sink(nullptr, nullptr);
}

}  // namespace
}  // namespace ferrum_replay::recorder

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  using namespace ferrum_replay::recorder;
  if (!get_export_table) return 0;
  // Inside the program's first NVTX call of a module, which is not a cancellation point: the
  // warnings' writes, the working directory, /proc must not act on a cancellation request
  // pending on its thread (no_cancel.hpp; it aborted the process: noexcept below).
  const ferrum_replay::common::NoCancel no_cancel;
  // The program's errno too: settings, /proc, the working directory and the hand-off lookups
  // below may each leave one (errno_kept.hpp; nvtx_client --errno-check).
  const ferrum_replay::common::ErrnoKept errno_kept;
  // A privileged process: the variable that loaded us, and every setting and path we would
  // act on, come from a less privileged user (secure_execution.hpp). NVTX runs it without a
  // tool. Nothing of ours was set up yet: this is the first thing the recorder does.
  if (ferrum_replay::common::secure_execution()) {
    ferrum_replay::common::note_standard_streams();  // before any line of ours, as always
    write_stderr(
        "ferrum-replay recorder: not recording: this process runs in secure-execution mode "
        "(set-user-ID, set-group-ID or file capabilities), whose environment is not trusted; "
        "run a copy without those privileges to profile it\n");
    return 0;
  }
  const auto *callbacks =
      static_cast<const NvtxExportTableCallbacks *>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      !callbacks->GetModuleFunctionTable)
    return 0;

  // No memory for the recorder itself: NVTX then unloads us and the program runs without a tool.
  const bool ready = or_fallback(false, [] { return ensure_recorder() != nullptr; });
  if (!ready) return 0;

  // Each module has its own tables, so this part runs on every call.
  const bool core = install_core(*callbacks);
  const bool core2 = install_core2(*callbacks);
  // Returning 0 makes NVTX unload us for this module; only do that if nothing could be attached.
  return core || core2 ? 1 : 0;
}
