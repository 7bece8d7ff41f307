#include "range/exit_summary.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "output_file.hpp"
#include "range/activation.hpp"
#include "range/graph_registry.hpp"
#include "support/log.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {
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

__attribute__((destructor)) void summary_at_exit() {
  // Only a process that activated the shim (one that used CUDA) has anything to say.
  if (detail::g_phase.load(std::memory_order_acquire) != detail::Phase::active) return;
  if (settings().summary[0]) write_exit_summary();
}

}  // namespace

bool expand_summary_path(const char *pattern, char *out, size_t out_size, char *unset,
                         size_t unset_size) {
  char host[256];
  common::host_name(host, sizeof host);
  return common::expand_pattern(pattern, static_cast<long>(getpid()), host, common::process_env,
                                nullptr, out, out_size, unset, unset_size);
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
  // A process that launched nothing says nothing: a CPU-only child forked by a launcher (its
  // counters restarted at the fork) would otherwise add an empty summary to the job's.
  if (launches == 0) return;
  auto **rows = static_cast<const GraphRecord **>(calloc(held ? held : 1, sizeof(GraphRecord *)));
  if (!rows) return;
  size_t filled = 0;
  registry.for_each([&](const GraphRecord &record) {
    if (filled < held) rows[filled++] = &record;
  });
  qsort(rows, filled, sizeof *rows, by_ordinal);
  text.append(
      "ferrum-replay launch summary: %zu graphs, %llu launches, %llu failed, %llu rejected pushes "
      "(pid %d)\n",
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
    write_text("/dev/stderr", text.data, text.length);
    return;
  }
  char path[common::kMaxExpandedPath + 1], unset[256];
  if (!expand_summary_path(target, path, sizeof path, unset, sizeof unset)) {
    warn_line("FERRUM_REPLAY_SUMMARY='%s' expands to more than 4095 bytes; no summary written",
              message_value(target).text);
    return;
  }
  if (unset[0])
    warn_line("FERRUM_REPLAY_SUMMARY: not set: %s (each %%q{NAME} expanded to nothing)", unset);
  write_text(path, text.data, text.length);
}

void write_text(const char *path, const char *data, size_t length) {
  if (common::is_stream_target(path)) {
    // A device, FIFO or descriptor: written as the stream it is, nothing created or renamed.
    common::Stream stream;
    int error = common::open_stream(path, &stream);
    if (error == 0) {
      error = common::stream_write(&stream, data, length);
      common::close_stream(&stream);
    }
    if (error)
      warn_line("cannot write the summary to '%s': %s%s", message_value(path).text, strerror(error),
                error == ENXIO       ? " (no process is reading it)"
                : error == ETIMEDOUT ? " (its reader made no room for 2 s)"
                                     : "");
    return;
  }
  // A file: written aside first, so that the name never holds half a summary, then given the
  // name, or if that is taken (a file, a symbolic link: never followed nor replaced) the first
  // free PATH.1.EXT .. PATH.99.EXT.
  common::remove_dead_temps(path, "ferrum-replay: ");
  char tmp[common::kMaxExpandedPath + 1 + 64];
  const int fd = common::create_temp_beside(path, tmp, sizeof tmp);
  if (fd < 0) {
    warn_line("cannot write the summary to '%s': %s", message_value(path).text, strerror(-fd));
    return;
  }
  int error = common::write_all(fd, data, length);
  if (close(fd) != 0 && error == 0) error = errno;
  char placed[sizeof tmp];
  if (error == 0) error = common::place_fresh(tmp, path, placed, sizeof placed);
  if (error) {
    unlink(tmp);
    warn_line("cannot write the summary to '%s': %s", message_value(path).text, strerror(error));
    return;
  }
  if (strcmp(placed, path) != 0)
    warn_line("'%s' exists; the summary is in '%s'", message_value(path).text,
              message_value(placed).text);
}

}  // namespace ferrum_replay::shim
