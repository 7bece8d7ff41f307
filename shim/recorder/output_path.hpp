// Turning FERRUM_RECORD_OUT into a file name. The placeholders are the ones `nsys profile -o`
// understands, so that one pattern can name both outputs in a wrapper or a multi-process job.
#pragma once

#include <string>
#include <string_view>

#include "settings.hpp"

namespace ferrum_replay::recorder {

// %p -> pid, %h -> host name, %q{VAR} -> value of VAR (empty if unset), %% -> %. Anything else
// (an unknown %x, a lone trailing %, an unterminated %q{) is kept literally: a surprising file
// name is easier to diagnose than a missing trace.
std::string expand_output_path(std::string_view pattern, long pid, std::string_view hostname,
                               EnvLookup env, void *context);

// `path` if it is absolute, otherwise `cwd`/`path`. Purely lexical: the file may not exist yet.
std::string absolute_path(std::string_view path, std::string_view cwd);

}  // namespace ferrum_replay::recorder
