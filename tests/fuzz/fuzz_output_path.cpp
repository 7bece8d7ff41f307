// libFuzzer target: FERRUM_RECORD_OUT expansion (shim/recorder/output_path.hpp). The input is
// the pattern, then after a NUL the host name and the value of every %q{VAR}. Properties: no
// crash or UB; a pattern without '%' expands to itself; the expansion never exceeds the
// pattern by more than what the placeholders can add; absolute_path is absolute.
#include <string>

#include "fuzz_common.hpp"
#include "output_path.hpp"

using namespace ferrum_replay::recorder;

namespace {

const char *any_var(const char *name, void *context) {
  FUZZ_CHECK(name != nullptr && *name != '\0');
  return static_cast<const std::string *>(context)->c_str();
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

  const std::string out =
      expand_output_path(pattern, 4242, host, any_var, const_cast<std::string *>(&value));
  if (pattern.find('%') == std::string::npos) FUZZ_CHECK(out == pattern);
  size_t placeholders = 0;
  for (char c : pattern) placeholders += c == '%';
  FUZZ_CHECK(out.size() <= pattern.size() + placeholders * (host.size() + value.size() + 20));
  const std::string absolute = absolute_path(out, "/work/dir");
  FUZZ_CHECK(!absolute.empty() && absolute.front() == '/');
  return 0;
}
