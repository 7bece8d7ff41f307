// nvtx_client: a plain NVTX3 client (the real header implementation, no shim) that drives the
// recorder end to end. It pushes and pops ranges the way applications do and prints on stdout
// what it did, so a test can compare the trace with the program's own account.
//
//   nvtx_client [--threads N] [--iters N] [--domain NAME] [--registered] [--unicode]
//               [--nested K] [--cxx] [--name-threads] [--unbalanced-pop] [--wrong-domain-pop]
//               [--leave-open K] [--leave-open-in-thread K] [--leave-open-in-domain K]
//               [--spinner] [--exit-in-thread]
//               [--exit-code N] [--module PATH] [--fork] [--timed K] [--marks]
//               [--start-end] [--start-open K] [--end-unknown] [--categories]
//               [--loader-state] [--errno-check N] [--interleave N]
//
// Each iteration of each worker thread:
//   push global "step" (RangePushA)
//     push global "nest1".."nest<K-1>" (RangePushEx, category = level, int64 payload = iteration)
//       push DOMAIN "dom-ascii" or, with --registered, "dom-registered" (DomainRangePushEx,
//         category 7, uint64 payload, ARGB color)
//         --unicode: global "wide-é中" (RangePushW) and DOMAIN "dom-wide-ü" (UNICODE message)
//         --cxx: global "cxx-scoped" through nvtx3::scoped_range (NVTX's CORE2 path)
//         --module: global "module-step" and DOMAIN "module-dom", pushed by a second NVTX module
//         (this file built as a shared object with NVTX_CLIENT_MODULE, dlopen'ed by the client),
//         which has its own NVTX state and so initialises the tool a second time
//   ...popped in reverse order.
// --fork: after the workers, the main thread opens global "around-fork", forks, and closes it in
//   both processes; the child also records --iters global "child-step" ranges and leaves through
//   exit(), so it writes its own trace. The parent prints "child <pid>" and the child's status.
// --timed K: after the workers, the main thread records K global "timed" ranges, each around a
//   1 ms sleep, moving to the next CPU it may run on before each one, and prints the
//   CLOCK_MONOTONIC times it read just before the push and just after the pop ("timed" lines), so a
//   test can check the recorder's clock against the monotonic one.
// --marks: after the workers, the main thread marks global "mark-a" (MarkA), "mark-w-é" (MarkW),
//   "mark-ex" (MarkEx, category 3, int32 payload -4, ARGB color) and DOMAIN "dom-mark"
//   (DomainMarkEx, category 7).
// --start-end: then start/end ranges: global "se-a" (RangeStartA), "se-w-ü" (RangeStartW),
//   "se-ex" (RangeStartEx, category 3, double payload 2.5), DOMAIN "dom-se" (DomainRangeStartEx,
//   category 7, ended by DomainRangeEnd), and global "se-cross" started on the main thread and
//   ended on another ("cross_start_tid" and "cross_end_tid" lines name the two threads).
// --interleave N: after the workers, the main thread N times pushes global "il-outer", DOMAIN
//   "il-inner", pops global (il-outer ends inside il-inner: two domains' ranges interleave, which
//   NVTX allows, one stack per domain), pushes and pops global "il-after", pops DOMAIN.
// --leave-open-in-domain K: K DOMAIN "left-open-domain" ranges pushed on the main thread at the
//   end and never popped (--leave-open's are global).
// --start-open K: K global "se-open" ranges started and never ended.
// --end-unknown: nvtxRangeEnd of an id never handed out, and a second end of "se-a" (with
//   --start-end): two ends of unknown ranges.
// --categories: before anything else, names global categories 3 ("category three", NameCategoryA)
//   and 4 ("category four ü", NameCategoryW) and DOMAIN's category 7 ("dom category seven",
//   DomainNameCategoryA).
// --loader-state: prints "loader_error <what dlerror() said after the first NVTX call, or none>".
// --errno-check N: the program's errno across its NVTX calls, set to a mark before each and
//   compared after (the recorder's own system calls inside them must not show): the first call
//   (the tool's start), then --threads new threads (each one's first call registers it), N
//   iterations each of a push with a new name, a domain push with a string registered every
//   16th, their pops, a mark; prints "errno_calls <n>", "errno_wrong <n>" and, when one was
//   wrong, "errno_first <call>:<errno>".
// --signal-ranges N: N global "main" ranges while a SIGPROF handler (every 20 us of CPU) pushes
//   and pops global "in handler" ranges on the same thread; prints "handler_ranges <n>". With
//   --wide, both in wide characters (nvtxRangePushW; the thread also marks "main mark" with
//   nvtxMarkW), the handler's message in turn "in handler" and "in handler " + 3,000 'x'.
// --signal-growth N: N new domains, one after another; in each, 64 nested ranges "growth" and
//   their pops (each domain's stack starts empty and grows several times, and each new domain
//   grows the table of stacks), while another thread sends SIGUSR1 to this one, once per push or
//   pop, and the handler pushes and pops "in handler" in the latest domain; prints
//   "handler_ranges <n>".
// Output, one record per line, tab-separated:
//   pid <pid>
//   pushes <n>         every push the program made (spinner excluded)
//   rejected <n>       pushes that returned a negative value other than -2
//   untracked <n>      pushes that returned -2 (no tool attached)
//   open <n>           accepted pushes deliberately left open (--leave-open*)
//   range <domain> <name> <count>   accepted pushes per (domain, name); domain "global" for NULL
//   timed <before push ns> <after pop ns>   (--timed)
//   mark <domain> <name> <count>        marks made (--marks)
//   startend <domain> <name> <count>    start/end ranges started and ended (--start-end)
#include <dlfcn.h>
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nvtx3/nvtx3.hpp>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// The second module's only job. Results of its two pushes go to `results`, so the program can
// count what was accepted.
extern "C" __attribute__((visibility("default"))) void nvtx_client_module_work(
    const char *domain_name, int results[2]);
using ModuleWork = void (*)(const char *, int[2]);

#ifdef NVTX_CLIENT_MODULE

void nvtx_client_module_work(const char *domain_name, int results[2]) {
  // Domains are per name, not per module: the tool must hand back the client's domain.
  static nvtxDomainHandle_t domain = nvtxDomainCreateA(domain_name);
  results[0] = nvtxRangePushA("module-step");
  nvtxEventAttributes_t a;
  std::memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "module-dom";
  results[1] = nvtxDomainRangePushEx(domain, &a);
  nvtxDomainRangePop(domain);
  nvtxRangePop();
}

#else  // the program

namespace {

struct Options {
  int threads = 1;
  int iters = 10;
  std::string domain = "client";
  bool registered = false;
  bool unicode = false;
  int nested = 1;
  bool cxx = false;
  bool name_threads = false;
  bool unbalanced_pop = false;
  bool wrong_domain_pop = false;
  int leave_open = 0;
  int leave_open_in_thread = 0;
  int leave_open_in_domain = 0;
  bool spinner = false;
  bool exit_in_thread = false;
  int exit_code = 0;
  std::string module;
  std::string reopen_at_exit;  // a file of "the program's" its hostile thread keeps reopening
  bool fork = false;
  int timed = 0;
  bool marks = false;
  bool start_end = false;
  int start_open = 0;
  bool end_unknown = false;
  bool categories = false;
  bool loader_state = false;
  int signal_ranges = 0;
  bool wide = false;
  int signal_growth = 0;
  int errno_check = 0;
  int interleave = 0;
};

// --errno-check: each call's errno against the mark the program set before it.
struct ErrnoCheck {
  static constexpr int kMark = 4242;
  std::atomic<unsigned long> calls{0}, wrong{0};
  std::mutex mutex;
  std::string first;
  template <typename Call>
  void operator()(const char *what, Call &&call) {
    errno = kMark;
    call();
    const int seen = errno;
    ++calls;
    if (seen != kMark && wrong++ == 0) {
      const std::lock_guard<std::mutex> lock(mutex);
      first = std::string(what) + ":" + std::to_string(seen);
    }
  }
};

void errno_check_thread(ErrnoCheck &check, nvtxDomainHandle_t domain, int index, int iterations) {
  nvtxStringHandle_t registered = nullptr;
  for (int i = 0; i < iterations; ++i) {
    const std::string name = "errno " + std::to_string(index) + "." + std::to_string(i);
    check("nvtxRangePushA", [&] { nvtxRangePushA(name.c_str()); });
    if (i % 16 == 0)
      check("nvtxDomainRegisterStringA",
            [&] { registered = nvtxDomainRegisterStringA(domain, name.c_str()); });
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attributes.message.registered = registered;
    check("nvtxDomainRangePushEx", [&] { nvtxDomainRangePushEx(domain, &attributes); });
    check("nvtxDomainRangePop", [&] { nvtxDomainRangePop(domain); });
    check("nvtxRangePop", [&] { nvtxRangePop(); });
    check("nvtxMarkA", [&] { nvtxMarkA(name.c_str()); });
  }
}

// --signal-ranges: ranges recorded by a signal handler on the thread it interrupts.
volatile sig_atomic_t g_handler_ranges = 0;
void record_in_handler(int) {
  nvtxRangePushA("in handler");
  nvtxRangePop();
  g_handler_ranges = g_handler_ranges + 1;
}

// --signal-ranges --wide: the handler's two messages, made before the signals start.
std::wstring g_wide_handler_text[2];
void record_wide_in_handler(int) {
  nvtxRangePushW(g_wide_handler_text[g_handler_ranges % 2].c_str());
  nvtxRangePop();
  g_handler_ranges = g_handler_ranges + 1;
}

// --signal-growth: the domain whose stack the interrupted thread is growing.
std::atomic<nvtxDomainHandle_t> g_growth_domain{nullptr};
std::atomic<unsigned> g_growth_steps{0};  // pushes and pops so far (the sender's pace)
void record_in_growth_handler(int) {
  const int saved_errno = errno;
  if (nvtxDomainHandle_t domain = g_growth_domain.load(std::memory_order_relaxed)) {
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = "in handler";
    nvtxDomainRangePushEx(domain, &attributes);
    nvtxDomainRangePop(domain);
    g_handler_ranges = g_handler_ranges + 1;
  }
  errno = saved_errno;
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr, "nvtx_client: %s\n", why);
  std::exit(2);
}

Options parse(int argc, char **argv) {
  // Each option once: a switch, a number or a text.
  static const std::map<std::string, bool Options::*> switches = {
      {"--registered", &Options::registered},
      {"--unicode", &Options::unicode},
      {"--cxx", &Options::cxx},
      {"--name-threads", &Options::name_threads},
      {"--unbalanced-pop", &Options::unbalanced_pop},
      {"--wrong-domain-pop", &Options::wrong_domain_pop},
      {"--spinner", &Options::spinner},
      {"--exit-in-thread", &Options::exit_in_thread},
      {"--fork", &Options::fork},
      {"--marks", &Options::marks},
      {"--start-end", &Options::start_end},
      {"--end-unknown", &Options::end_unknown},
      {"--categories", &Options::categories},
      {"--loader-state", &Options::loader_state},
      {"--wide", &Options::wide}};
  static const std::map<std::string, int Options::*> numbers = {
      {"--threads", &Options::threads},
      {"--iters", &Options::iters},
      {"--nested", &Options::nested},
      {"--leave-open", &Options::leave_open},
      {"--leave-open-in-domain", &Options::leave_open_in_domain},
      {"--leave-open-in-thread", &Options::leave_open_in_thread},
      {"--exit-code", &Options::exit_code},
      {"--timed", &Options::timed},
      {"--signal-ranges", &Options::signal_ranges},
      {"--signal-growth", &Options::signal_growth},
      {"--start-open", &Options::start_open},
      {"--errno-check", &Options::errno_check},
      {"--interleave", &Options::interleave}};
  static const std::map<std::string, std::string Options::*> texts = {
      {"--domain", &Options::domain},
      {"--module", &Options::module},
      {"--reopen-at-exit", &Options::reopen_at_exit}};
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> const char * {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (auto s = switches.find(a); s != switches.end())
      o.*(s->second) = true;
    else if (auto n = numbers.find(a); n != numbers.end())
      o.*(n->second) = std::atoi(value());
    else if (auto t = texts.find(a); t != texts.end())
      o.*(t->second) = value();
    else
      usage(("unknown option " + a).c_str());
  }
  if (o.threads < 1 || o.iters < 0 || o.nested < 1) usage("bad numbers");
  return o;
}

// What the program itself believes it recorded, merged from all threads at the end.
class Tally {
 public:
  void count(const std::string &domain, const std::string &name, int result) {
    ++pushes_;
    if (result >= 0)
      ++ranges_[{domain, name}];
    else if (result == NVTX_NO_PUSH_POP_TRACKING)
      ++untracked_;
    else
      ++rejected_;
  }
  // A push deliberately left open: never a completed range in the trace.
  void count_open(int result) {
    ++pushes_;
    if (result >= 0)
      ++open_;
    else if (result == NVTX_NO_PUSH_POP_TRACKING)
      ++untracked_;
    else
      ++rejected_;
  }
  void merge(const Tally &other) {
    std::lock_guard lock(mu_);
    pushes_ += other.pushes_;
    rejected_ += other.rejected_;
    untracked_ += other.untracked_;
    open_ += other.open_;
    for (const auto &[key, n] : other.ranges_) ranges_[key] += n;
  }
  void print() const {
    std::printf("pid\t%ld\npushes\t%lu\nrejected\t%lu\nuntracked\t%lu\nopen\t%lu\n",
                static_cast<long>(getpid()), pushes_, rejected_, untracked_, open_);
    for (const auto &[key, n] : ranges_)
      std::printf("range\t%s\t%s\t%lu\n", key.first.c_str(), key.second.c_str(), n);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
  unsigned long pushes_ = 0, rejected_ = 0, untracked_ = 0, open_ = 0;
  std::map<std::pair<std::string, std::string>, unsigned long> ranges_;
};

nvtxEventAttributes_t attributes() {
  nvtxEventAttributes_t a;
  std::memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  return a;
}

void worker(const Options &o, int index, nvtxDomainHandle_t domain, nvtxStringHandle_t registered,
            ModuleWork module_work, Tally &total) {
  Tally mine;
  if (o.name_threads) {
    const std::string name = "worker-" + std::to_string(index);
    nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), name.c_str());
  }
  for (int i = 0; i < o.iters; ++i) {
    mine.count("global", "step", nvtxRangePushA("step"));
    for (int k = 1; k < o.nested; ++k) {
      nvtxEventAttributes_t a = attributes();
      const std::string name = "nest" + std::to_string(k);
      a.messageType = NVTX_MESSAGE_TYPE_ASCII;
      a.message.ascii = name.c_str();
      a.category = static_cast<uint32_t>(k);
      a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
      a.payload.llValue = i;
      mine.count("global", name, nvtxRangePushEx(&a));
    }
    {
      nvtxEventAttributes_t a = attributes();
      a.category = 7;
      a.colorType = NVTX_COLOR_ARGB;
      a.color = 0xFF00A0FF;
      a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
      a.payload.ullValue = static_cast<uint64_t>(i);
      if (o.registered) {
        a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        a.message.registered = registered;
      } else {
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = "dom-ascii";
      }
      mine.count(o.domain, o.registered ? "dom-registered" : "dom-ascii",
                 nvtxDomainRangePushEx(domain, &a));
    }
    if (o.unicode) {
      mine.count("global", "wide-\u00e9\u4e2d", nvtxRangePushW(L"wide-\u00e9\u4e2d"));
      nvtxRangePop();
      nvtxEventAttributes_t a = attributes();
      a.messageType = NVTX_MESSAGE_TYPE_UNICODE;
      a.message.unicode = L"dom-wide-\u00fc";
      mine.count(o.domain, "dom-wide-\u00fc", nvtxDomainRangePushEx(domain, &a));
      nvtxDomainRangePop(domain);
    }
    if (module_work) {
      int results[2];
      module_work(o.domain.c_str(), results);
      mine.count("global", "module-step", results[0]);
      mine.count(o.domain, "module-dom", results[1]);
    }
    if (o.cxx) {
      // nvtx3.hpp sends even global ranges through nvtxDomainRangePushEx(NULL, ...); its RAII
      // type does not expose the push result, so count it as accepted unless rejecting.
      nvtx3::scoped_range r{"cxx-scoped"};
      mine.count("global", "cxx-scoped", 0);
    }
    nvtxDomainRangePop(domain);
    for (int k = 1; k < o.nested; ++k) nvtxRangePop();
    nvtxRangePop();
  }
  total.merge(mine);
}

long own_tid() {
  return static_cast<long>(syscall(SYS_gettid));
}

// --marks, --start-end, --start-open, --end-unknown: what NVTX says besides push/pop. Prints its
// own account ("mark" and "startend" lines).
void other_events(const Options &o, nvtxDomainHandle_t domain) {
  std::map<std::pair<std::string, std::string>, unsigned long> marks, ranges;
  if (o.marks) {
    nvtxMarkA("mark-a");
    ++marks[{"global", "mark-a"}];
    nvtxMarkW(L"mark-w-\u00e9");
    ++marks[{"global", "mark-w-\u00e9"}];
    nvtxEventAttributes_t a = attributes();
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "mark-ex";
    a.category = 3;
    a.payloadType = NVTX_PAYLOAD_TYPE_INT32;
    a.payload.iValue = -4;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = 0xFF112233;
    nvtxMarkEx(&a);
    ++marks[{"global", "mark-ex"}];
    nvtxEventAttributes_t d = attributes();
    d.messageType = NVTX_MESSAGE_TYPE_ASCII;
    d.message.ascii = "dom-mark";
    d.category = 7;
    nvtxDomainMarkEx(domain, &d);
    ++marks[{o.domain, "dom-mark"}];
  }
  nvtxRangeId_t first = 0;
  if (o.start_end) {
    first = nvtxRangeStartA("se-a");
    nvtxRangeEnd(first);
    ++ranges[{"global", "se-a"}];
    nvtxRangeEnd(nvtxRangeStartW(L"se-w-\u00fc"));
    ++ranges[{"global", "se-w-\u00fc"}];
    nvtxEventAttributes_t a = attributes();
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "se-ex";
    a.category = 3;
    a.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
    a.payload.dValue = 2.5;
    nvtxRangeEnd(nvtxRangeStartEx(&a));
    ++ranges[{"global", "se-ex"}];
    nvtxEventAttributes_t d = attributes();
    d.messageType = NVTX_MESSAGE_TYPE_ASCII;
    d.message.ascii = "dom-se";
    d.category = 7;
    nvtxDomainRangeEnd(domain, nvtxDomainRangeStartEx(domain, &d));
    ++ranges[{o.domain, "dom-se"}];
    // Started here, ended on another thread, which starts only after the start.
    const nvtxRangeId_t cross = nvtxRangeStartA("se-cross");
    long end_tid = 0;
    std::thread([&] {
      end_tid = own_tid();
      nvtxRangeEnd(cross);
    }).join();
    ++ranges[{"global", "se-cross"}];
    std::printf("cross_start_tid\t%ld\ncross_end_tid\t%ld\n", own_tid(), end_tid);
  }
  for (int k = 0; k < o.start_open; ++k) nvtxRangeStartA("se-open");
  if (o.end_unknown) {
    nvtxRangeEnd(0x7fff0000deadbeefULL);  // never handed out
    if (first) nvtxRangeEnd(first);       // already ended
  }
  for (const auto &[key, n] : marks)
    std::printf("mark\t%s\t%s\t%lu\n", key.first.c_str(), key.second.c_str(), n);
  for (const auto &[key, n] : ranges)
    std::printf("startend\t%s\t%s\t%lu\n", key.first.c_str(), key.second.c_str(), n);
}

}  // namespace

int main(int argc, char **argv) {
  const Options o = parse(argc, argv);
  // The first NVTX call starts the tool; the loader's error state across it is the program's
  // (a failed lookup of the tool's own must not show: common/loader_error.hpp).
  (void)dlerror();
  ErrnoCheck errno_check;
  nvtxDomainHandle_t domain = nullptr;
  errno_check("nvtxDomainCreateA (the tool's start)",
              [&] { domain = nvtxDomainCreateA(o.domain.c_str()); });
  if (o.loader_state) {
    const char *message = dlerror();
    std::printf("loader_error\t%s\n", message ? message : "none");
  }
  nvtxStringHandle_t registered = nvtxDomainRegisterStringA(domain, "dom-registered");
  if (o.categories) {
    nvtxNameCategoryA(3, "category three");
    nvtxNameCategoryW(4, L"category four \u00fc");
    nvtxDomainNameCategoryA(domain, 7, "dom category seven");
  }

  if (o.spinner) {
    // Keeps pushing until the process is gone, so the exit report runs while a thread records.
    std::thread([] {
      for (;;) {
        nvtxRangePushA("spin");
        nvtxRangePop();
      }
    }).detach();
  }

  ModuleWork module_work = nullptr;
  if (!o.module.empty()) {
    void *handle = dlopen(o.module.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) usage(dlerror());
    module_work = reinterpret_cast<ModuleWork>(dlsym(handle, "nvtx_client_module_work"));
    if (!module_work) usage("module lacks nvtx_client_module_work");
  }

  Tally total;
  std::vector<std::thread> threads;
  // All workers start at once, so the second module's first NVTX call (and with it the tool's
  // initialisation for that module) races between threads.
  for (int t = 0; t < o.threads; ++t)
    threads.emplace_back(worker, std::cref(o), t, domain, registered, module_work, std::ref(total));
  for (auto &t : threads) t.join();

  if (o.interleave > 0) {
    Tally mine;
    nvtxEventAttributes_t inner{};
    inner.version = NVTX_VERSION;
    inner.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    inner.messageType = NVTX_MESSAGE_TYPE_ASCII;
    inner.message.ascii = "il-inner";
    for (int k = 0; k < o.interleave; ++k) {
      mine.count("global", "il-outer", nvtxRangePushA("il-outer"));
      mine.count(o.domain, "il-inner", nvtxDomainRangePushEx(domain, &inner));
      nvtxRangePop();
      mine.count("global", "il-after", nvtxRangePushA("il-after"));
      nvtxRangePop();
      nvtxDomainRangePop(domain);
    }
    total.merge(mine);
  }

  if (o.wrong_domain_pop) {
    Tally mine;
    mine.count("global", "holder", nvtxRangePushA("holder"));
    nvtxDomainRangePop(domain);  // nothing open in this domain, but "holder" is open: wrong domain
    nvtxRangePop();
    total.merge(mine);
  }
  if (o.unbalanced_pop) nvtxRangePop();  // nothing open anywhere: pop without push
  if (o.leave_open_in_thread > 0) {
    // A thread that ends with open ranges: its buffer must outlive it.
    std::thread([&] {
      Tally mine;
      for (int k = 0; k < o.leave_open_in_thread; ++k)
        mine.count_open(nvtxRangePushA("left-open-thread"));
      total.merge(mine);
    }).join();
  }
  for (int k = 0; k < o.leave_open; ++k) {
    Tally mine;
    mine.count_open(nvtxRangePushA("left-open"));
    total.merge(mine);
  }
  if (o.leave_open_in_domain > 0) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "left-open-domain";
    Tally mine;
    for (int k = 0; k < o.leave_open_in_domain; ++k)
      mine.count_open(nvtxDomainRangePushEx(domain, &a));
    total.merge(mine);
  }

  other_events(o, domain);

  if (o.signal_ranges > 0) {
    g_wide_handler_text[0] = L"in handler";
    g_wide_handler_text[1] = L"in handler " + std::wstring(3000, L'x');
    struct sigaction action {};
    action.sa_handler = o.wide ? record_wide_in_handler : record_in_handler;
    action.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &action, nullptr);
    const itimerval every{{0, 20}, {0, 20}};
    setitimer(ITIMER_PROF, &every, nullptr);
    Tally mine;
    for (int k = 0; k < o.signal_ranges; ++k) {
      mine.count("global", "main", o.wide ? nvtxRangePushW(L"main") : nvtxRangePushA("main"));
      if (o.wide) nvtxMarkW(L"main mark");
      nvtxRangePop();
    }
    const itimerval off{};
    setitimer(ITIMER_PROF, &off, nullptr);
    total.merge(mine);
    std::printf("handler_ranges\t%d\n", static_cast<int>(g_handler_ranges));
  }

  if (o.signal_growth > 0) {
    struct sigaction action {};
    action.sa_handler = record_in_growth_handler;
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, nullptr);
    // The handler's name used once before the signals start: a name's first use allocates
    // (the recorder is not async-signal-safe there), and a handler that met the thread inside
    // malloc would wait for ever. Every later use only looks the name up.
    nvtxRangePushA("in handler");
    nvtxRangePop();
    const pthread_t target = pthread_self();
    std::atomic<bool> stop{false};
    // One signal per push or pop at most, landing anywhere in the next ones: never so many that
    // the thread only runs its handler (under a sanitizer a handler takes microseconds).
    std::thread sender([&] {
      unsigned seen = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const unsigned now = g_growth_steps.load(std::memory_order_relaxed);
        if (now == seen) continue;
        seen = now;
        pthread_kill(target, SIGUSR1);
      }
    });
    Tally mine;
    for (int k = 0; k < o.signal_growth; ++k) {
      const std::string name = "growth " + std::to_string(k);
      nvtxDomainHandle_t domain = nvtxDomainCreateA(name.c_str());
      nvtxEventAttributes_t attributes{};
      attributes.version = NVTX_VERSION;
      attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
      attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
      attributes.message.ascii = "growth";
      for (int depth = 0; depth < 64; ++depth) {
        mine.count(name, "growth", nvtxDomainRangePushEx(domain, &attributes));
        if (depth == 0) g_growth_domain.store(domain, std::memory_order_relaxed);
        g_growth_steps.fetch_add(1, std::memory_order_relaxed);
      }
      // The handler keeps to this domain through the next one's first push, which grows the
      // table of stacks (its stack moves with it).
      for (int depth = 0; depth < 64; ++depth) {
        nvtxDomainRangePop(domain);
        g_growth_steps.fetch_add(1, std::memory_order_relaxed);
      }
    }
    g_growth_domain.store(nullptr, std::memory_order_relaxed);
    stop.store(true);
    sender.join();
    total.merge(mine);
    std::printf("handler_ranges\t%d\n", static_cast<int>(g_handler_ranges));
  }

  if (o.errno_check > 0) {
    std::vector<std::thread> checkers;
    for (int t = 0; t < o.threads; ++t)
      checkers.emplace_back(errno_check_thread, std::ref(errno_check), domain, t, o.errno_check);
    for (auto &t : checkers) t.join();
    std::printf("errno_calls\t%lu\nerrno_wrong\t%lu\n", errno_check.calls.load(),
                errno_check.wrong.load());
    if (errno_check.wrong) std::printf("errno_first\t%s\n", errno_check.first.c_str());
  }

  if (o.timed > 0) {
    cpu_set_t allowed;
    std::vector<int> cpus;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    Tally mine;
    std::vector<std::pair<uint64_t, uint64_t> > brackets;
    for (int k = 0; k < o.timed; ++k) {
      if (cpus.size() > 1) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<size_t>(k) % cpus.size()], &one);
        sched_setaffinity(0, sizeof one, &one);
      }
      const uint64_t before = monotonic_ns();
      mine.count("global", "timed", nvtxRangePushA("timed"));
      const timespec ms{0, 1000 * 1000};
      nanosleep(&ms, nullptr);
      nvtxRangePop();
      brackets.push_back({before, monotonic_ns()});
    }
    if (!cpus.empty()) sched_setaffinity(0, sizeof allowed, &allowed);
    total.merge(mine);
    for (const auto &[before, after] : brackets)
      std::printf("timed\t%llu\t%llu\n", static_cast<unsigned long long>(before),
                  static_cast<unsigned long long>(after));
  }

  if (o.fork) {
    Tally mine;
    mine.count("global", "around-fork", nvtxRangePushA("around-fork"));
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child == 0) {
      for (int i = 0; i < o.iters; ++i) {
        nvtxRangePushA("child-step");
        nvtxRangePop();
      }
      nvtxRangePop();
      std::exit(0);
    }
    nvtxRangePop();
    int status = 0;
    waitpid(child, &status, 0);
    std::printf("child\t%ld\nchild_status\t%d\n", static_cast<long>(child), status);
    total.merge(mine);
  }

  total.print();
  if (!o.reopen_at_exit.empty()) {
    // A program thread that, while the process exits, closes every descriptor it thinks stale
    // (closefrom(3), as daemons do) and opens a file of its own, which takes the lowest number:
    // a tool still writing through a number it held would write into this file. Each line the
    // thread writes is "L": anything else in the file is not the program's.
    std::fflush(stdout);
    std::thread([path = o.reopen_at_exit] {
      for (unsigned round = 0;; ++round) {
        // Now and then every number up to 1023 (closefrom), else the lowest ones, 3 last: the
        // opens below take the lowest numbers at once, whichever a tool held.
        for (int fd = round % 64 == 0 ? 1023 : 10; fd >= 3; --fd) ::close(fd);
        for (int k = 0; k < 8; ++k) {
          const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
          // (A write can fail: a number this thread just opened may be closed by the next round
          // of another such thread — or, in the instant between a tool's proof and its close,
          // by the tool: own_descriptor.hpp's one-call window.)
          if (fd >= 0) (void)!::write(fd, "L\n", 2);
        }
      }
    }).detach();
  }
  if (o.exit_in_thread) {
    std::thread([&] { std::exit(o.exit_code); }).detach();
    for (;;) pause();
  }
  return o.exit_code;
}

#endif  // NVTX_CLIENT_MODULE
