// host_resources: programs that do to their own resources what real programs do, while the
// shim and the recorder are attached (tests/reliability/test_host_resources.py). The driver is
// dlopen'ed and every launch goes through dlsym on its handle (the shim's wrapper).
//
// Usage: host_resources MODE [ARGS]
//   descriptors DIR PHASE_LAUNCHES [close|dup2]
//                  Launches PHASE_LAUNCHES times, closes every descriptor 3..1023 (as a daemon
//                  does after fork) and launches PHASE_LAUNCHES times with them closed; then opens
//                  four files of its own in DIR (they get the lowest numbers), writes 512 KiB of
//                  known bytes to each and launches PHASE_LAUNCHES times, then instantiates a
//                  second graph on a thread of its own and launches it PHASE_LAUNCHES times;
//                  with dup2, also dup2s
//                  those files over every number from 3 to 63 and launches PHASE_LAUNCHES times
//                  more. Then checks that its descriptors are still its files, at the offsets it
//                  left them, and its files still hold exactly its bytes, leaves them
//                  in DIR (own0..own3, for the test to check again after exit) and prints
//                  `own_files=ok` (or `own_files=changed <name>`) and `launches=N failed=F`.
//   standard-streams DIR N before|after
//                  Closes its stdout and stderr and opens two files of its own in DIR, which
//                  take numbers 1 and 2 (out, err; 512 KiB of known bytes each): `before` the
//                  first launch, with O_CLOEXEC (as Python's os.open does), or `after` N
//                  launches, without it; then launches N times (both: 2N launches with after)
//                  and exits 0 if its files still hold exactly its bytes, 3 if not. Prints
//                  nothing: its output streams are its files now.
//   output-descriptor DIR N FD keep|before|after
//                  Opens DIR/inherited at number FD, without FD_CLOEXEC (as `FD>inherited` in a
//                  shell gives it): the output the test names as /dev/fd/FD. `keep`: launches N
//                  times. `before`: first closes FD and opens a file of its own, DIR/own (with
//                  O_CLOEXEC, as Python's os.open does), which takes number FD, then launches N
//                  times. `after`: launches N times (the shim and the recorder have started:
//                  they saw `inherited`), then does the same without O_CLOEXEC and launches N
//                  times more. Exits 0 when its file (if any) holds exactly its 512 KiB of known
//                  bytes, 3 if not. Prints nothing.
//   unload         dlopens the driver (RTLD_LOCAL), launches a graph 3000 times, destroys the
//                  graph and its context, dlcloses the driver and
//                  prints `still_loaded=1` if dlopen(RTLD_NOLOAD) still finds it, else
//                  `still_loaded=0`; then `launches=N failed=F`.
//   unload-timed N in-flight|completed
//                  For GPU timing: dlopens the driver, launches a graph N times and, with
//                  `completed`, waits for them (cuCtxSynchronize; with `in-flight` they are still
//                  running), then dlcloses the driver without tearing anything down (the context
//                  stays: its events with it), prints `still_loaded=0|1` as unload does, goes on
//                  with CPU work only (500 ms) and prints `launches=N failed=F`.
//   reload-timed ROUNDS N
//                  ROUNDS times: dlopens the driver, makes a context, launches a graph N times,
//                  waits for them, dlcloses the driver and occupies the page where it was
//                  loaded (a new load lands elsewhere). Prints `launches=N failed=F`.
//   thread-churn N
//                  N threads, one after another (each joined before the next starts), each
//                  making the context current and launching once: a pool that recycles its
//                  threads. Prints `rss_kb=<VmRSS at the end>` and `launches=N failed=F`.
//   registered-strings N
//                  Registers N distinct strings in a domain (nvtxDomainRegisterStringA, as a
//                  program that registers a string per request name does) and uses none. Prints
//                  `file_kb_grown=<RssFile after - before>` and `anon_kb_grown=` likewise.
//   spilled-report NAMED REPEATED PEAKFILE
//                  Records NAMED NVTX ranges with a message of their own (as distinct-names),
//                  then REPEATED ranges "repeated". Keeps in PEAKFILE the highest growth of
//                  RssFile + RssShmem (the spill's mapped pages, on a disk or a tmpfs), exit
//                  included, as hostile-names does for RssAnon. Prints `done`.
//   distinct-names N [fork]
//                  Records N NVTX ranges (no CUDA), each with a message of its own (200 bytes, a
//                  sequence number in it, as a profiler that names every operator call does):
//                  "range <i> xxx...". Prints `anon_kb_grown=<RssAnon after - before>`. With
//                  fork: N/2 ranges, then fork(); the child records N/2 ranges "child <i> ..."
//                  and waits until the parent has recorded N/2 more, "parent <i> ...", before it
//                  exits; each process writes its own trace.
//   start-end N PEAKFILE
//                  N start/end ranges (nvtxRangeEnd(nvtxRangeStartA("se"))), RssAnon's growth
//                  sampled into PEAKFILE as for hostile-names (exit included). Prints "done".
//   hostile-names N PEAKFILE
//                  Every kind of name NVTX takes, new each time: N ranges with 200-byte messages
//                  of their own ("range <i> xxx..."), a range and a mark whose message is 10 MB
//                  ("huge hhh..."), N/10 domains "domain <i>" (created, a range "in a domain"
//                  in every hundredth, destroyed), N registered strings, N thread names. Keeps in
//                  PEAKFILE the highest growth of RssAnon (KiB) seen until the process is gone,
//                  its exit included (a thread samples it every millisecond). Prints `done`.
//   signal-names N A 50 us profiling timer's handler registers a string, creates a domain and
//                  names the thread while the main thread registers N strings of its own; prints
//                  `handled=<H> null_handles=<K>`.
//   unbalanced-pushes N
//                  Pushes N NVTX ranges "leaked" and never pops them (a loop whose error path
//                  skips its pop), with a balanced range "inner" inside each; then one balanced
//                  range "after" on another thread. Prints `anon_kb_grown=<RssAnon after -
//                  before>`.
//   leaked-domains THREADS DOMAINS N
//                  THREADS threads each push N ranges "leaked" in each of DOMAINS domains and
//                  never pop them, then one balanced range "inner" in each domain (its level:
//                  N); once all have, the main thread records a range "after". Prints
//                  `anon_kb_grown=<RssAnon then - before>` and `wrong_levels=<inner ranges whose
//                  push or pop returned another level>`.
//   domain-churn N THREADS
//                  Creates and destroys N NVTX domains "request <i>" (a domain per request),
//                  then THREADS threads each record a range "launch" in domain "ferrum-replay"
//                  (the shim's) and one "late" in domain "late" created after the churn.
//                  Prints `anon_kb_grown=<RssAnon after the threads - before the churn>`.
//   cancel-pending THREADS N
//                  THREADS threads, each of which asks for its own cancellation first (deferred:
//                  pending until it reaches a cancellation point, and it calls none of its
//                  own): the first loads the driver (dlopen, dlsym) and records a range
//                  "warm-up" (the program's first NVTX call) while the others wait; then
//                  each makes the context current, instantiates a graph of its own, launches it
//                  N times (the process's first launch is on one of them) and records N NVTX
//                  ranges, each with a message of its own ("cancel <thread> <i> x..."), and
//                  returns. main prints `returned=R cancelled=C launches=L failed=F`, starts a
//                  thread that waits in pause() for ever, asks for its own cancellation and
//                  returns from main: the exit hooks run on a thread with a request pending,
//                  and were that thread cancelled in them, the process would never end.
//   own-tmpdir-write N MIB
//                  Records N NVTX ranges "step" (no CUDA), then writes MIB MiB of its own to
//                  $TMPDIR/own.dat, 1 MiB a write, as a program's temporary file: prints
//                  `own_write=ok mib=MIB`, or `own_write=failed mib=<written> <strerror>` at the
//                  first write that fails. The file is left for the test.
//   locale N       Takes its locale from the environment (setlocale(LC_ALL, ""), as many C and
//                  C++ programs do), prints `decimal=<2.5 as printf writes it now>`, then
//                  launches N times and records N NVTX ranges "weighed" with a double payload
//                  of 2.5, and prints `launches=N failed=F`.
// Exit status 0, 1 on set-up errors.

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <locale.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using LaunchFn = CUresult (*)(CUgraphExec, CUstream);

[[noreturn]] void die(const char *what);

template <typename T>
void lookup_in(void *handle, const char *name, T &out) {
  out = reinterpret_cast<T>(dlsym(handle, name));
  if (!out) die((std::string("no ") + name + " in the driver").c_str());
}

struct Driver {
  void *handle = nullptr;
  LaunchFn launch = nullptr;
  CUgraphExec exec = nullptr;
  CUgraph graph = nullptr;
  CUcontext ctx = nullptr;
  CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long) = nullptr;
  unsigned long long launches = 0, failed = 0;

  // What a tidy program does before it unloads the driver.
  void tear_down() {
    CUresult (*exec_destroy)(CUgraphExec) = nullptr;
    CUresult (*graph_destroy)(CUgraph) = nullptr;
    CUresult (*ctx_destroy)(CUcontext) = nullptr;
    lookup_in(handle, "cuGraphExecDestroy", exec_destroy);
    lookup_in(handle, "cuGraphDestroy", graph_destroy);
    lookup_in(handle, "cuCtxDestroy_v2", ctx_destroy);
    if (exec_destroy(exec) != CUDA_SUCCESS || graph_destroy(graph) != CUDA_SUCCESS ||
        ctx_destroy(ctx) != CUDA_SUCCESS)
      std::fprintf(stderr, "host_resources: tear-down failed\n");
  }

  void launch_n(long n) {
    for (long i = 0; i < n; ++i) {
      ++launches;
      if (launch(exec, nullptr) != CUDA_SUCCESS) ++failed;
    }
  }
};

[[noreturn]] void die(const char *what) {
  std::fprintf(stderr, "host_resources: %s\n", what);
  std::exit(1);
}

template <typename T>
void lookup(void *handle, const char *name, T &out) {
  lookup_in(handle, name, out);
}

Driver load_driver() {
  Driver d;
  d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d.handle) die(dlerror());
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice *, int) = nullptr;
  CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) = nullptr;
  CUresult (*graph_create)(CUgraph *, unsigned) = nullptr;
  CUresult (*add_empty)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t) = nullptr;
  CUresult (*&instantiate)(CUgraphExec *, CUgraph, unsigned long long) = d.instantiate;
  lookup(d.handle, "cuInit", init);
  lookup(d.handle, "cuDeviceGet", device_get);
  lookup(d.handle, "cuCtxCreate_v4", ctx_create);
  lookup(d.handle, "cuGraphCreate", graph_create);
  lookup(d.handle, "cuGraphAddEmptyNode", add_empty);
  lookup(d.handle, "cuGraphInstantiateWithFlags", instantiate);
  lookup(d.handle, "cuGraphLaunch", d.launch);
  CUdevice device = 0;
  CUgraphNode node = nullptr;
  if (init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
      ctx_create(&d.ctx, nullptr, 0, device) != CUDA_SUCCESS ||
      graph_create(&d.graph, 0) != CUDA_SUCCESS ||
      add_empty(&node, d.graph, nullptr, 0) != CUDA_SUCCESS ||
      instantiate(&d.exec, d.graph, 0) != CUDA_SUCCESS)
    die("driver set-up failed");
  return d;
}

// The known bytes of file `index`: a pattern no event or pointer looks like.
std::string known_bytes(int index) {
  std::string bytes(512 * 1024, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>("own-file-"[i % 9] ^ (index + 1));
  return bytes;
}

std::string read_all(const std::string &path) {
  std::string out;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<unreadable>";
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

__attribute__((noinline)) void instantiate_on_this_thread(const Driver &d, CUgraphExec *exec) {
  CUresult (*set_current)(CUcontext) = nullptr;
  lookup(d.handle, "cuCtxSetCurrent", set_current);
  if (set_current(d.ctx) != CUDA_SUCCESS || d.instantiate(exec, d.graph, 0) != CUDA_SUCCESS)
    *exec = nullptr;
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
}

int descriptors(const std::string &dir, long per_phase, bool use_dup2) {
  // Flush what stdio holds before the standard streams' neighbours go away.
  std::fflush(stdout);
  Driver d = load_driver();
  d.launch_n(per_phase);
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  d.launch_n(per_phase);  // closed, not reused

  int own[4];
  for (int i = 0; i < 4; ++i) {
    const std::string path = dir + "/own" + std::to_string(i);
    own[i] = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (own[i] < 0) die("cannot create an own file");
    const std::string bytes = known_bytes(i);
    if (write(own[i], bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
      die("cannot write an own file");
  }
  d.launch_n(per_phase);  // the program's files hold the lowest numbers
  // A graph instantiated on a thread of its own: its call site is named, so the shim walks a
  // stack it has not seen (a thread's first frames) while the program's files hold the numbers
  // a stack walker's descriptors had (libunwind kept a pipe: F39).
  CUgraphExec second = nullptr;
  std::thread([&] { instantiate_on_this_thread(d, &second); }).join();
  if (!second) die("second instantiation failed");
  for (long i = 0; i < per_phase; ++i, ++d.launches)
    if (d.launch(second, nullptr) != CUDA_SUCCESS) ++d.failed;

  if (use_dup2) {
    for (int target = 3; target < 64; ++target) {
      bool is_own = false;
      for (int fd : own) is_own |= fd == target;
      if (!is_own && dup2(own[target % 4], target) != target) die("dup2 failed");
    }
    d.launch_n(per_phase);  // and every number up to 63
  }

  std::string changed;
  for (int i = 0; i < 4 && changed.empty(); ++i) {
    // Each descriptor is still its file, at the offset the program left it (nobody read,
    // wrote or replaced it), and the file holds only the program's bytes.
    struct stat by_path {
    }, by_fd{};
    const std::string path = dir + "/own" + std::to_string(i);
    if (stat(path.c_str(), &by_path) != 0 || fstat(own[i], &by_fd) != 0 ||
        by_path.st_ino != by_fd.st_ino || by_path.st_dev != by_fd.st_dev ||
        lseek(own[i], 0, SEEK_CUR) != static_cast<off_t>(known_bytes(i).size()) ||
        read_all(path) != known_bytes(i))
      changed = "own" + std::to_string(i);
  }
  if (!changed.empty())
    std::printf("own_files=changed %s\n", changed.c_str());
  else
    std::printf("own_files=ok\n");
  std::printf("launches=%llu failed=%llu\n", d.launches, d.failed);
  std::fflush(stdout);
  return 0;
}

// Descriptors 1 and 2 become this program's own files `out` and `err` in `dir`.
void take_standard_numbers(const std::string &dir, int flags) {
  close(1);
  close(2);
  const char *names[] = {"out", "err"};
  for (int i = 0; i < 2; ++i) {
    const std::string path = dir + "/" + names[i];
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | flags, 0600);
    if (fd != i + 1) std::exit(1);
    const std::string bytes = known_bytes(5 + i);
    if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) std::exit(1);
  }
}

int standard_streams(const std::string &dir, long launches, bool before) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (before) take_standard_numbers(dir, O_CLOEXEC);
  Driver d = load_driver();
  if (!before) {
    d.launch_n(launches);  // the shim and the recorder have started: they saw the real streams
    take_standard_numbers(dir, 0);
  }
  d.launch_n(launches);
  const bool kept = read_all(dir + "/out") == known_bytes(5) &&
                    read_all(dir + "/err") == known_bytes(6) && d.failed == 0;
  return kept ? 0 : 3;
}

// Number `fd` becomes the file `path` (created empty), opened with `flags`.
void open_at(const std::string &path, int fd, int flags) {
  close(fd);
  const int opened = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | flags, 0600);
  if (opened < 0) std::exit(1);
  if (opened != fd) {
    // dup3 keeps O_CLOEXEC where asked (dup2 never sets it).
    if (dup3(opened, fd, flags & O_CLOEXEC) != fd) std::exit(1);
    close(opened);
  }
}

int output_descriptor(const std::string &dir, long launches, int fd, const std::string &when) {
  open_at(dir + "/inherited", fd, 0);
  const std::string own = dir + "/own";
  auto take_number = [&](int flags) {
    open_at(own, fd, flags);
    const std::string bytes = known_bytes(fd);
    if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) std::exit(1);
  };
  if (when == "before") take_number(O_CLOEXEC);
  Driver d = load_driver();
  d.launch_n(launches);
  if (when == "after") {
    take_number(0);
    d.launch_n(launches);
  }
  const bool kept = (when == "keep" || read_all(own) == known_bytes(fd)) && d.failed == 0;
  return kept ? 0 : 3;
}

int unload() {
  Driver d = load_driver();
  d.launch_n(3000);
  d.tear_down();
  if (dlclose(d.handle) != 0) die(dlerror());
  void *again = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  std::printf("still_loaded=%d\n", again != nullptr);
  if (again) dlclose(again);
  std::printf("launches=%llu failed=%llu\n", d.launches, d.failed);
  std::fflush(stdout);
  return 0;
}

void synchronize(const Driver &d) {
  CUresult (*sync)() = nullptr;
  lookup_in(d.handle, "cuCtxSynchronize", sync);
  if (sync() != CUDA_SUCCESS) die("cuCtxSynchronize failed");
}

int unload_timed(long n, bool completed) {
  Driver d = load_driver();
  d.launch_n(n);
  if (completed) synchronize(d);
  if (dlclose(d.handle) != 0) die(dlerror());
  void *again = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  std::printf("still_loaded=%d\n", again != nullptr);
  if (again) dlclose(again);
  std::fflush(stdout);
  usleep(500 * 1000);  // CPU work: the shim's reaper reads the replays meanwhile
  std::printf("launches=%llu failed=%llu\n", d.launches, d.failed);
  std::fflush(stdout);
  return 0;
}

int reload_timed(long rounds, long n) {
  unsigned long long launches = 0, failed = 0;
  for (long round = 0; round < rounds; ++round) {
    Driver d = load_driver();
    link_map *map = nullptr;  // the driver's (d.launch is the shim's wrapper)
    if (dlinfo(d.handle, RTLD_DI_LINKMAP, &map) != 0 || !map) die("dlinfo");
    void *base = reinterpret_cast<void *>(map->l_addr);
    d.launch_n(n);
    synchronize(d);
    launches += d.launches;
    failed += d.failed;
    if (dlclose(d.handle) != 0) die(dlerror());
    // The address is free only if the driver was unloaded: then a reload lands elsewhere.
    mmap(base, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  }
  std::printf("launches=%llu failed=%llu\n", launches, failed);
  std::fflush(stdout);
  return 0;
}

}  // namespace

// A "FIELD: N kB" line of /proc/self/status (VmRSS, RssAnon), or -1.
long status_kb(const char *field) {
  long kb = -1;
  if (FILE *status = std::fopen("/proc/self/status", "r")) {
    char line[256];
    const size_t length = std::strlen(field);
    while (std::fgets(line, sizeof line, status))
      if (std::strncmp(line, field, length) == 0 && line[length] == ':' &&
          std::sscanf(line + length + 1, "%ld", &kb) == 1)
        break;
    std::fclose(status);
  }
  return kb;
}

int thread_churn(long n) {
  Driver d = load_driver();
  CUresult (*set_current)(CUcontext) = nullptr;
  lookup(d.handle, "cuCtxSetCurrent", set_current);
  for (long i = 0; i < n; ++i) {
    std::thread worker([&] {
      set_current(d.ctx);  // a context is current per thread
      d.launch_n(1);
    });
    worker.join();
  }
  std::printf("rss_kb=%ld\nlaunches=%llu failed=%llu\n", status_kb("VmRSS"), d.launches, d.failed);
  return 0;
}

void record_named(const char *prefix, long first, long count) {
  char name[201];
  for (long i = first; i < first + count; ++i) {
    const int n = std::snprintf(name, sizeof name, "%s %ld ", prefix, i);
    std::memset(name + n, 'x', sizeof name - 1 - n);
    name[sizeof name - 1] = '\0';
    nvtxRangePushA(name);
    nvtxRangePop();
  }
}

int distinct_names(long n, bool fork_midway) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  const long before = status_kb("RssAnon");
  if (!fork_midway) {
    record_named("range", 0, n);
    std::printf("anon_kb_grown=%ld\n", status_kb("RssAnon") - before);
    return 0;
  }
  record_named("range", 0, n / 2);
  int child_done[2], parent_done[2];
  if (pipe(child_done) != 0 || pipe(parent_done) != 0) die("pipe");
  const pid_t child = fork();
  if (child < 0) die("fork");
  char byte = 0;
  if (child == 0) {
    record_named("child", 0, n / 2);
    if (write(child_done[1], "c", 1) != 1 || read(parent_done[0], &byte, 1) != 1) _exit(1);
    std::exit(0);  // the child's trace is written now, after the parent's names
  }
  if (read(child_done[0], &byte, 1) != 1) die("child");
  record_named("parent", 0, n / 2);
  if (write(parent_done[1], "p", 1) != 1) die("pipe");
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    die("the child failed");
  std::printf("anon_kb_grown=%ld\n", status_kb("RssAnon") - before);
  return 0;
}

int registered_strings(long n) {
  nvtxDomainHandle_t domain = nvtxDomainCreateA("strings");
  nvtxDomainRegisterStringA(domain, "warm-up");  // the recorder attaches at the first NVTX call
  const long file_before = status_kb("RssFile"), anon_before = status_kb("RssAnon");
  char text[64];
  for (long i = 0; i < n; ++i) {
    std::snprintf(text, sizeof text, "string-%ld", i);
    nvtxDomainRegisterStringA(domain, text);
  }
  std::printf("file_kb_grown=%ld anon_kb_grown=%ld\n", status_kb("RssFile") - file_before,
              status_kb("RssAnon") - anon_before);
  return 0;
}

// Samples the sum of `fields` of /proc/self/status (RssAnon; RssFile and RssShmem) every
// millisecond for the rest of the process's life, the exit handlers and library destructors
// included (the recorder reports in one), and keeps its highest growth in `path`: a fixed-width
// number at offset 0, rewritten whenever it grows.
void sample_peak(const char *path, std::vector<const char *> fields) {
  const auto sum = [fields] {
    long kb = 0;
    for (const char *field : fields) kb += status_kb(field);
    return kb;
  };
  const long before = sum();
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("peak file");
  std::thread([fd, before, sum] {
    long peak = -1;
    for (;;) {
      if (const long now = sum() - before; now > peak) {
        peak = now;
        char line[32];
        const int n = std::snprintf(line, sizeof line, "%20ld\n", peak);
        if (pwrite(fd, line, static_cast<size_t>(n), 0) != n) _exit(3);
      }
      usleep(1000);
    }
  }).detach();
  usleep(5000);  // the first sample is in before anything grows
}

int spilled_report(long named, long repeated, const char *peak_path) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  sample_peak(peak_path, {"RssFile", "RssShmem"});
  record_named("range", 0, named);
  for (long i = 0; i < repeated; ++i) {
    nvtxRangePushA("repeated");
    nvtxRangePop();
  }
  std::puts("done");
  return 0;
}

int start_end(long n, const char *peak_path) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  sample_peak(peak_path, {"RssAnon"});
  for (long i = 0; i < n; ++i) nvtxRangeEnd(nvtxRangeStartA("se"));
  std::puts("done");
  return 0;
}

// The attributes of an ASCII message: what the domain (Ex) forms take.
nvtxEventAttributes_t ascii_attributes(const char *message) {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = message;
  return attributes;
}

// Every kind of name NVTX takes from a program, new each time: N ranges with a 200-byte message
// of their own, one range and one mark with a 10 MB message, N/10 domains (a range in every
// hundredth), N registered strings, N thread names.
int hostile_names(long n, const char *peak_path) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  sample_peak(peak_path, {"RssAnon"});
  record_named("range", 0, n);
  std::string huge(10u << 20, 'h');
  huge.replace(0, 5, "huge ");
  nvtxRangePushA(huge.c_str());
  nvtxRangePop();
  nvtxMarkA(huge.c_str());
  char name[64];
  for (long i = 0; i < n; ++i) {
    // Domains stay exact (each its own handle and stacks): a tenth as many, a range in each
    // hundredth.
    nvtxDomainHandle_t domain = nullptr;
    if (i % 10 == 0) {
      std::snprintf(name, sizeof name, "domain %ld", i / 10);
      domain = nvtxDomainCreateA(name);
    }
    if (i % 1000 == 0) {
      const nvtxEventAttributes_t in_domain = ascii_attributes("in a domain");
      nvtxDomainRangePushEx(domain, &in_domain);
      nvtxDomainRangePop(domain);
    }
    if (domain) nvtxDomainDestroy(domain);
    std::snprintf(name, sizeof name, "string %ld", i);
    nvtxDomainRegisterStringA(nullptr, name);
    std::snprintf(name, sizeof name, "thread %ld", i);
    nvtxNameOsThreadA(static_cast<uint32_t>(1000000 + i), name);
  }
  std::printf("done\n");
  return 0;
}

// signal-names N: the handler of a 50 us profiling timer registers a string, creates a domain
// and names the thread while the main thread registers N strings of its own (each registration
// holds the recorder's registry lock for a moment), then prints `handled=<times the handler
// ran> null_handles=<strings it got no handle for>`.
volatile sig_atomic_t g_handled = 0, g_null_handles = 0;

void name_in_handler(int) {
  const int saved_errno = errno;
  g_handled = g_handled + 1;
  if (!nvtxDomainRegisterStringA(nullptr, "from the handler")) g_null_handles = g_null_handles + 1;
  nvtxDomainCreateA("handler's domain");
  nvtxNameOsThreadA(static_cast<uint32_t>(gettid()), "named in a handler");
  errno = saved_errno;
}

int signal_names(long n) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  struct sigaction action {};
  action.sa_handler = name_in_handler;
  sigaction(SIGPROF, &action, nullptr);
  itimerval every{{0, 50}, {0, 50}};
  setitimer(ITIMER_PROF, &every, nullptr);
  char name[64];
  for (long i = 0; i < n; ++i) {
    std::snprintf(name, sizeof name, "string %ld", i);
    nvtxDomainRegisterStringA(nullptr, name);
  }
  itimerval off{};
  setitimer(ITIMER_PROF, &off, nullptr);
  std::printf("handled=%d null_handles=%d\n", static_cast<int>(g_handled),
              static_cast<int>(g_null_handles));
  return 0;
}

int unbalanced_pushes(long n) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  const long before = status_kb("RssAnon");
  for (long i = 0; i < n; ++i) {
    nvtxRangePushA("leaked");
    nvtxRangePushA("inner");
    nvtxRangePop();
  }
  std::printf("anon_kb_grown=%ld\n", status_kb("RssAnon") - before);
  std::thread other([] {
    nvtxRangePushA("after");
    nvtxRangePop();
  });
  other.join();
  return 0;
}

int domain_churn(long n, long threads) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  const long before = status_kb("RssAnon");
  for (long i = 0; i < n; ++i)
    nvtxDomainDestroy(nvtxDomainCreateA(("request " + std::to_string(i)).c_str()));
  const nvtxDomainHandle_t shim = nvtxDomainCreateA("ferrum-replay");
  const nvtxDomainHandle_t late = nvtxDomainCreateA("late");
  std::vector<std::thread> pool;
  for (long t = 0; t < threads; ++t)
    pool.emplace_back([shim, late] {
      const nvtxEventAttributes_t launch = ascii_attributes("launch");
      const nvtxEventAttributes_t late_range = ascii_attributes("late");
      nvtxDomainRangePushEx(shim, &launch);
      nvtxDomainRangePop(shim);
      nvtxDomainRangePushEx(late, &late_range);
      nvtxDomainRangePop(late);
    });
  for (std::thread &t : pool) t.join();
  std::printf("anon_kb_grown=%ld\n", status_kb("RssAnon") - before);
  return 0;
}

int leaked_domains(long threads, long domains, long n) {
  nvtxRangePushA("warm-up");  // the recorder attaches at the first NVTX call
  nvtxRangePop();
  std::vector<nvtxDomainHandle_t> handles;
  for (long d = 0; d < domains; ++d)
    handles.push_back(nvtxDomainCreateA(("leaky " + std::to_string(d)).c_str()));
  const long before = status_kb("RssAnon");
  std::vector<std::thread> pool;
  std::atomic<long> leaked{0}, wrong_levels{0};
  for (long t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      const nvtxEventAttributes_t leaked_range = ascii_attributes("leaked");
      const nvtxEventAttributes_t inner = ascii_attributes("inner");
      for (nvtxDomainHandle_t h : handles)
        for (long i = 0; i < n; ++i) nvtxDomainRangePushEx(h, &leaked_range);
      for (nvtxDomainHandle_t h : handles)
        if (nvtxDomainRangePushEx(h, &inner) != n || nvtxDomainRangePop(h) != n)
          wrong_levels.fetch_add(1);
      leaked.fetch_add(1);
      while (leaked.load() < threads) sched_yield();  // every stack lives until all have leaked
    });
  for (std::thread &t : pool) t.join();
  std::printf("anon_kb_grown=%ld\nwrong_levels=%ld\n", status_kb("RssAnon") - before,
              wrong_levels.load());
  nvtxRangePushA("after");
  nvtxRangePop();
  return 0;
}

int own_tmpdir_write(long n, long mib) {
  for (long i = 0; i < n; ++i) {
    nvtxRangePushA("step");
    nvtxRangePop();
  }
  const char *tmpdir = std::getenv("TMPDIR");
  if (!tmpdir) die("TMPDIR is not set");
  const std::string path = std::string(tmpdir) + "/own.dat";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("own.dat");
  const std::vector<char> block(size_t{1} << 20, 'o');
  for (long written = 0; written < mib; ++written) {
    if (write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
      std::printf("own_write=failed mib=%ld %s\n", written, std::strerror(errno));
      close(fd);
      return 0;
    }
  }
  close(fd);
  std::printf("own_write=ok mib=%ld\n", mib);
  return 0;
}

int host_locale(long n) {
  setlocale(LC_ALL, "");
  std::printf("decimal=%.1f\n", 2.5);
  Driver d = load_driver();
  d.launch_n(n);
  nvtxEventAttributes_t weighed{};
  weighed.version = NVTX_VERSION;
  weighed.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  weighed.messageType = NVTX_MESSAGE_TYPE_ASCII;
  weighed.message.ascii = "weighed";
  weighed.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
  weighed.payload.dValue = 2.5;
  for (long i = 0; i < n; ++i) {
    nvtxRangePushEx(&weighed);
    nvtxRangePop();
  }
  std::printf("launches=%llu failed=%llu\n", d.launches, d.failed);
  return 0;
}

// cancel-pending: see the usage above.
struct CancelPending {
  long n = 0;
  Driver driver;
  CUresult (*set_current)(CUcontext) = nullptr;
  CUresult (*graph_create)(CUgraph *, unsigned) = nullptr;
  CUresult (*add_empty)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t) = nullptr;
  CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long) = nullptr;
  std::atomic<bool> loaded{false};
  std::atomic<unsigned long long> launches{0}, failed{0};
};
CancelPending g_cancel;

// Run also when the first thread is cancelled while it loads the driver: the others then give up
// instead of waiting for ever.
void loading_ended(void *) {
  g_cancel.loaded.store(true);
}

void *launch_with_cancel_pending(void *argument) {
  const long index = reinterpret_cast<long>(argument);
  // From here on a cancellation point would cancel this thread; it reaches none of its own.
  pthread_cancel(pthread_self());
  CancelPending &c = g_cancel;
  if (index == 0) {
    pthread_cleanup_push(loading_ended, nullptr);
    c.driver = load_driver();
    lookup(c.driver.handle, "cuCtxSetCurrent", c.set_current);
    lookup(c.driver.handle, "cuGraphCreate", c.graph_create);
    lookup(c.driver.handle, "cuGraphAddEmptyNode", c.add_empty);
    lookup(c.driver.handle, "cuGraphInstantiateWithFlags", c.instantiate);
    // The program's first NVTX call (the recorder's initialisation), before the others make
    // theirs: NVTX's own lazy set-up of a module is not safe against concurrent first calls.
    nvtxRangePushA("warm-up");
    nvtxRangePop();
    pthread_cleanup_pop(1);
  }
  while (!c.loaded.load()) sched_yield();  // not a cancellation point
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  CUgraphExec exec = nullptr;
  if (!c.instantiate || c.set_current(c.driver.ctx) != CUDA_SUCCESS ||
      c.graph_create(&graph, 0) != CUDA_SUCCESS ||
      c.add_empty(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
      c.instantiate(&exec, graph, 0) != CUDA_SUCCESS) {
    c.failed.fetch_add(1);
    return nullptr;
  }
  for (long i = 0; i < c.n; ++i) {
    c.launches.fetch_add(1);
    if (c.driver.launch(exec, nullptr) != CUDA_SUCCESS) c.failed.fetch_add(1);
  }
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "cancel %ld", index);
  record_named(prefix, 0, c.n);
  return reinterpret_cast<void *>(1);
}

void *wait_for_ever(void *) {
  for (;;) pause();
}

int cancel_pending(long threads, long n) {
  std::fflush(stdout);
  g_cancel.n = n;
  std::vector<pthread_t> workers(static_cast<size_t>(threads));
  for (long i = 0; i < threads; ++i)
    if (pthread_create(&workers[static_cast<size_t>(i)], nullptr, launch_with_cancel_pending,
                       reinterpret_cast<void *>(i)) != 0)
      die("pthread_create");
  long returned = 0, cancelled = 0;
  for (pthread_t worker : workers) {
    void *result = nullptr;
    pthread_join(worker, &result);
    returned += result == reinterpret_cast<void *>(1);
    cancelled += result == PTHREAD_CANCELED;
  }
  std::printf("returned=%ld cancelled=%ld launches=%llu failed=%llu\n", returned, cancelled,
              g_cancel.launches.load(), g_cancel.failed.load());
  std::fflush(stdout);
  pthread_t sleeper;
  if (pthread_create(&sleeper, nullptr, wait_for_ever, nullptr) != 0) die("pthread_create");
  pthread_detach(sleeper);
  pthread_cancel(pthread_self());  // pending while exit() runs the exit hooks
  return 0;
}

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "descriptors" && argc >= 4)
    return descriptors(argv[2], std::atol(argv[3]), argc > 4 && std::strcmp(argv[4], "dup2") == 0);
  if (mode == "unload") return unload();
  if (mode == "unload-timed" && argc >= 4)
    return unload_timed(std::atol(argv[2]), std::strcmp(argv[3], "completed") == 0);
  if (mode == "reload-timed" && argc >= 4)
    return reload_timed(std::atol(argv[2]), std::atol(argv[3]));
  if (mode == "thread-churn" && argc >= 3) return thread_churn(std::atol(argv[2]));
  if (mode == "standard-streams" && argc >= 5)
    return standard_streams(argv[2], std::atol(argv[3]), std::strcmp(argv[4], "before") == 0);
  if (mode == "output-descriptor" && argc >= 6)
    return output_descriptor(argv[2], std::atol(argv[3]), std::atoi(argv[4]), argv[5]);
  if (mode == "unbalanced-pushes" && argc >= 3) return unbalanced_pushes(std::atol(argv[2]));
  if (mode == "locale" && argc >= 3) return host_locale(std::atol(argv[2]));
  if (mode == "leaked-domains" && argc >= 5)
    return leaked_domains(std::atol(argv[2]), std::atol(argv[3]), std::atol(argv[4]));
  if (mode == "domain-churn" && argc >= 4)
    return domain_churn(std::atol(argv[2]), std::atol(argv[3]));
  if (mode == "cancel-pending" && argc >= 4)
    return cancel_pending(std::atol(argv[2]), std::atol(argv[3]));
  if (mode == "signal-names" && argc >= 3) return signal_names(std::atol(argv[2]));
  if (mode == "hostile-names" && argc >= 4) return hostile_names(std::atol(argv[2]), argv[3]);
  if (mode == "start-end" && argc >= 4) return start_end(std::atol(argv[2]), argv[3]);
  if (mode == "registered-strings" && argc >= 3) return registered_strings(std::atol(argv[2]));
  if (mode == "spilled-report" && argc >= 5)
    return spilled_report(std::atol(argv[2]), std::atol(argv[3]), argv[4]);
  if (mode == "distinct-names" && argc >= 3)
    return distinct_names(std::atol(argv[2]), argc > 3 && std::strcmp(argv[3], "fork") == 0);
  if (mode == "own-tmpdir-write" && argc >= 4)
    return own_tmpdir_write(std::atol(argv[2]), std::atol(argv[3]));
  std::fprintf(
      stderr,
      "usage: host_resources descriptors DIR N [close|dup2] | "
      "standard-streams DIR N before|after | output-descriptor DIR N FD keep|before|after | "
      "unload | unload-timed N in-flight|completed | "
      "reload-timed ROUNDS N | thread-churn N | "
      "distinct-names N [fork] | hostile-names N PEAKFILE | start-end N PEAKFILE | signal-names N "
      "| unbalanced-pushes N | leaked-domains THREADS DOMAINS N | domain-churn N THREADS | "
      "cancel-pending THREADS N | locale N | own-tmpdir-write N MIB | registered-strings N | "
      "spilled-report NAMED REPEATED PEAKFILE\n");
  return 1;
}
