#include "output_path.hpp"

namespace ferrum_replay::recorder {

std::string expand_output_path(std::string_view pattern, long pid, std::string_view hostname,
                               EnvLookup env, void *context) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '%' || i + 1 == pattern.size()) {
      out += c;
      continue;
    }
    const char spec = pattern[i + 1];
    if (spec == 'p') {
      out += std::to_string(pid);
      ++i;
    } else if (spec == 'h') {
      out += hostname;
      ++i;
    } else if (spec == '%') {
      out += '%';
      ++i;
    } else if (spec == 'q' && i + 2 < pattern.size() && pattern[i + 2] == '{') {
      const size_t close = pattern.find('}', i + 3);
      if (close == std::string_view::npos) {
        out += c;
        continue;
      }
      const std::string var(pattern.substr(i + 3, close - (i + 3)));
      if (const char *value = var.empty() ? nullptr : env(var.c_str(), context)) out += value;
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

std::string absolute_path(std::string_view path, std::string_view cwd) {
  if (!path.empty() && path.front() == '/') return std::string(path);
  std::string out(cwd);
  if (out.empty() || out.back() != '/') out += '/';
  out += path;
  return out;
}

}  // namespace ferrum_replay::recorder
