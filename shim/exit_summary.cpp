#include "exit_summary.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activation.hpp"
#include "graph_registry.hpp"
#include "log.hpp"

namespace ferrum {
namespace {

// A growing text buffer on the heap (at exit, allocation is fine).
struct Text {
  char *data = nullptr;
  size_t length = 0, capacity = 0;

  void append(const char *format, ...) __attribute__((format(printf, 2, 3))) {
    for (;;) {
      va_list args;
      va_start(args, format);
      const int wanted = data ? vsnprintf(data + length, capacity - length, format, args) : -1;
      va_end(args);
      if (wanted >= 0 && length + static_cast<size_t>(wanted) < capacity) {
        length += static_cast<size_t>(wanted);
        return;
      }
      const size_t grown = capacity ? capacity * 2 : 4096;
      char *bigger = static_cast<char *>(realloc(data, grown));
      if (!bigger) return;
      data = bigger;
      capacity = grown;
    }
  }
  ~Text() { free(data); }
};

bool write_all(int fd, const char *data, size_t length) {
  while (length) {
    const ssize_t written = write(fd, data, length);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data += written;
    length -= static_cast<size_t>(written);
  }
  return true;
}

// Never follows a planted symlink, never replaces an existing file.
int create_fresh(const char *path, char *chosen, size_t chosen_size) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (attempt == 0)
      snprintf(chosen, chosen_size, "%s", path);
    else
      snprintf(chosen, chosen_size, "%s.%d", path, attempt);
    const int fd = open(chosen, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

__attribute__((destructor)) void summary_at_exit() {
  // Only a process that activated the shim (one that used CUDA) has anything to say.
  if (detail::g_phase.load(std::memory_order_acquire) != detail::kActive) return;
  if (settings().summary[0]) write_exit_summary();
}

}  // namespace

bool expand_output_path(const char *pattern, char *out, size_t out_size) {
  size_t used = 0;
  auto put = [&](const char *text, size_t length) {
    if (used + length >= out_size) return false;
    memcpy(out + used, text, length);
    used += length;
    return true;
  };
  for (const char *p = pattern; *p; ++p) {
    bool ok = true;
    if (*p != '%') {
      ok = put(p, 1);
    } else if (p[1] == 'p') {
      char pid[16];
      ok = put(pid,
               static_cast<size_t>(snprintf(pid, sizeof pid, "%d", static_cast<int>(getpid()))));
      ++p;
    } else if (p[1] == 'h') {
      char host[256] = "";
      gethostname(host, sizeof host - 1);
      ok = put(host, strlen(host));
      ++p;
    } else if (p[1] == '%') {
      ok = put("%", 1);
      ++p;
    } else if (p[1] == 'q' && p[2] == '{' && strchr(p + 3, '}')) {
      const char *close = strchr(p + 3, '}');
      char name[128];
      const size_t length = static_cast<size_t>(close - (p + 3));
      if (length < sizeof name) {
        memcpy(name, p + 3, length);
        name[length] = '\0';
        const char *value = getenv(name);
        ok = !value || put(value, strlen(value));
      }
      p = close;
    } else {
      ok = put(p, 1);  // an unknown %x stays as it is
    }
    if (!ok) return false;
  }
  out[used] = '\0';
  return true;
}

namespace {

// Rows in ordinal order: records are visited in allocation order, which recycling breaks.
int by_ordinal(const void *a, const void *b) {
  const uint32_t left = (*static_cast<const GraphRecord *const *>(a))->ordinal;
  const uint32_t right = (*static_cast<const GraphRecord *const *>(b))->ordinal;
  // The overflow record (ordinal 0) goes last.
  if ((left == 0) != (right == 0)) return left == 0 ? 1 : -1;
  return left < right ? -1 : left > right;
}

}  // namespace

void write_exit_summary() {
  const char *target = settings().summary;
  GraphRegistry &registry = graph_registry();
  const GraphRegistry::Recycled &recycled = registry.recycled();
  Text text;
  uint64_t launches = recycled.launches, failed = recycled.failed_launches,
           rejected = recycled.rejected_pushes;
  size_t graphs = recycled.graphs, held = 0;
  registry.for_each([&](const GraphRecord &record) {
    ++held;
    launches += record.launches.load(std::memory_order_relaxed);
    failed += record.failed_launches.load(std::memory_order_relaxed);
    rejected += record.rejected_pushes.load(std::memory_order_relaxed);
  });
  graphs += held;
  auto **rows = static_cast<const GraphRecord **>(calloc(held ? held : 1, sizeof(GraphRecord *)));
  if (!rows) return;
  size_t filled = 0;
  registry.for_each([&](const GraphRecord &record) {
    if (filled < held) rows[filled++] = &record;
  });
  qsort(rows, filled, sizeof *rows, by_ordinal);
  text.append(
      "ferrum-replay: %zu graphs, %llu launches, %llu failed, %llu rejected pushes (pid %d)\n",
      graphs, static_cast<unsigned long long>(launches), static_cast<unsigned long long>(failed),
      static_cast<unsigned long long>(rejected), static_cast<int>(getpid()));
  text.append("  %5s  %10s  %8s  %8s  %s\n", "graph", "launches", "failed", "rejected", "name");
  for (size_t i = 0; i < filled; ++i) {
    const GraphRecord &record = *rows[i];
    const GraphLabel *label = record.label.load(std::memory_order_acquire);
    text.append(
        "  %5u  %10llu  %8llu  %8llu  %s\n", record.ordinal,
        static_cast<unsigned long long>(record.launches.load(std::memory_order_relaxed)),
        static_cast<unsigned long long>(record.failed_launches.load(std::memory_order_relaxed)),
        static_cast<unsigned long long>(record.rejected_pushes.load(std::memory_order_relaxed)),
        label ? label->text : record.name);
  }
  free(rows);
  if (recycled.graphs)  // destroyed long ago, their records reused: totals only
    text.append("  %5s  %10llu  %8llu  %8llu  (%llu earlier graphs, destroyed)\n", "-",
                static_cast<unsigned long long>(recycled.launches),
                static_cast<unsigned long long>(recycled.failed_launches),
                static_cast<unsigned long long>(recycled.rejected_pushes),
                static_cast<unsigned long long>(recycled.graphs));
  if (!text.data) return;
  if (strcmp(target, "stderr") == 0) {
    write_all(STDERR_FILENO, text.data, text.length);
    return;
  }
  char path[kMaxPathLength], chosen[kMaxPathLength + 8];
  if (!expand_output_path(target, path, sizeof path)) {
    warn_line("FERRUM_REPLAY_SUMMARY=%s: the expanded path is too long; no summary written",
              target);
    return;
  }
  const int fd = create_fresh(path, chosen, sizeof chosen);
  if (fd < 0) {
    warn_line("cannot write the summary to %s: %s", path, strerror(errno));
    return;
  }
  const bool complete = write_all(fd, text.data, text.length);
  close(fd);
  if (!complete) warn_line("the summary in %s is incomplete: %s", chosen, strerror(errno));
  if (strcmp(chosen, path) != 0) warn_line("%s exists; the summary is in %s", path, chosen);
}

}  // namespace ferrum
