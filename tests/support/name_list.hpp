// The names of a space-separated list (the shim's kSettingNames, the recorder's
// kRecordSettingNames: one string each, no pointer table), for the unit tests.
#pragma once

#include <string>
#include <vector>

namespace ferrum_replay::test {

inline std::vector<std::string> split_names(const char *names) {
  std::vector<std::string> split;
  std::string name;
  for (const char *p = names;; ++p) {
    if (*p == ' ' || *p == '\0') {
      if (!name.empty()) split.push_back(name);
      name.clear();
      if (!*p) break;
    } else {
      name += *p;
    }
  }
  return split;
}

}  // namespace ferrum_replay::test
