// libFuzzer target: the shim's FERRUM_REPLAY* settings (shim/support/settings.hpp read_settings).
// Properties: no crash or UB; the domain is 1..63 bytes without control bytes, never "MPI" or
// "global"; every complaint is one line free of control bytes (quote_value's contract; it passes
// bytes >= 0x80 through unchecked: FINDINGS.md F6).
#include <cstring>

#include "fuzz_common.hpp"
#include "support/settings.hpp"

namespace {

void complain(const char *sentence, void *context) {
  FUZZ_CHECK(sentence != nullptr);
  for (const char *p = sentence; *p; ++p)
    FUZZ_CHECK(static_cast<unsigned char>(*p) >= 0x20 && *p != 0x7F);
  ++*static_cast<int *>(context);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Environment env(
      {"FERRUM_REPLAY", "FERRUM_REPLAY_LOG", "FERRUM_REPLAY_DOMAIN", "FERRUM_REPLAY_SITE",
       "FERRUM_REPLAY_FORMAT", "FERRUM_REPLAY_SITE_SKIP", "FERRUM_REPLAY_CONTENT",
       "FERRUM_REPLAY_NAMES", "FERRUM_REPLAY_SUMMARY", "FERRUM_REPLAY_RUNNING_DIR"},
      data, size);
  static ferrum_replay::shim::Settings settings;  // large: not on the stack
  settings = ferrum_replay::shim::Settings{};
  int complaints = 0;
  ferrum_replay::shim::read_settings(settings, fuzz::Environment::lookup, &env, complain,
                                     &complaints);
  const size_t domain_length = strnlen(settings.domain, sizeof settings.domain);
  FUZZ_CHECK(domain_length >= 1 && domain_length <= ferrum_replay::common::kMaxDomainLength);
  FUZZ_CHECK(std::strcmp(settings.domain, "MPI") != 0);
  FUZZ_CHECK(std::strcmp(settings.domain, "global") != 0);
  // "1 to 63 printable bytes": no control byte (bytes >= 0x80 pass unchecked: F6).
  for (const char *p = settings.domain; *p; ++p)
    FUZZ_CHECK(static_cast<unsigned char>(*p) >= 0x20 && *p != 0x7F);
  FUZZ_CHECK(strnlen(settings.names_path, sizeof settings.names_path) < sizeof settings.names_path);
  FUZZ_CHECK(strnlen(settings.summary, sizeof settings.summary) < sizeof settings.summary);
  FUZZ_CHECK(settings.message_template.piece_count >= 0 &&
             settings.message_template.piece_count <=
                 ferrum_replay::shim::MessageTemplate::kMaxPieces);
  return 0;
}
