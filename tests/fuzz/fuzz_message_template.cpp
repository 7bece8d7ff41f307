// libFuzzer target: FERRUM_REPLAY_FORMAT (shim/naming/message_template.hpp). The input is the
// template and, after a NUL, the field values (name, site, content, api, NUL-separated) and an
// ordinal. Properties: no crash or UB; a template that parses renders, for any values and any
// buffer size, a terminated string of printable UTF-8 no longer than the buffer.
#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "naming/message_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string> parts(6);
  size_t part = 0;
  for (size_t i = 0; i < size && part < parts.size(); ++i) {
    if (data[i] == 0)
      ++part;
    else
      parts[part] += static_cast<char>(data[i]);
  }
  ferrum_replay::shim::MessageTemplate tmpl;
  char error[128];
  if (!ferrum_replay::shim::parse_message_template(parts[0].c_str(), tmpl, error, sizeof error)) {
    FUZZ_CHECK(strnlen(error, sizeof error) < sizeof error);
    FUZZ_CHECK(fuzz::printable_utf8(error));
    return 0;
  }
  FUZZ_CHECK(tmpl.piece_count >= 0 &&
             tmpl.piece_count <= ferrum_replay::shim::MessageTemplate::kMaxPieces);
  const unsigned ordinal = parts[5].empty() ? 0 : static_cast<unsigned char>(parts[5][0]) * 997u;
  const ferrum_replay::shim::TemplateValues values{parts[1].c_str(), ordinal, parts[2].c_str(),
                                                   parts[3].c_str(), parts[4].c_str()};
  for (size_t out_size : {size_t{1}, size_t{2}, size_t{5}, size_t{16}, size_t{160}, size_t{4096}}) {
    std::string out(out_size + 8, '\xAA');  // guard bytes after the buffer
    const size_t n = ferrum_replay::shim::render_message(tmpl, values, out.data(), out_size);
    FUZZ_CHECK(n < out_size);
    FUZZ_CHECK(out[n] == '\0');
    FUZZ_CHECK(std::strlen(out.c_str()) == n);
    FUZZ_CHECK(fuzz::printable_utf8(std::string_view(out.data(), n)));
    for (size_t g = out_size; g < out.size(); ++g) FUZZ_CHECK(out[g] == '\xAA');
  }
  return 0;
}
