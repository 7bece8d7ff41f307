#include "exit_report.hpp"

#include <errno.h>
#include <unistd.h>

#include "output_path.hpp"
#include "summary_table.hpp"
#include "trace_writer.hpp"

namespace ferrum_replay::recorder {

void write_stderr(const std::string &text) {
  const char *p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void write_exit_report(const Recorder &recorder, const Settings &settings, const std::string &cwd) {
  const Snapshot snap = recorder.snapshot();

  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const std::string path =
      expand_output_path(settings.out_pattern, snap.pid, host, process_env, nullptr);
  const std::string absolute = absolute_path(path, cwd);

  std::string error;
  const bool written = write_trace_file(absolute, snap, &error);
  if (!written)
    write_stderr("ferrum-replay recorder: cannot write trace to " + path + ": " + error + "\n");

  if (settings.table)
    write_stderr(format_summary(snap, aggregate(snap), written ? absolute : std::string()));
}

}  // namespace ferrum_replay::recorder
