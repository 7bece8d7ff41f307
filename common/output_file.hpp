// Writing an output file (the recorder's trace, the shim's summary) without ever harming the
// host: no unbounded wait, no partial file at the final name, no file that is not ours
// replaced, no symbolic link followed, and a device, FIFO or descriptor path written as the
// stream it is. libstdc++-free like text_rules.hpp; errors are errno values (0 = success).
#pragma once

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

namespace ferrum_replay::common {

// write(2) until everything is written, retrying EINTR. 0, or the errno of the failure.
int write_all(int fd, const void *data, size_t length);

// ---- streams ----

// Whether `path` names a stream rather than a file to create: /dev/stdout, /dev/stderr,
// /dev/stdin, /dev/fd/N, /proc/self/fd/N (also thread-self and this process's pid), or a path
// that is itself (lstat: a symbolic link at the name is never followed) a character device, a
// FIFO or a socket.
bool is_stream_target(const char *path);

// An open stream. Writing never creates, renames or truncates anything, and never waits more
// than `stall_ms` without progress for the reader to make room (a full pipe, a terminal nobody
// reads or that is stopped), nor, for all of this library's streams to one file together (each
// log line is one), longer than `stall_ms` plus what kMinStreamRate allows for what they wrote
// there: a reader that takes a page now and then, or none at all, costs `stall_ms` once, and
// the file then gets only the room there is (output_file.cpp: FileWaits). Every write is
// non-blocking, on a description of our own (reopened, O_NONBLOCK), on a host descriptor the
// host made non-blocking itself, on a host descriptor with pwritev2(RWF_NOWAIT) per write, or
// with send(MSG_DONTWAIT) on a socket. The flags of a host's open file description are never
// changed.
struct Stream {
  int fd = -1;
  bool owned = false;         // opened here (closed by close_stream), not the host's descriptor
  bool socket = false;        // a socket: send(MSG_DONTWAIT | MSG_NOSIGNAL)
  bool regular = false;       // a regular file behind a descriptor path: plain writes
  bool nowait = false;        // the host's blocking descriptor: pwritev2(..., -1, RWF_NOWAIT)
  bool nowait_known = false;  // a RWF_NOWAIT write succeeded: the kernel can do it here
  int stall_ms = 2000;
  uint64_t file = 0;      // the file's identity (device, inode)
  void *waits = nullptr;  // the file's account of waits (output_file.cpp: FileWaits)
};
// The slowest reader waited for, in bytes per millisecond (about 64 KiB/s): the allowance each
// byte a file took adds to its wait, beyond the first `stall_ms`.
inline constexpr uint64_t kMinStreamRate = 64;

// Opens the stream `path` names for writing. A descriptor path: EBADF if that descriptor of
// this process is not open for writing; a regular file or a socket behind it, or one the host
// made O_NONBLOCK, is written through the host's descriptor. Anything else (a terminal, a pipe,
// a device) is blocking, and this is where the way to write it without waiting is decided:
//   1. reopened through /proc/thread-self/fd/N as our own O_NONBLOCK description — first,
//      because it works for every kind of file (terminals and devices too) and it is the path
//      every common case has always taken;
//   2. only where that is impossible (a pipe of another user: EACCES; a program that
//      chroot()ed or whose /proc is gone: ENOENT; no descriptor left: EMFILE; /proc showing
//      another file), the host's descriptor itself, every write a pwritev2(RWF_NOWAIT): a
//      per-call non-blocking write that changes no flag of the host's description (EAGAIN:
//      full, the same bounded wait). The kernel tells at the first write whether it can do
//      that for this file (anonymous pipes on Linux 5.x and later; not terminals, not named
//      FIFOs on 6.18): where it cannot (EOPNOTSUPP, EINVAL, ENOSYS), stream_write returns
//      kStreamNotReopenable and nothing is written, as before.
// Descriptor 0 (/dev/stdin, /dev/fd/0), the program's input: always EBADF. A pipe whose reader
// is gone: ENXIO. Any other path is opened O_NONBLOCK|O_NOFOLLOW without
// O_CREAT (a FIFO without a reader: ENXIO) and must still be a stream once open. 0 or errno.
int open_stream(const char *path, Stream *stream);
// The error of a blocking descriptor of the host that can neither be reopened non-blocking nor
// be written with RWF_NOWAIT (from open_stream or the first stream_write).
inline constexpr int kStreamNotReopenable = EWOULDBLOCK;
// The host's standard output and error (descriptors 1 and 2) as first seen: their file
// (device and inode), or that they were closed. Noted once, when the shim or the recorder
// starts (settings read, first NVTX call). From then on open_stream writes to /dev/stdout or
// /dev/stderr only while that descriptor still names the same file: a program that closed its
// stderr and opened a file of its own — which took number 2 — must not find our summary in
// that file. A descriptor that was closed when noted: EBADF; one that names another file now,
// or that has FD_CLOEXEC (a stream inherited through exec never has it: the program opened
// this file itself, before or after the note): kStreamReplaced. Without a note, only the
// FD_CLOEXEC check.
void note_standard_streams();
// The same for the descriptor 3 or above that an output setting names (/dev/fd/5,
// /proc/self/fd/5: a descriptor the user opened for us, `5>trace.json`), noted when the
// setting is read. open_stream writes to descriptor N >= 3 only as noted here: one no setting
// named when we started (a pattern that expanded to it later) is kStreamReplaced — number N is
// otherwise the program's own, whose database or socket may have taken it.
void note_output_stream(const char *path);
inline constexpr int kStreamReplaced = ESTALE;
// 0, or errno (ETIMEDOUT when the reader made no room within stall_ms, or too slowly;
// kStreamNotReopenable when the first RWF_NOWAIT write finds the kernel unable to, nothing
// written).
int stream_write(Stream *stream, const void *data, size_t length);
void close_stream(Stream *stream);
// What a message adds to error_text(error) of a stream: " (no process is reading it)", ... or "".
const char *stream_error_note(int error);

// ---- files written aside, then moved into place ----

// A temporary beside `path`: "PATH.HOSTTAG.PID.N.tmp" (HOSTTAG: 8 hex digits of the host
// name), created O_EXCL|O_NOFOLLOW, mode 0644 minus the umask. Where that name would exceed the
// file system's limit for a name (NAME_MAX), the last component of PATH is shortened first by
// the one rule of shortened_component. Returns the descriptor and the name in `tmp`, or -errno.
// The name is also kept as this process's temporary in progress until temp_finished().
int create_temp_beside(const char *path, char *tmp, size_t tmp_size);
// The temporary in progress is placed or removed (call after either).
void temp_finished();
// An exit that ends the process while the temporary is being written (a signal handler's exit()
// interrupting the exit report): removes it, rather than leave a file of a dead process's that
// no later run removes (its name, a %p pattern's, never comes back). True when one was removed.
// Only the process that made it removes it (not a fork child that exits while its parent
// writes). Async-signal-safe: an unlink of a name kept in static storage.
bool remove_temp_in_progress();

// Removes the temporaries of `path` (the names above, shortened the same way) left by processes
// of this host that no longer exist: regular files owned by this user that are empty or start
// with `header`. What is not certainly such a leftover is never touched. Returns how many were
// removed.
// With `path_of_pid` (an output pattern with %p: each process's name is its own, and a dead
// one's never comes back): also the temporaries, in the same directory, of the name that
// pattern gives the dead process that made each (the pid in the temporary's name), with the
// same checks. `path_of_pid` writes that name into `out` (false: none).
using PathOfPid = bool (*)(long pid, char *out, size_t out_size, void *context);
int remove_dead_temps(const char *path, const char *header, PathOfPid path_of_pid = nullptr,
                      void *context = nullptr);

// The mark a process keeps while it runs (the shim's, shim/range/process_files.hpp):
// "PATH.PID.running", or with `sibling` 1..kMaxMarkerSibling "PATH.PID.SIBLING.running" (another
// process of that pid number made the first: an earlier image, or a process in another PID
// namespace), PATH shortened exactly as for its temporaries (the suffix is not longer than
// theirs). Keeps no path on the stack (`out` is its scratch). False if it does not fit `out`.
// 9999: sandboxed workers are each pid 1 of a PID namespace of their own, all sharing one run
// directory; with 15, the 17th had no marker, and a loss of it went unreported (F142).
inline constexpr unsigned kMaxMarkerSibling = 9999;
// `stem_length` (when given): where the suffix begins, for running_marker_sibling.
bool running_marker_name(const char *path, int pid, unsigned sibling, char *out, size_t out_size,
                         size_t *stem_length = nullptr);
// The canary of a markers' directory the wrapper made (docs/reliability.md): STEM + this suffix
// (DIR/ferrum-replay.all-marked) is made before the run; a process that cannot make its marker
// there renames it to STEM + kUnmarkedSuffix (a rename needs no new inode, where no space or
// inode is left), and the judges fail the run: a process went unmarked, and a loss of it
// would go unreported. The judges' copy: scripts/ferrum_replay_traces.py MARKER_CANARY; the
// wrapper's: scripts/ferrum_replay_run_program.sh arm_marker_canary.
inline constexpr char kMarkerCanarySuffix[] = ".all-marked";
inline constexpr char kUnmarkedSuffix[] = ".unmarked";
// A name made by running_marker_name (its `stem_length`) given sibling `sibling`'s suffix in
// place: the stem is kept, not computed again. False if it does not fit.
bool running_marker_sibling(char *marker, size_t marker_size, size_t stem_length, int pid,
                            unsigned sibling);

// The longest name (one path component) the file system of `path`'s directory accepts.
size_t name_limit(const char *path);
// The one shortening rule: `component` (length bytes) unchanged if it fits into `room` bytes,
// else its first bytes (cut at a UTF-8 character boundary) + "~" + 8 hex digits of the FNV-1a
// hash of the whole component, `room` bytes in all. False if `out` is too small or room < 10.
bool shortened_component(const char *component, size_t length, size_t room, char *out,
                         size_t out_size);
// fresh_name (docs/text-rules.md), with NAME shortened by the rule above where the fresh name's
// last component would exceed name_limit(path).
bool fresh_name_within(const char *path, const char *token, char *out, size_t out_size);
bool fresh_name_within(const char *path, unsigned long token, char *out, size_t out_size);

// Gives `from` the name `to` unless something has it (RENAME_NOREPLACE, or link+unlink where
// the file system lacks it). 0, EEXIST, or another errno.
int rename_no_replace(const char *from, const char *to);

// Moves `tmp` to `path`, or if that is taken, to the first free fresh name PATH.1.EXT ..
// PATH.99.EXT (fresh_name_within). The name taken goes to `placed`. 0, or errno (EEXIST when
// all were taken).
int place_fresh(const char *tmp, const char *path, char *placed, size_t placed_size);

// Gives the finished temporary `tmp` its final name, the one rule for the trace and the summary.
// What is at `path` (lstat: never followed) decides:
//   nothing: the name itself (RENAME_NOREPLACE: a file that appears meanwhile is kept);
//   a file written since `run_start_ns` (a sibling process of the same job): NAME.<pid>.EXT
//     beside it (`sibling`);
//   without the lock (`locked` false): nothing is replaced, NAME.<pid>.EXT beside it;
//   an earlier output of ours (`ours` says so of a regular file), or with `force` a regular
//     file of this user: replaced atomically by rename;
//   a directory: EISDIR;
//   anything else (another program's file, a symbolic link, a FIFO, a device): left alone,
//     the output goes to the first free NAME.1.EXT .. NAME.99.EXT (`diverted`).
struct PlaceRequest {
  bool force = false;
  bool locked = false;
  uint64_t run_start_ns = 0;  // CLOCK_REALTIME; 0: no sibling rule
  bool (*ours)(const char *path, void *context) = nullptr;
  void *context = nullptr;
};
struct PlaceResult {
  bool diverted = false;
  bool sibling = false;
  bool foreign_regular = false;  // diverted from a regular file of this user (force would do)
};
int place_output(const char *tmp, const char *path, const PlaceRequest &request, char *placed,
                 size_t placed_size, PlaceResult *result);

// Whether `path` is a regular file (not a link) of this user whose first bytes are one of
// `headers` (a null-terminated list).
bool is_own_file_starting_with(const char *path, const char *const *headers);

// When this process started, in CLOCK_REALTIME ns (0 if unknown): /proc/self/stat's starttime
// moved onto the wall clock (a forked child's is the fork).
uint64_t process_start_realtime_ns();

// When the run this process belongs to began, in CLOCK_REALTIME ns (0 if unknown): the earliest
// of this process's start, `also_ns` (0: none; the recorder's start, which a fork child inherits)
// and the modification time of `session_file` (the wrapper's session stamp,
// FERRUM_RECORD_SESSION, made before the program started; null or "" for none). What place_output
// then finds written since is a sibling process's of this run: kept, never replaced. One rule for
// the recorder's traces and the shim's summaries (a later process of a run replaced an earlier
// one's summary, which the trace beside it kept: review AA2).
uint64_t run_start_realtime_ns(const char *session_file, uint64_t also_ns);

// The session a process ran in, as its launch summary names it: "NAME@MTIME_NS", the name of the
// wrapper's session stamp (FERRUM_RECORD_SESSION: `record` and `nsys` make one per run with
// mktemp, ferrum-replay-stamp.XXXXXX) and its modification time in ns. `ferrum-replay nsys`
// notes the same beside its tables (scripts/ferrum_replay_traces.py, session_token: one rule in
// two languages), and `check --nsys-stats` joins only summaries of that session: a time span
// could not tell two sessions that overlap apart (review BB3). False, `out` unset, without a
// stamp, for a stamp gone, or a name of other characters than [A-Za-z0-9._-].
bool session_token(const char *session_file, char *out, size_t size);
inline constexpr size_t kSessionTokenSize = 128;

// Which process this is, over the whole life of the machine: "BOOT+PIDNS+TICKS", the boot's id
// (/proc/sys/kernel/random/boot_id), the inode of its PID namespace (/proc/self/ns/pid) and
// /proc/self/stat's starttime in clock ticks after boot ("0" for a part that cannot be read). A
// pid alone is not: in containers (PID namespaces) every run's program may be pid 1, and
// sandboxed workers started in one clock tick are pid 1 of sibling namespaces. The shim's launch
// summary and the recorder's trace both carry it, read by each from here, so that the judges
// never join one run's summary with another run's trace, nor take two workers for one. False,
// `out` unset, where /proc/self/stat cannot be read or `size` is too small.
bool process_start_key(char *out, size_t size);
inline constexpr size_t kProcessStartKeySize = 96;

// The directory part of `path` ("." for a bare name). False if it does not fit.
bool directory_of(const char *path, char *out, size_t out_size);

// ---- the output lock ----

// A lock that only ferrum-replay processes take, per directory, and that vanishes with the
// process however it ends: an abstract unix socket named after the directory's device and
// inode. Retried every 10 ms for at most `timeout_ms`. Returns the socket (release with
// unlock_output_dir), or -errno: -EADDRINUSE when another process held it for the whole wait;
// any other value when it cannot be taken here at all (the directory gone, socket() refused by
// a sandbox, no descriptor left), so that nobody is told of a holder that does not exist. The
// user's directory itself is never locked, so a program that locks it cannot make us wait.
int lock_output_dir(const char *dir, int timeout_ms);
void unlock_output_dir(int lock);
// How long an exit waits for the lock: a stuck holder costs the host this much, once.
inline constexpr int kOutputLockWaitMs = 2000;
// Why a lock was not had, for a log line ("the output lock of its directory was held by another
// ferrum-replay process for 2 s", "the output lock of its directory cannot be taken here:
// Operation not permitted"); `lock` is what lock_output_dir returned (< 0). Always terminated.
void describe_lock_failure(int lock, int timeout_ms, char *out, size_t out_size);
// The socket name (without the leading NUL) lock_output_dir binds for `dir`; for tests.
bool output_lock_name(const char *dir, char *out, size_t out_size);

}  // namespace ferrum_replay::common
