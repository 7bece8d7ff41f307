// A plain NVTX program that calls NVTX, or exits, where the recorder is inside fork() or shares
// its parent's memory: the recorder's end-to-end tests run it (test_recorder.py, F161, F162).
//
//   fork_exit_client handler WHAT   pthread_atfork handlers registered before the first NVTX call
//                                   (so they run inside the recorder's fork window) make the NVTX
//                                   call WHAT (see kHandlerCalls) in the prepare, the parent or
//                                   the child handler; a worker thread forks. Prints
//                                   "child status N" and "parent done".
//   fork_exit_client exit-in-fork   a SIGALRM handler calls exit(0) 20 to 70 ms in while the
//                                   process forks in a loop, 64 MiB touched so that each fork
//                                   takes a while: the signal lands inside fork() in some runs.
//   fork_exit_client vfork-exit     one range, vfork(), the child's exec fails and it calls
//                                   exit(127) (not _exit), the parent waits and records one more.
//   fork_exit_client fork-in-fork   a single-threaded server forks 300 times while a SIGALRM
//                                   handler, every 3 ms, forks too: some land inside fork().
//                                   Prints "done".
//   fork_exit_client newpid-child   one range; a child in a new pid namespace (clone, a copy of
//                                   memory, no fork handlers) names its thread with the parent's
//                                   pid number (ns_last_pid), prints a line into a full stdout
//                                   buffer and calls exit(0). Prints "skip: WHY" where the
//                                   namespace or ns_last_pid is not allowed.
// WHAT "gpu-flush": the handler asks the shim for the GPU times so far (ferrum_replay_gpu_flush,
// looked up: run it with a GPU sink's shim preloaded, the fake one of this directory).
#include <dlfcn.h>
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string g_call;  // which handler makes which call: "prepare-mark", "child-domain", ...

uint32_t this_thread() {
  return static_cast<uint32_t>(syscall(SYS_gettid));
}

void call(const char *when) {
  const std::string prefix = std::string(when) + "-";
  if (g_call.compare(0, prefix.size(), prefix) != 0) return;
  const std::string what = g_call.substr(prefix.size());
  if (what == "mark") nvtxMarkA("in a fork handler");
  if (what == "range") {
    nvtxRangePushA("in a fork handler");
    nvtxRangePop();
  }
  if (what == "domain") nvtxDomainCreateA(("created in the " + std::string(when)).c_str());
  if (what == "string") nvtxDomainRegisterStringA(nullptr, "a string from a fork handler");
  if (what == "thread-name") nvtxNameOsThreadA(this_thread(), "named in a fork handler");
  if (what == "category") nvtxNameCategoryA(7, "named in a fork handler");
  if (what == "start-end") nvtxRangeEnd(nvtxRangeStartA("in a fork handler"));
  if (what == "gpu-flush") {
    using Flush = int (*)(void *);
    if (auto flush = reinterpret_cast<Flush>(dlsym(RTLD_DEFAULT, "ferrum_replay_gpu_flush")))
      flush(nullptr);
  }
}
void prepare() {
  call("prepare");
}
void parent() {
  call("parent");
}
void child() {
  call("child");
}

void *forker(void *) {
  const pid_t pid = fork();
  if (pid == 0) {
    nvtxRangePushA("child");
    nvtxRangePop();
    std::exit(0);  // the child's own trace
  }
  int status = -1;
  waitpid(pid, &status, 0);
  std::printf("child status %d\n", status);
  return nullptr;
}

int handler(const char *what) {
  g_call = what;
  pthread_atfork(prepare, parent, child);  // a library's, before the first NVTX call
  nvtxRangePushA("main");                  // the recorder starts here, registers its handlers
  nvtxRangePop();
  pthread_t
      thread;  // forks on a thread that never used NVTX: a prepare handler's call is its first
  pthread_create(&thread, nullptr, forker, nullptr);
  pthread_join(thread, nullptr);
  nvtxRangePushA("after");
  nvtxRangePop();
  std::puts("parent done");
  return 0;
}

void exit_now(int) {
  std::exit(0);
}

// A forking server's start: one range (the recorder is running), 64 MiB of touched memory (each
// fork copies its page tables, so a signal lands inside fork() often), `handler` on SIGALRM.
void start_server(void (*handler)(int), int flags) {
  nvtxRangePushA("serve");
  nvtxRangePop();
  static char ballast[64 << 20];
  std::memset(ballast, 1, sizeof ballast);
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = handler;
  action.sa_flags = flags;
  sigaction(SIGALRM, &action, nullptr);
}

int exit_in_fork() {
  start_server(exit_now, 0);
  const itimerval in{{0, 0}, {0, 20000 + (getpid() % 50) * 1000}};
  setitimer(ITIMER_REAL, &in, nullptr);
  for (;;) {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
}

void fork_now(int) {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(pid, nullptr, 0);
}

int fork_in_fork() {
  start_server(fork_now, SA_RESTART);
  const itimerval every{{0, 3000}, {0, 3000}};
  setitimer(ITIMER_REAL, &every, nullptr);
  for (int i = 0; i < 300; ++i) {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0)
      while (waitpid(pid, nullptr, 0) < 0) {
      }
  }
  const itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
  std::puts("done");
  return 0;
}

void *sleep_for_ever(void *) {
  pause();
  return nullptr;
}

int newpid_child() {
  nvtxRangePushA("parent");
  nvtxRangePop();
  const pid_t parent = getpid();
  int ready[2];
  if (pipe(ready) != 0) return 2;
  const long child = syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0);
  if (child < 0) {
    std::printf("skip: clone(CLONE_NEWPID): %d\n", errno);
    return 0;
  }
  if (child == 0) {
    // The parent's pid number, as the next TID in this namespace: the thread made next has it.
    const int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
    char number[32];
    const int n = std::snprintf(number, sizeof number, "%d", static_cast<int>(parent) - 1);
    const bool named = fd >= 0 && write(fd, number, n) == n;
    pthread_t thread;
    pthread_create(&thread, nullptr, sleep_for_ever, nullptr);
    static char buffer[4096];
    setvbuf(stdout, buffer, _IOFBF, sizeof buffer);  // flushed by exit() only
    std::printf(named ? "child output\n" : "skip: ns_last_pid not writable\n");
    std::exit(0);
  }
  int status = -1;
  waitpid(static_cast<pid_t>(child), &status, 0);
  std::printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

int vfork_exit() {
  nvtxRangePushA("before");
  nvtxRangePop();
  const pid_t pid = vfork();
  if (pid == 0) {
    execl("/nonexistent/program", "program", static_cast<char *>(nullptr));
    std::exit(127);  // the classic mistake: _exit is what a vfork child may call
  }
  int status = -1;
  waitpid(pid, &status, 0);
  std::printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  nvtxRangePushA("after");
  nvtxRangePop();
  std::printf("pid\t%d\n", static_cast<int>(getpid()));
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);  // a fork child must not write the parent's buffer again
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "handler" && argc > 2) return handler(argv[2]);
  if (mode == "exit-in-fork") return exit_in_fork();
  if (mode == "vfork-exit") return vfork_exit();
  if (mode == "fork-in-fork") return fork_in_fork();
  if (mode == "newpid-child") return newpid_child();
  std::fprintf(stderr,
               "usage: fork_exit_client handler WHAT | exit-in-fork | vfork-exit | fork-in-fork | "
               "newpid-child\n");
  return 2;
}
