#include "range/process_files.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "errno_kept.hpp"
#include "error_text.hpp"
#include "no_cancel.hpp"
#include "output_file.hpp"
#include "own_descriptor.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

// FERRUM_REPLAY_RUNNING_DIR as the settings hold it (set_running_dir): a pattern, or "".
const char *g_running_dir = nullptr;

// The running marker. `g_marker_claimed`: the process (pid) one of whose threads took on
// writing it — a fork() child inherits its parent's pid here, so it writes a
// marker of its own. `g_marker_ready`: the process whose marker below is complete (taken back
// to 0 by whoever removes it: once). `g_marker_settled`: the process whose claiming thread is
// done, marker made or not. `g_exiting`: the process whose exit hook has begun — a marker is
// no longer made, and one made meanwhile is removed (remove_running_marker).
std::atomic<int> g_marker_claimed{0};
std::atomic<int> g_marker_ready{0};
std::atomic<int> g_marker_settled{0};
std::atomic<int> g_exiting{0};
// This thread is making the marker: an exit on it (a signal handler's) waits for nobody.
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_making_marker = false;
char g_marker_path[common::kMaxExpandedPath + 160];
dev_t g_marker_device;
ino_t g_marker_inode;

// Paths of up to 4095 bytes each: in static storage, not on the stack of a launching thread
// (which may be small, or a signal handler's); only the one thread that claimed the marker
// (g_marker_claimed) uses them. (common::running_marker_name keeps no path of its own on the
// stack either; the pattern's expansion takes about 4 KiB of it. The first launch stays within
// PTHREAD_STACK_MIN: fault first_launch_on_smallest_stack.)
// The working directory when the shim activated (note_working_directory), or "" where it could
// not be read (removed already, or longer than this).
char g_working_directory[common::kMaxExpandedPath + 1];
bool g_working_directory_too_long = false;  // note_working_directory

struct MarkerScratch {
  char directory[common::kMaxExpandedPath + 1];
  char path[2 * common::kMaxExpandedPath + 128];
  char marker[sizeof g_marker_path];
  char unmarked[sizeof g_marker_path];
} g_scratch;

// No marker could be made in the directory whose stem is m.path (no space or no inode left on
// its file system, a quota, every sibling name taken): a process that then ended without its
// summary would go unreported, and the gate passed on the other processes' counts (review
// DD-1). The wrapper's canary there (common::kMarkerCanarySuffix) is renamed to say so — a
// rename within a directory needs no new inode. Nothing happens where there is none (the user's
// own directory, a remote node's missing one, no permission).
void report_unmarked(MarkerScratch &m) {
  const int from = snprintf(m.marker, sizeof m.marker, "%s%s", m.path, common::kMarkerCanarySuffix);
  const int to = snprintf(m.unmarked, sizeof m.unmarked, "%s%s", m.path, common::kUnmarkedSuffix);
  if (from < 0 || to < 0 || static_cast<size_t>(from) >= sizeof m.marker ||
      static_cast<size_t>(to) >= sizeof m.unmarked)
    return;
  (void)rename(m.marker, m.unmarked);
}

enum class MarkerMade { made, no_directory, failed };

MarkerMade try_running_marker(const char *pattern, int pid);

void make_running_marker(const char *pattern, int pid) {
  if (try_running_marker(pattern, pid) == MarkerMade::failed) report_unmarked(g_scratch);
}

MarkerMade try_running_marker(const char *pattern, int pid) {
  MarkerScratch &m = g_scratch;
  if (!expand_process_pattern(pattern, m.directory, sizeof m.directory))
    return MarkerMade::no_directory;
  // DIR/ferrum-replay.PID.running; absolute, so that the exit finds it wherever the program's
  // working directory went.
  size_t end = strlen(m.directory);
  while (end > 1 && m.directory[end - 1] == '/') m.directory[--end] = '\0';
  int fits = -1;
  if (m.directory[0] == '/')
    fits = snprintf(m.path, sizeof m.path, "%s/ferrum-replay", m.directory);
  else if (g_working_directory[0])
    fits = snprintf(m.path, sizeof m.path, "%s/%s/ferrum-replay", g_working_directory, m.directory);
  if (fits < 0 || static_cast<size_t>(fits) >= sizeof m.path) return MarkerMade::no_directory;
  // O_EXCL: a marker already there is never replaced, and this one is made beside it. It is
  // another process's of the same pid number: an earlier image of this process, which launched
  // and then replaced itself with exec, or a process in another PID namespace (containers that
  // share the run directory) — the judges must see both.
  int fd = -1;
  bool made_without_descriptor = false;
  size_t stem_length = 0;
  for (unsigned sibling = 0;
       fd < 0 && !made_without_descriptor && sibling <= common::kMaxMarkerSibling; ++sibling) {
    if (sibling == 0
            ? !common::running_marker_name(m.path, pid, 0, m.marker, sizeof m.marker, &stem_length)
            : !common::running_marker_sibling(m.marker, sizeof m.marker, stem_length, pid, sibling))
      return MarkerMade::failed;
    fd = open(m.marker, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    // No descriptor free (the program is at its open-file limit: a server that holds
    // thousands of sockets): the marker is made without one, empty — it names the process by
    // its pid (the judges show its program as '?'). Its absence was a pass: the process that
    // had no descriptor for the marker had none for its summary either, and the gate said OK
    // without its launches (F142).
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
      if (mknod(m.marker, S_IFREG | 0644, 0) == 0)
        made_without_descriptor = true;
      else if (errno != EEXIST)
        return MarkerMade::failed;
      continue;
    }
    // Nothing said when it cannot be made (no such directory: a remote node of a job whose
    // wrapper made it here; no permission; no space): the marker is the wrapper's business,
    // not the program's; report_unmarked tells the wrapper's judges.
    if (fd < 0 && errno != EEXIST) return MarkerMade::failed;
  }
  if (made_without_descriptor) {
    struct stat st {};
    if (lstat(m.marker, &st) != 0 || !S_ISREG(st.st_mode)) return MarkerMade::failed;
    memcpy(g_marker_path, m.marker, strlen(m.marker) + 1);
    g_marker_device = st.st_dev;
    g_marker_inode = st.st_ino;
    g_marker_ready.store(pid, std::memory_order_release);
    return MarkerMade::made;
  }
  if (fd < 0) return MarkerMade::failed;
  // The program's name (the file it runs, without its directory; from the auxiliary vector:
  // glibc's program_invocation_short_name would cost every process a symbol lookup at load),
  // printable ASCII only: a judge quotes the line it finds here.
  const char *file = reinterpret_cast<const char *>(getauxval(AT_EXECFN));
  const char *slash = file ? strrchr(file, '/') : nullptr;
  const char *base = slash ? slash + 1 : file;
  char program[65];
  size_t n = 0;
  for (const char *c = base; c && *c && n + 1 < sizeof program; ++c)
    program[n++] = *c > ' ' && *c < 127 ? *c : '?';
  program[n] = '\0';
  // The program image (its file's device and inode): a process of that pid running another
  // image later has replaced this one with exec — lost, not still running.
  struct stat image {};
  if (stat("/proc/self/exe", &image) != 0) image = {};
  // Its PID namespace: the pid means this process only to a judge in the same one.
  struct stat pid_namespace {};
  if (stat("/proc/self/ns/pid", &pid_namespace) != 0) pid_namespace = {};
  char text[320];
  const int length =
      snprintf(text, sizeof text,
               "ferrum-replay: running: pid=%d program=%s image=%llx:%llx pidns=%llx\n"
               "This process launched CUDA graphs. The file goes at its exit hook (a normal "
               "exit), once the launch summary asked for (if any) is written whole.\n",
               pid, program, static_cast<unsigned long long>(image.st_dev),
               static_cast<unsigned long long>(image.st_ino),
               static_cast<unsigned long long>(pid_namespace.st_ino));
  // A line that cannot be written (a full disk, a file size limit: what will keep the summary
  // from being written too) leaves the marker empty, not half a line: it still names the
  // process by its pid (a judge shows its program as '?'), and stays if the summary is missing.
  common::OwnDescriptor marker(fd, m.marker);  // proved before each use (own_descriptor.hpp)
  if (length <= 0 || marker.write_all(text, static_cast<size_t>(length)) != 0) {
    const int truncated = marker.ours() ? ftruncate(marker.get(), 0) : 0;  // shrinking: no limit
    (void)truncated;
  }
  struct stat st {};
  const bool made = marker.ours() && fstat(marker.get(), &st) == 0;
  marker.close();
  if (!made) {
    unlink(m.marker);
    return MarkerMade::failed;
  }
  memcpy(g_marker_path, m.marker, strlen(m.marker) + 1);
  g_marker_device = st.st_dev;
  g_marker_inode = st.st_ino;
  g_marker_ready.store(pid, std::memory_order_release);
  return MarkerMade::made;
}

}  // namespace

bool expand_process_pattern(const char *pattern, char *out, size_t out_size, char *unset,
                            size_t unset_size) {
  char host[256];
  common::host_name(host, sizeof host);
  return common::expand_pattern(pattern, static_cast<long>(getpid()), host, common::process_env,
                                nullptr, out, out_size, unset, unset_size);
}

bool summary_file_path(const char *given, char *out, size_t out_size) {
  const size_t length = strlen(given);
  const int n = length > 0 && given[length - 1] == '/'
                    ? snprintf(out, out_size, "%sferrum-replay-summary.%d.txt", given,
                               static_cast<int>(getpid()))
                    : snprintf(out, out_size, "%s", given);
  return n >= 0 && static_cast<size_t>(n) < out_size;
}

void note_working_directory() {
  if (getcwd(g_working_directory, sizeof g_working_directory)) return;
  g_working_directory[0] = '\0';
  // Longer than any path we could write to (ERANGE): a relative output name cannot be written
  // where the process started. Resolved at exit instead, it landed wherever the program had
  // gone meanwhile; the summary's one line says the name is too long instead.
  g_working_directory_too_long = errno == ERANGE || errno == ENAMETOOLONG;
}

bool make_absolute(char *path, size_t size) {
  if (path[0] == '/' || path[0] == '\0') return true;
  if (g_working_directory_too_long) return false;
  if (!g_working_directory[0]) return true;
  const size_t directory = strlen(g_working_directory);
  const size_t length = strlen(path);
  if (directory + 1 + length + 1 > size) return false;
  memmove(path + directory + 1, path, length + 1);
  memcpy(path, g_working_directory, directory);
  path[directory] = '/';
  return true;
}

void set_running_dir(const char *pattern) {
  g_running_dir = pattern;
}

namespace {

// Only the file created, and only once: a program may have removed or replaced it, and what is
// there then is not ours to remove. Why the marker had to stay, or nullptr.
const char *remove_marker_of(int pid) {
  int ready = pid;
  if (!g_marker_ready.compare_exchange_strong(ready, 0, std::memory_order_acq_rel)) return nullptr;
  struct stat st {};
  if (lstat(g_marker_path, &st) != 0)
    // Gone (the program removed it, or a chroot() hides it: that one stays, unseen here).
    return errno == ENOENT ? nullptr : common::error_text(errno);
  if (st.st_dev != g_marker_device || st.st_ino != g_marker_inode)
    return "it is no longer the file this process made";
  if (unlink(g_marker_path) != 0) return common::error_text(errno);  // after setuid(): EACCES
  return nullptr;
}

}  // namespace

void note_launching_process() {
  const int pid = static_cast<int>(getpid());
  int claimed = g_marker_claimed.load(std::memory_order_relaxed);
  // Done already, or another thread of this process is on it (never waited for).
  if (claimed == pid ||
      !g_marker_claimed.compare_exchange_strong(claimed, pid, std::memory_order_seq_cst))
    return;
  const char *pattern = g_running_dir;
  // After the exit hook began, nothing is promised: it would never be kept. (The claim and
  // this look pair with the hook's: one of the two sees the other.)
  if (pattern && pattern[0] && g_exiting.load(std::memory_order_seq_cst) != pid) {
    const common::ErrnoKept errno_kept;  // errno_kept.hpp
    const common::NoCancel no_cancel;    // no_cancel.hpp: open, write and close follow
    t_making_marker = true;
    make_running_marker(pattern, pid);
    t_making_marker = false;
  }
  g_marker_settled.store(pid, std::memory_order_seq_cst);
  // The exit hook stopped waiting for this thread: the marker is this thread's to take back.
  if (g_exiting.load(std::memory_order_seq_cst) == pid) {
    const common::ErrnoKept errno_kept;
    remove_marker_of(pid);
  }
}

const char *running_marker_path() {
  return g_marker_ready.load(std::memory_order_acquire) == static_cast<int>(getpid())
             ? g_marker_path
             : nullptr;
}

MarkerLeft remove_running_marker() {
  const int pid = static_cast<int>(getpid());
  g_exiting.store(pid, std::memory_order_seq_cst);
  // Another thread's first launch is making the marker (a few system calls): wait for it, so
  // that a normal exit during it leaves none — bounded (1 s: a file system that slow holds
  // the summary's own write as long); past that, the thread removes it itself if it still runs.
  if (!t_making_marker && g_marker_claimed.load(std::memory_order_seq_cst) == pid) {
    for (int spin = 0; spin < 64 + 1000 && g_marker_settled.load(std::memory_order_seq_cst) != pid;
         ++spin) {
      if (spin < 64) {
        sched_yield();
      } else {
        timespec pause{0, 1000 * 1000};  // 1 ms
        nanosleep(&pause, nullptr);
      }
    }
  }
  return {remove_marker_of(pid), g_marker_path};
}

}  // namespace ferrum_replay::shim
