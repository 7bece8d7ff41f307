// Writing an output file (the recorder's trace, the shim's summary) without ever harming the
// host: no unbounded wait, no partial file at the final name, no file that is not ours
// replaced, no symbolic link followed, and a device, FIFO or descriptor path written as the
// stream it is. libstdc++-free like text_rules.hpp; errors are errno values (0 = success).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ferrum_replay::common {

// write(2) until everything is written, retrying EINTR. 0, or the errno of the failure.
int write_all(int fd, const void *data, size_t length);

// ---- streams ----

// Whether `path` names a stream rather than a file to create: /dev/stdout, /dev/stderr,
// /dev/stdin, /dev/fd/N, /proc/self/fd/N (also thread-self and this process's pid), or a path
// whose target (symbolic links followed) is a character device, a FIFO or a socket.
bool is_stream_target(const char *path);

// An open stream. Writing never creates, renames or truncates anything, and never waits more
// than `stall_ms` for the reader to make room (a full pipe, a stopped terminal).
struct Stream {
  int fd = -1;
  bool owned = false;    // opened here (closed by close_stream), not the host's descriptor
  bool blocking = true;  // the descriptor lacks O_NONBLOCK: poll before each small write
  bool regular = false;  // a regular file behind a descriptor path: plain writes
  int stall_ms = 2000;
};

// Opens the stream `path` names for writing: a descriptor path uses that descriptor of this
// process (EBADF if it is not open for writing); anything else is opened O_NONBLOCK without
// O_CREAT (a FIFO without a reader: ENXIO) and must still be a stream once open. 0 or errno.
int open_stream(const char *path, Stream *stream);
// 0, or errno (ETIMEDOUT when the reader made no room within stall_ms).
int stream_write(Stream *stream, const void *data, size_t length);
void close_stream(Stream *stream);

// ---- files written aside, then moved into place ----

// A temporary beside `path`: "PATH.HOSTTAG.PID.N.tmp" (HOSTTAG: 8 hex digits of the host
// name), created O_EXCL|O_NOFOLLOW, mode 0644 minus the umask. Returns the descriptor and the
// name in `tmp`, or -errno.
int create_temp_beside(const char *path, char *tmp, size_t tmp_size);

// Removes the temporaries of `path` (the names above) left by processes of this host that no
// longer exist: regular files owned by this user that are empty or start with `header`. What
// is not certainly such a leftover is never touched. Returns how many were removed.
int remove_dead_temps(const char *path, const char *header);

// Gives `from` the name `to` unless something has it (RENAME_NOREPLACE, or link+unlink where
// the file system lacks it). 0, EEXIST, or another errno.
int rename_no_replace(const char *from, const char *to);

// Moves `tmp` to `path`, or if that is taken, to the first free fresh name PATH.1.EXT ..
// PATH.99.EXT. The name taken goes to `placed`. 0, or errno (EEXIST when all were taken).
int place_fresh(const char *tmp, const char *path, char *placed, size_t placed_size);

// The directory part of `path` ("." for a bare name). False if it does not fit.
bool directory_of(const char *path, char *out, size_t out_size);

// ---- the output lock ----

// A lock that only ferrum-replay processes take, per directory, and that vanishes with the
// process however it ends: an abstract unix socket named after the directory's device and
// inode. Retried every 10 ms for at most `timeout_ms`. Returns the socket (release with
// unlock_output_dir), or -1 when it was not had in time (or cannot exist here). The user's
// directory itself is never locked, so a program that locks it cannot make us wait.
int lock_output_dir(const char *dir, int timeout_ms);
void unlock_output_dir(int lock);
// The socket name (without the leading NUL) lock_output_dir binds for `dir`; for tests.
bool output_lock_name(const char *dir, char *out, size_t out_size);

}  // namespace ferrum_replay::common
