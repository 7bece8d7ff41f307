// dirty_libc: stands in for a C library whose calls leave errno set although they succeed, which
// POSIX allows of every function whose description does not say otherwise (and which a failed
// attempt we recover from does in earnest: a missing /proc/thread-self entry before
// /proc/self's, O_TMPFILE refused before mkostemp, a mapping refused). Linked into fault_program
// and nvtx_client (whose definitions come before libc's for the shim, the recorder and the
// stand-in driver alike); with FERRUM_TEST_DIRTY_LIBC=N each call below that succeeds
// leaves N in errno. Every stretch of ours that runs inside a program's call (activation in the
// program's dlsym, settings, the NVTX tool's start, a launch's first registration, the running
// marker, GPU timing's set-up, a graph's naming and destruction) then shows there unless it
// keeps the program's errno (docs/reliability.md, "errno"): the class, not the one failure that
// a test could provoke. Unset: each passes straight on.
//
// The functions: the system calls and thread-key calls that those stretches make through the
// dynamic linker (`nm -D --undefined-only libferrum-replay.so`); not clock_gettime, which the
// launch path calls and no C library lets touch errno. mmap64, pthread_setspecific and fstat64
// are weak here: fault_program has interposers of its own for them, which call dirty_libc_after
// too. A program linking this file exports its symbols (export_dynamic), or the libraries it
// loads would bind to libc's.
#undef _FORTIFY_SOURCE    // its inline wrappers of read and open would clash with these
#undef _FILE_OFFSET_BITS  // these are the 64-bit names themselves, not open and stat renamed
#define _GNU_SOURCE
#include "dirty_libc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

// The value, read once before main (0: off). A relaxed global: the interposers may run on any
// thread, before ThreadSanitizer could track them.
static int g_dirty_libc_mark;

__attribute__((constructor)) static void read_dirty_libc_mark(void) {
  const char *mark = getenv("FERRUM_TEST_DIRTY_LIBC");
  if (mark) g_dirty_libc_mark = atoi(mark);
}

__attribute__((no_sanitize("thread"))) void dirty_libc_after(int succeeded) {
  const int mark = __atomic_load_n(&g_dirty_libc_mark, __ATOMIC_RELAXED);
  if (mark && succeeded) errno = mark;
}

// The definition after this program's (libc's, or a sanitizer's interceptor), looked up once,
// as a pointer of the type the C library declares.
#define NEXT(name)                                                                     \
  static __typeof__(&name) resolved_##name;                                            \
  __typeof__(&name) real_##name = __atomic_load_n(&resolved_##name, __ATOMIC_ACQUIRE); \
  if (!real_##name) {                                                                  \
    real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name);                          \
    __atomic_store_n(&resolved_##name, real_##name, __ATOMIC_RELEASE);                 \
  }

// open's mode, `mode`: an argument only when the flags create a file.
#define CREATION_MODE(flags)                                   \
  mode_t mode = 0;                                             \
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) { \
    va_list ap;                                                \
    va_start(ap, flags);                                       \
    mode = va_arg(ap, mode_t);                                 \
    va_end(ap);                                                \
  }

__attribute__((no_sanitize("thread"))) int open64(const char *path, int flags, ...) {
  NEXT(open64)
  CREATION_MODE(flags)
  const int fd = real_open64(path, flags, mode);
  dirty_libc_after(fd >= 0);
  return fd;
}

__attribute__((no_sanitize("thread"))) int openat64(int dir, const char *path, int flags, ...) {
  NEXT(openat64)
  CREATION_MODE(flags)
  const int fd = real_openat64(dir, path, flags, mode);
  dirty_libc_after(fd >= 0);
  return fd;
}

__attribute__((no_sanitize("thread"))) ssize_t read(int fd, void *buffer, size_t size) {
  NEXT(read)
  const ssize_t got = real_read(fd, buffer, size);
  dirty_libc_after(got >= 0);
  return got;
}

__attribute__((no_sanitize("thread"))) ssize_t pread64(int fd, void *buffer, size_t size,
                                                       off64_t offset) {
  NEXT(pread64)
  const ssize_t got = real_pread64(fd, buffer, size, offset);
  dirty_libc_after(got >= 0);
  return got;
}

__attribute__((no_sanitize("thread"))) int close(int fd) {
  NEXT(close)
  const int result = real_close(fd);
  dirty_libc_after(result == 0);
  return result;
}

__attribute__((no_sanitize("thread"))) int stat64(const char *path, struct stat64 *st) {
  NEXT(stat64)
  const int result = real_stat64(path, st);
  dirty_libc_after(result == 0);
  return result;
}

__attribute__((no_sanitize("thread"))) int lstat64(const char *path, struct stat64 *st) {
  NEXT(lstat64)
  const int result = real_lstat64(path, st);
  dirty_libc_after(result == 0);
  return result;
}

__attribute__((no_sanitize("thread"))) int munmap(void *address, size_t length) {
  NEXT(munmap)
  const int result = real_munmap(address, length);
  dirty_libc_after(result == 0);
  return result;
}

__attribute__((no_sanitize("thread"))) void *mremap(void *address, size_t old_size, size_t new_size,
                                                    int flags, ...) {
  NEXT(mremap)
  void *wanted = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    wanted = va_arg(ap, void *);
    va_end(ap);
  }
  void *result = real_mremap(address, old_size, new_size, flags, wanted);
  dirty_libc_after(result != MAP_FAILED);
  return result;
}

__attribute__((no_sanitize("thread"))) int madvise(void *address, size_t length, int advice) {
  NEXT(madvise)
  const int result = real_madvise(address, length, advice);
  dirty_libc_after(result == 0);
  return result;
}

// fcntl's third argument is an int or a pointer: both travel in one register on the ABIs we
// build for (x86-64, AArch64), so it is passed on as a long.
__attribute__((no_sanitize("thread"))) int fcntl64(int fd, int command, ...) {
  NEXT(fcntl64)
  va_list ap;
  va_start(ap, command);
  const long argument = va_arg(ap, long);
  va_end(ap);
  const int result = real_fcntl64(fd, command, argument);
  dirty_libc_after(result != -1);
  return result;
}

__attribute__((no_sanitize("thread"))) int pthread_key_create(pthread_key_t *key,
                                                              void (*destructor)(void *)) {
  NEXT(pthread_key_create)
  const int result = real_pthread_key_create(key, destructor);
  dirty_libc_after(result == 0);
  return result;
}

__attribute__((no_sanitize("thread"))) long sysconf(int name) {
  NEXT(sysconf)
  const long result = real_sysconf(name);
  dirty_libc_after(result != -1);
  return result;
}

__attribute__((no_sanitize("thread"))) int getrlimit64(__rlimit_resource_t resource,
                                                       struct rlimit64 *limit) {
  NEXT(getrlimit64)
  const int result = real_getrlimit64(resource, limit);
  dirty_libc_after(result == 0);
  return result;
}

__attribute__((no_sanitize("thread"))) int socket(int domain, int type, int protocol) {
  NEXT(socket)
  const int fd = real_socket(domain, type, protocol);
  dirty_libc_after(fd >= 0);
  return fd;
}

__attribute__((no_sanitize("thread"))) int unlink(const char *path) {
  NEXT(unlink)
  const int result = real_unlink(path);
  dirty_libc_after(result == 0);
  return result;
}

// Weak: fault_program's own definitions (which raise signals on demand) take their place there.
__attribute__((weak, no_sanitize("thread"))) void *mmap64(void *address, size_t length,
                                                          int protection, int flags, int fd,
                                                          off64_t offset) {
  NEXT(mmap64)
  void *mapping = real_mmap64(address, length, protection, flags, fd, offset);
  dirty_libc_after(mapping != MAP_FAILED);
  return mapping;
}

__attribute__((weak, no_sanitize("thread"))) int pthread_setspecific(pthread_key_t key,
                                                                     const void *value) {
  NEXT(pthread_setspecific)
  const int result = real_pthread_setspecific(key, value);
  dirty_libc_after(result == 0);
  return result;
}

__attribute__((weak, no_sanitize("thread"))) int fstat64(int fd, struct stat64 *st) {
  NEXT(fstat64)
  const int result = real_fstat64(fd, st);
  dirty_libc_after(result == 0);
  return result;
}
