// Turning FERRUM_RECORD_OUT into a file name. The placeholders are the ones `nsys profile -o`
// understands, so that one pattern can name both outputs in a wrapper or a multi-process job.
// The rule itself (docs/text-rules.md) is implemented once, in common/text_rules.cpp, for the
// recorder and the shim alike.
#pragma once

#include <string>
#include <string_view>

#include "text_rules.hpp"

namespace ferrum_replay::recorder {

struct ExpandedPath {
  std::string path;       // empty when too_long
  std::string unset;      // the %q{NAME} variables that were not set, ", "-separated; "" if none
  bool too_long = false;  // longer than 4095 bytes: not to be written
};

// %p -> pid, %h -> host name, %q{NAME} -> value of NAME (nothing if unset, and NAME reported),
// %% -> %. Anything else (an unknown %x, a lone trailing %, an unterminated %q{, %q{}, an
// invalid name) is kept literally: a surprising file name is easier to diagnose than a
// missing trace.
ExpandedPath expand_output_pattern(std::string_view pattern, long pid, std::string_view hostname,
                                   common::EnvLookup env, void *context);

// `path` if it is absolute, otherwise `cwd`/`path`. Purely lexical: the file may not exist yet.
std::string absolute_path(std::string_view path, std::string_view cwd);

}  // namespace ferrum_replay::recorder
