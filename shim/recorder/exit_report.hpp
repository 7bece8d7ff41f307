// What the recorder does when the process exits: snapshot, trace file, stderr summary.
#pragma once

#include <string>

#include "recorder.hpp"
#include "settings.hpp"

namespace ferrum_replay::recorder {

// Writes the trace named by settings.out_pattern (relative paths resolved against `cwd`, the
// working directory when recording started; see write_trace_file for what happens when that name
// is taken) and, unless disabled, prints the summary table on stderr. A trace that cannot be
// written, or that went to another name, is one line on stderr. Never prints on stdout, never
// throws, never aborts the exit.
void write_exit_report(Recorder &recorder, const Settings &settings, const std::string &cwd);

// One write(2) to stderr: a multi-line report from a dying process stays in one piece even when
// other processes share the terminal.
void write_stderr(const std::string &text);

}  // namespace ferrum_replay::recorder
