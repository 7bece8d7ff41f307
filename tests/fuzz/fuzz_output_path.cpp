// libFuzzer target: output-pattern expansion, the one rule of docs/text-rules.md, in
// common/text_rules.cpp (used by the shim's summary) and through the recorder's
// expand_output_pattern (recorder/output_path.hpp), plus the fresh-name and printable
// rules on the result. The input is the pattern, then after a NUL the host name and the value
// of every %q{VAR} (a VAR named UNSET... is unset). Properties: no crash or UB; both entry
// points agree; a pattern without '%' expands to itself; the expansion never exceeds the
// pattern by more than what the placeholders can add, nor 4095 bytes; every reported unset
// name is a valid name that appears in the pattern; absolute_path is absolute; the fresh name
// holds the token; the printable form is printable UTF-8 within its limit.
#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "output_path.hpp"
#include "text_rules.hpp"

using namespace ferrum_replay::recorder;

namespace {

const char *any_var(const char *name, void *context) {
  FUZZ_CHECK(name != nullptr && *name != '\0');
  if (std::strncmp(name, "UNSET", 5) == 0) return nullptr;
  return static_cast<const std::string *>(context)->c_str();
}

bool valid_name(const std::string &name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string whole(reinterpret_cast<const char *>(data), size);
  const size_t nul = whole.find('\0');
  const std::string pattern = whole.substr(0, nul);
  const std::string rest = nul == std::string::npos ? "" : whole.substr(nul + 1);
  const size_t nul2 = rest.find('\0');
  const std::string host = rest.substr(0, nul2);
  const std::string value = nul2 == std::string::npos ? "" : rest.substr(nul2 + 1);
  void *context = const_cast<std::string *>(&value);

  static char out[ferrum_replay::common::kMaxExpandedPath + 1];
  char unset[512];
  const bool ok = ferrum_replay::common::expand_pattern(
      pattern.c_str(), 4242, host.c_str(), any_var, context, out, sizeof out, unset, sizeof unset);
  const ExpandedPath recorder = expand_output_pattern(pattern, 4242, host, any_var, context);
  FUZZ_CHECK(ok == !recorder.too_long);
  if (!ok) {
    FUZZ_CHECK(out[0] == '\0' && recorder.path.empty());
    return 0;
  }
  const std::string expanded(out);
  FUZZ_CHECK(expanded == recorder.path && recorder.unset == unset);
  FUZZ_CHECK(expanded.size() <= ferrum_replay::common::kMaxExpandedPath);
  if (pattern.find('%') == std::string::npos) FUZZ_CHECK(expanded == pattern);
  size_t placeholders = 0;
  for (char c : pattern) placeholders += c == '%';
  FUZZ_CHECK(expanded.size() <= pattern.size() + placeholders * (host.size() + value.size() + 20));
  for (size_t start = 0; unset[0] && start != std::string::npos;) {
    const std::string list(unset);
    const size_t end = list.find(", ", start);
    const std::string name = list.substr(start, end == std::string::npos ? end : end - start);
    FUZZ_CHECK(valid_name(name) && name.compare(0, 5, "UNSET") == 0);
    FUZZ_CHECK(pattern.find("%q{" + name + "}") != std::string::npos);
    start = end == std::string::npos ? end : end + 2;
  }
  const std::string absolute = absolute_path(expanded, "/work/dir");
  FUZZ_CHECK(!absolute.empty() && absolute.front() == '/');

  static char fresh[ferrum_replay::common::kMaxExpandedPath + 32];
  if (ferrum_replay::common::fresh_name(expanded.c_str(), "4242", fresh, sizeof fresh)) {
    FUZZ_CHECK(std::strlen(fresh) == expanded.size() + 5);
    FUZZ_CHECK(std::strstr(fresh, ".4242") != nullptr);
  }
  char quoted[ferrum_replay::common::kQuotedSize];
  const size_t length = ferrum_replay::common::printable_quote(expanded.data(), expanded.size(),
                                                               ferrum_replay::common::kMessageLimit,
                                                               quoted, sizeof quoted);
  FUZZ_CHECK(length == std::strlen(quoted) && length <= ferrum_replay::common::kMessageLimit + 3);
  FUZZ_CHECK(fuzz::printable_utf8(quoted));
  return 0;
}
