// libFuzzer target: the recorder's FERRUM_RECORD_* settings and default output name
// (recorder/settings.hpp). Properties: no crash or UB; each warning is one line ending in
// '\n'; the default name is a relative file name with %p in it.
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "settings.hpp"

using namespace ferrum_replay::recorder;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Environment env(
      {"FERRUM_RECORD_OUT", "FERRUM_RECORD_TABLE", "FERRUM_RECORD_FORCE", "FERRUM_RECORD_REJECT",
       "FERRUM_RECORD_REJECT_DOMAIN", "FERRUM_RECORD_SESSION", "RANK", "OMPI_COMM_WORLD_RANK",
       "SLURM_PROCID", "LOCAL_RANK"},
      data, size);
  std::vector<std::string> warnings;
  Settings s = parse_settings(fuzz::Environment::lookup, &env, &warnings);
  for (const std::string &w : warnings) {  // one printable line each
    FUZZ_CHECK(!w.empty() && w.back() == '\n');
    FUZZ_CHECK(fuzz::printable_utf8(std::string_view(w).substr(0, w.size() - 1)));
  }
  FUZZ_CHECK(!s.out_pattern.empty());
  FUZZ_CHECK(s.reject != RejectMode::every_nth || s.reject_every >= 2);
  Settings t;
  const std::string name = default_out_name(fuzz::Environment::lookup, &env, &t);
  FUZZ_CHECK(!name.empty() && name.front() != '/');
  FUZZ_CHECK(name.find("%p") != std::string::npos);
  FUZZ_CHECK(name.find('/') == std::string::npos);
  uint64_t n = 0;
  const std::string_view whole(reinterpret_cast<const char *>(data), size);
  if (parse_positive_u64(whole, &n)) FUZZ_CHECK(n > 0 && std::to_string(n).size() <= size);
  return 0;
}
