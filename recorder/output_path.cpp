#include "output_path.hpp"

#include <cstring>
#include <vector>

namespace ferrum_replay::recorder {

ExpandedPath expand_output_pattern(std::string_view pattern, long pid, std::string_view hostname,
                                   common::EnvLookup env, void *context) {
  // The rule works on C strings: a NUL ends the pattern, as it would in the environment.
  const std::string pattern_text(pattern.substr(0, pattern.find('\0')));
  const std::string host_text(hostname.substr(0, hostname.find('\0')));
  std::vector<char> out(common::kMaxExpandedPath + 1);
  char unset[512];
  ExpandedPath result;
  result.too_long = !common::expand_pattern(pattern_text.c_str(), pid, host_text.c_str(), env,
                                            context, out.data(), out.size(), unset, sizeof unset);
  if (!result.too_long) result.path = out.data();
  result.unset = unset;
  return result;
}

std::string absolute_path(std::string_view path, std::string_view cwd) {
  if (!path.empty() && path.front() == '/') return std::string(path);
  std::string out(cwd);
  if (out.empty() || out.back() != '/') out += '/';
  out += path;
  return out;
}

}  // namespace ferrum_replay::recorder
