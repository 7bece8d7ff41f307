#include "startup_env.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "errno_kept.hpp"
#include "no_cancel.hpp"
#include "own_descriptor.hpp"
#include "proc_self.hpp"
#include "zeroed_memory.hpp"

namespace ferrum_replay::common {

namespace {

// The copy: a private anonymous mapping (no allocator: it may be out of memory, F11), its
// bytes after the header. Never freed (a string handed out lives as long as the process).
struct Copy {
  size_t mapped;  // bytes of the mapping, header included
  size_t size;    // bytes of the environment
  char *bytes() { return reinterpret_cast<char *>(this + 1); }
};

// Beyond this the start-up area is not copied (the kernel bounds it by a quarter of the stack
// limit; 16 MiB is eight times Linux's default ARG_MAX): the live environment is used.
constexpr size_t kMaxCopy = size_t{16} << 20;

// null: not read yet; kUnreadable: read and unusable (the live environment); else the copy.
Copy *const kUnreadable = reinterpret_cast<Copy *>(uintptr_t{1});
std::atomic<Copy *> g_copy{nullptr};

// Reads /proc/self/environ into a fresh mapping; null when it cannot be read whole or does not
// read as an environment.
Copy *read_copy() {
  OwnDescriptor environ_file = open_process_file("environ", O_RDONLY);
  if (!environ_file) return nullptr;
  const int fd = environ_file.get();  // read with pread: a number the program took meanwhile
                                      // keeps its offset (own_descriptor.hpp)
  size_t mapped = size_t{64} << 10;
  auto *copy = static_cast<Copy *>(map_zeroed(mapped));
  bool whole = false;
  while (copy) {
    const size_t room = mapped - sizeof(Copy) - copy->size;
    if (room == 0) {
      if (mapped * 2 > kMaxCopy) break;
      void *grown = mremap(copy, mapped, mapped * 2, MREMAP_MAYMOVE);
      if (grown == MAP_FAILED) break;
      copy = static_cast<Copy *>(grown);
      mapped *= 2;
      continue;
    }
    const ssize_t got = pread(fd, copy->bytes() + copy->size, room, static_cast<off_t>(copy->size));
    if (got < 0 && errno == EINTR) continue;  // a signal of the program's without SA_RESTART
    if (got <= 0) {
      whole = got == 0;
      break;
    }
    copy->size += static_cast<size_t>(got);
  }
  if (environ_file.close() == EBADF) whole = false;  // not ours any more: what was read, unsure
  if (!copy) return nullptr;
  copy->mapped = mapped;
  if (!whole || !startup_env_plausible(copy->bytes(), copy->size)) {
    unmap_zeroed(copy, mapped);
    return nullptr;
  }
  return copy;
}

Copy *the_copy() {
  Copy *copy = g_copy.load(std::memory_order_acquire);
  if (__builtin_expect(copy != nullptr, 1)) return copy;
  // Each thread that finds none reads its own and offers it; the first offer wins and the others
  // are given back. Nobody waits for anybody (a fork() child made mid-read reads again).
  ErrnoKept errno_kept;
  NoCancel no_cancel;  // open and read are cancellation points; the caller's call is none
  Copy *mine = read_copy();
  Copy *offered = mine ? mine : kUnreadable;
  Copy *expected = nullptr;
  if (g_copy.compare_exchange_strong(expected, offered, std::memory_order_acq_rel)) return offered;
  if (mine) unmap_zeroed(mine, mine->mapped);
  return expected;
}

}  // namespace

bool startup_env_plausible(const char *environment, unsigned long size) {
  // A process that set its title over its start-up area (setproctitle, as Python's module of
  // that name, nginx or PostgreSQL do, after moving its environment elsewhere) leaves NULs and
  // title text there: an empty entry, one without '=' or an area not ending in a NUL says so.
  // An empty area is an empty environment.
  if (size > 0 && environment[size - 1] != '\0') return false;
  for (unsigned long at = 0; at < size;) {
    const char *entry = environment + at;
    const unsigned long length = strnlen(entry, size - at);
    if (length == 0 || !memchr(entry, '=', length)) return false;
    at += length + 1;
  }
  return true;
}

const char *startup_env_lookup(const char *environment, unsigned long size, const char *name) {
  const size_t name_length = strlen(name);
  if (name_length == 0 || memchr(name, '=', name_length)) return nullptr;
  for (unsigned long at = 0; at < size;) {
    const char *entry = environment + at;
    const unsigned long length = strnlen(entry, size - at);
    // Every entry ends in a NUL inside the area (startup_env_plausible); one cut by the end of
    // an area that was not checked is not taken.
    if (length > name_length && memcmp(entry, name, name_length) == 0 && entry[name_length] == '=')
      return at + length < size ? entry + name_length + 1 : nullptr;
    at += length + 1;
  }
  return nullptr;
}

void each_startup_env_entry(void (*visit)(const char *entry, void *context), void *context) {
  Copy *copy = the_copy();
  if (copy == kUnreadable) return;
  const char *environment = copy->bytes();
  for (size_t at = 0; at < copy->size;) {  // every entry ends in a NUL (startup_env_plausible)
    visit(environment + at, context);
    at += strlen(environment + at) + 1;
  }
}

const char *startup_env(const char *name) {
  Copy *copy = the_copy();
  if (copy == kUnreadable) return getenv(name);
  return startup_env_lookup(copy->bytes(), copy->size, name);
}

}  // namespace ferrum_replay::common
