// The parsers and formatters behind names: FERRUM_REPLAY_FORMAT templates, the names file,
// call-site cleanup, content descriptions, output paths.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "naming/call_site.hpp"
#include "naming/graph_content.hpp"
#include "naming/message_template.hpp"
#include "naming/names_file.hpp"
#include "naming/symbol_names.hpp"
#include "range/exit_summary.hpp"
#include "range/process_files.hpp"

namespace {

std::string render(const char *text, const ferrum_replay::shim::TemplateValues &values) {
  ferrum_replay::shim::MessageTemplate tmpl;
  char error[160];
  REQUIRE_MESSAGE(ferrum_replay::shim::parse_message_template(text, tmpl, error, sizeof error),
                  error);
  char out[160];
  ferrum_replay::shim::render_message(tmpl, values, out, sizeof out);
  return out;
}

std::string template_error(const char *text) {
  ferrum_replay::shim::MessageTemplate tmpl;
  char error[160] = "";
  if (ferrum_replay::shim::parse_message_template(text, tmpl, error, sizeof error)) return "";
  return error;
}

struct ParsedNames {
  ferrum_replay::shim::NameRules rules;
  std::vector<std::pair<int, std::string>> complaints;
  ~ParsedNames() { ferrum_replay::shim::free_name_rules(rules); }
};

void parse_names(const std::string &text, ParsedNames &parsed) {
  parsed.rules = ferrum_replay::shim::parse_names_file(
      text.data(), text.size(),
      [](int line, const char *problem, void *context) {
        static_cast<ParsedNames *>(context)->complaints.emplace_back(line, problem);
      },
      &parsed);
}

}  // namespace

TEST_CASE("message templates render every field, with literal braces") {
  const ferrum_replay::shim::TemplateValues values{
      "decode", 7, "capture_decode", "3 nodes: gemm x3", "cuGraphInstantiateWithFlags"};
  CHECK(render("{name}", values) == "decode");
  CHECK(render("{name} #{ordinal}", values) == "decode #7");
  CHECK(render("{{{site}}} [{content}] via {api}", values) ==
        "{capture_decode} [3 nodes: gemm x3] via cuGraphInstantiateWithFlags");
}

TEST_CASE("bad templates are refused with a reason") {
  CHECK(template_error("{nmae}").find("unknown field") != std::string::npos);
  CHECK(template_error("{name").find("no matching '}'") != std::string::npos);
  CHECK(template_error("name}").find("no matching '{'") != std::string::npos);
  CHECK(template_error("").find("empty") != std::string::npos);
  CHECK(template_error(std::string(300, 'x').c_str()).find("too long") != std::string::npos);
  CHECK(template_error("{name}{name}{name}{name}{name}{name}{name}{name}{name}{name}{name}"
                       "{name}{name}{name}{name}{name}{name}{name}{name}{name}{name}{name}"
                       "{name}{name}{name}{name}{name}{name}{name}{name}{name}{name}{name}")
            .find("too many") != std::string::npos);
}

TEST_CASE("rendering keeps output printable and whole characters when it must cut") {
  const ferrum_replay::shim::TemplateValues values{
      "a\x01"
      "b",
      1, "", "", ""};
  CHECK(render("{name}", values) == "a?b");
  ferrum_replay::shim::MessageTemplate tmpl;
  char error[160];
  REQUIRE(ferrum_replay::shim::parse_message_template("{name}", tmpl, error, sizeof error));
  const ferrum_replay::shim::TemplateValues wide{"ééééé", 1, "", "", ""};
  char small[6];  // room for two é (4 bytes) and not half of a third
  ferrum_replay::shim::render_message(tmpl, wide, small, sizeof small);
  CHECK(std::string(small) == "éé");
}

TEST_CASE("names file: ordinals, site and content patterns; first match wins") {
  ParsedNames parsed;
  parse_names(
      "# names for the server\n"
      "1 = prefill\n"
      "  site:*capture_decode* =  decode  \n"
      "content:*flash* = attention\n"
      "\n"
      "site:* = anything else\n",
      parsed);
  CHECK(parsed.complaints.empty());
  REQUIRE(parsed.rules.count == 4);
  CHECK(std::string(ferrum_replay::shim::find_rule_name(parsed.rules, 1, "capture_decode", "")) ==
        "prefill");
  CHECK(std::string(ferrum_replay::shim::find_rule_name(parsed.rules, 2, "Server::capture_decode",
                                                        "")) == "decode");
  CHECK(std::string(ferrum_replay::shim::find_rule_name(parsed.rules, 3, "",
                                                        "4 nodes: flash_fwd x4")) == "attention");
  CHECK(std::string(ferrum_replay::shim::find_rule_name(parsed.rules, 4, "main", "")) ==
        "anything else");
  CHECK(ferrum_replay::shim::find_rule_name(parsed.rules, 5, "", "") == nullptr);
}

TEST_CASE("names file: each bad line is reported with its number; good lines still apply") {
  ParsedNames parsed;
  parse_names(
      "1 = ok\n"
      "no equals sign\n"
      "0 = zero\n"
      "x1 = not a number\n"
      "2 =\n"
      "= nameless\n"
      "99999999999 = too big\n"
      "site: = empty pattern\n"
      "3 = " +
          std::string(200, 'n') +
          "\n"
          "4 = fine\r\n",
      parsed);
  CHECK(parsed.rules.count == 2);
  std::vector<int> lines;
  for (auto &[line, problem] : parsed.complaints) lines.push_back(line);
  CHECK(lines == std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(parsed.complaints[0].second.find("KEY = NAME") != std::string::npos);
  CHECK(parsed.complaints[1].second.find("start at 1") != std::string::npos);
  CHECK(std::string(ferrum_replay::shim::find_rule_name(parsed.rules, 4, "", "")) == "fine");
}

TEST_CASE("names file: a byte order mark before line 1 is not part of its key") {
  const std::pair<const char *, const char *> first_lines[] = {
      {"site:*capture* = decode\n", "decode"}, {"1 = prefill\n", "prefill"}};
  for (const auto &[first, expected] : first_lines) {
    ParsedNames parsed;
    parse_names(std::string("\xEF\xBB\xBF") + first + "2 = second\n", parsed);
    CHECK(parsed.complaints.empty());
    REQUIRE(parsed.rules.count == 2);
    CHECK(parsed.rules.rules[0].line == 1);
    const char *name = ferrum_replay::shim::find_rule_name(parsed.rules, 1, "capture", "");
    REQUIRE(name != nullptr);
    CHECK(std::string(name) == expected);
  }
  // Only at the start of the file: elsewhere the bytes are part of the line, as written.
  ParsedNames parsed;
  parse_names(
      "1 = a\n\xEF\xBB\xBF"
      "2 = b\n",
      parsed);
  CHECK(parsed.rules.count == 1);
  CHECK(parsed.complaints.size() == 1);
}

TEST_CASE("names file: a NUL byte or no final newline is handled") {
  ParsedNames parsed;
  parse_names(std::string("1 = a\n2 = b") + std::string(1, '\0') + "c\n3 = last", parsed);
  CHECK(parsed.rules.count == 2);
  CHECK(parsed.complaints.size() == 1);
  CHECK(std::string(ferrum_replay::shim::find_rule_name(parsed.rules, 3, "", "")) == "last");
}

namespace {

// read_names_file on `path`: the rules and every sentence it says.
struct ReadNames {
  ferrum_replay::shim::NameRules rules;
  std::vector<std::string> said;
  explicit ReadNames(const char *path) {
    rules = ferrum_replay::shim::read_names_file(
        path,
        [](const char *sentence, void *self) {
          static_cast<ReadNames *>(self)->said.emplace_back(sentence);
        },
        this);
  }
  ~ReadNames() { ferrum_replay::shim::free_name_rules(rules); }
};

std::string temporary_file(const std::string &text) {
  char path[] = "/tmp/ferrum-names-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

bool printable_line(const std::string &sentence) {
  for (unsigned char c : sentence)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

}  // namespace

TEST_CASE("names file at a FIFO, a device or a directory: skipped at once, one sentence") {
  char dir[] = "/tmp/ferrum-names-dir-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);  // no writer: a blocking open would never return
  const std::pair<std::string, const char *> cases[] = {
      {fifo, "is a FIFO"}, {"/dev/zero", "is a character device"}, {dir, "is a directory"}};
  for (const auto &[path, kind] : cases) {
    ReadNames read(path.c_str());
    CHECK(read.rules.count == 0);
    REQUIRE_MESSAGE(read.said.size() == 1, path);
    CHECK_MESSAGE(read.said[0].find(kind) != std::string::npos, read.said[0]);
    CHECK(read.said[0].find("FERRUM_REPLAY_NAMES='" + path + "'") == 0);
  }
  unlink(fifo.c_str());
  rmdir(dir);
}

TEST_CASE("names file larger than 1 MiB: skipped whole, one sentence") {
  const std::string path =
      temporary_file(std::string(ferrum_replay::shim::kMaxNamesFileSize, '#') + "\n1 = a\n");
  ReadNames read(path.c_str());
  unlink(path.c_str());
  CHECK(read.rules.count == 0);
  REQUIRE(read.said.size() == 1);
  CHECK(read.said[0].find("larger than 1 MiB") != std::string::npos);
}

TEST_CASE("names file with many bad lines: one sentence, the first and the count of the rest") {
  std::string text = "1 = kept\n";
  for (int i = 0; i < 100000; ++i) text += "bogus\n";  // 600 kB
  const std::string path = temporary_file(text);
  ReadNames read(path.c_str());
  unlink(path.c_str());
  CHECK(read.rules.count == 1);
  REQUIRE(read.said.size() == 1);
  CHECK(read.said[0].rfind("FERRUM_REPLAY_NAMES='" + path + "' line 2: ", 0) == 0);
  CHECK(read.said[0].find("; line ignored, and 99999 more bad lines, each ignored "
                          "(FERRUM_REPLAY_LOG=info lists them)") != std::string::npos);
  // One bad line: no count.
  const std::string second = temporary_file("1 = kept\nbogus\n");
  ReadNames one(second.c_str());
  unlink(second.c_str());
  REQUIRE(one.said.size() == 1);
  CHECK(one.said[0].find("line 2: ") != std::string::npos);
  CHECK(one.said[0].find("more bad lines") == std::string::npos);
}

TEST_CASE("names file path in sentences: printable, quoted, at most 200 bytes") {
  // A newline and an escape sequence in the path cannot forge a second line or colour it.
  const std::string forged = "/nonexistent/x\n\x1b[32mferrum-replay: all good";
  ReadNames read(forged.c_str());
  REQUIRE(read.said.size() == 1);
  CHECK(printable_line(read.said[0]));
  CHECK(read.said[0].find("FERRUM_REPLAY_NAMES='/nonexistent/x??[32mferrum-replay: all good' "
                          "cannot be read") == 0);
  const std::string long_path = "/nonexistent/" + std::string(300, 'p');
  ReadNames long_read(long_path.c_str());
  REQUIRE(long_read.said.size() == 1);
  CHECK(long_read.said[0].find("FERRUM_REPLAY_NAMES='/nonexistent/" + std::string(187, 'p') +
                               "...' cannot be read") == 0);
  // And in the bad-line sentences of a readable file whose name has a control byte.
  char dir[] = "/tmp/ferrum-names-dir-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string odd = std::string(dir) + "/a\tb.names";
  FILE *file = fopen(odd.c_str(), "w");
  REQUIRE(file != nullptr);
  fputs("bogus\n", file);
  fclose(file);
  ReadNames bad(odd.c_str());
  unlink(odd.c_str());
  rmdir(dir);
  REQUIRE(bad.said.size() == 1);
  CHECK(printable_line(bad.said[0]));
  CHECK(bad.said[0].find(std::string(dir) + "/a?b.names' line 1:") != std::string::npos);
}

TEST_CASE("call-site names: parameters stripped, operators and templates kept") {
  auto strip = [](const char *in) {
    char buffer[256];
    std::strcpy(buffer, in);
    ferrum_replay::shim::strip_parameters(buffer);
    return std::string(buffer);
  };
  CHECK(strip("Server::capture_decode(int, float)") == "Server::capture_decode");
  CHECK(strip("capture_prefill") == "capture_prefill");
  CHECK(strip("std::vector<int (*)(int)>::push_back(int)") ==
        "std::vector<int (*)(int)>::push_back");
  CHECK(strip("main::{lambda()#1}::operator()() const") == "main::{lambda()#1}::operator()");
  CHECK(strip("(anonymous namespace)::instantiate(CUgraphExec_st**)") ==
        "(anonymous namespace)::instantiate");
  CHECK(strip("ns::(anonymous namespace)::f<int>(int)") == "ns::(anonymous namespace)::f<int>");
}

TEST_CASE("call-site frames: CUDA libraries, the static runtime and user prefixes are skipped") {
  CHECK(ferrum_replay::shim::is_skipped_frame("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "", ""));
  CHECK(ferrum_replay::shim::is_skipped_frame("/opt/cuda/lib64/libcudart.so.13", "", ""));
  CHECK(ferrum_replay::shim::is_skipped_frame("/x/libferrum-replay.so", "", ""));
  // The foreign-function layers Python calls through: libffi's stubs, ctypes, cffi.
  CHECK(ferrum_replay::shim::is_skipped_frame("/usr/lib/x86_64-linux-gnu/libffi.so.8", "ffi_call",
                                              ""));
  CHECK(ferrum_replay::shim::is_skipped_frame(
      "/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so", "", ""));
  CHECK(ferrum_replay::shim::is_skipped_frame("/venv/_cffi_backend.cpython-311-x86_64-linux-gnu.so",
                                              "", ""));
  CHECK_FALSE(ferrum_replay::shim::is_skipped_frame("/app/libffi_user_code.so", "", ""));
  CHECK(ferrum_replay::shim::is_skipped_frame("/app/server", "cudaGraphInstantiate", ""));
  CHECK(ferrum_replay::shim::is_skipped_frame("/app/server", "cuGraphInstantiateWithFlags", ""));
  CHECK(ferrum_replay::shim::is_skipped_frame("/app/server", "cudart::globalState::init", ""));
  CHECK_FALSE(ferrum_replay::shim::is_skipped_frame("/app/server", "cuda_capture_graphs", ""));
  CHECK_FALSE(ferrum_replay::shim::is_skipped_frame("/app/server", "capture_decode", ""));
  CHECK(ferrum_replay::shim::is_skipped_frame(
      "/app/libtorch_cuda.so", "at::cuda::CUDAGraph::capture_end", "at::cuda::,c10::"));
  CHECK(ferrum_replay::shim::is_skipped_frame("/app/libtorch_cuda.so", "x", "libtorch"));
  CHECK_FALSE(ferrum_replay::shim::is_skipped_frame("/app/server", "main", "at::cuda::,c10::"));
  // Blanks around an item are not part of it; an empty item skips nothing (it skipped all).
  CHECK(ferrum_replay::shim::is_skipped_frame("/app/libtorch_cuda.so", "c10::x",
                                              "at::cuda::, c10:: "));
  CHECK(ferrum_replay::shim::is_skipped_frame("/app/libtorch_cuda.so", "x",
                                              " at::cuda::,\tlibtorch"));
  CHECK_FALSE(ferrum_replay::shim::is_skipped_frame("/app/server", "main", "a,,b"));
  CHECK_FALSE(ferrum_replay::shim::is_skipped_frame("/app/server", "main", " , "));
  CHECK(ferrum_replay::shim::is_skipped_frame("/app/server", "b_main", "a,,b"));
}

TEST_CASE("content descriptions: most frequent first, ties by name, at most three") {
  ferrum_replay::shim::NodeTally tallies[] = {
      {"memset", 2}, {"rmsnorm", 2}, {"decode_attention", 4}, {"empty", 1}};
  char out[128];
  ferrum_replay::shim::format_content(9, tallies, 4, 3, out, sizeof out);
  CHECK(std::string(out) == "9 nodes: decode_attention x4, memset x2, rmsnorm x2, ...");
  ferrum_replay::shim::NodeTally one[] = {{"empty", 1}};
  ferrum_replay::shim::format_content(1, one, 1, 3, out, sizeof out);
  CHECK(std::string(out) == "1 node: empty x1");
  ferrum_replay::shim::format_content(0, nullptr, 0, 3, out, sizeof out);
  CHECK(std::string(out) == "0 nodes");
}

TEST_CASE("output paths expand %p, %h, %q{VAR} and %%") {
  // FERRUM_TEST_RANK=3 is in the environment meson starts this test with: patterns read the
  // start-up environment (common/startup_env.hpp), so a setenv() here would change nothing.
  char out[256];
  REQUIRE(ferrum_replay::shim::expand_process_pattern("s.%q{FERRUM_TEST_RANK}.%p.%%.%x.txt", out,
                                                      sizeof out));
  CHECK(std::string(out) == "s.3." + std::to_string(getpid()) + ".%.%x.txt");
  REQUIRE(ferrum_replay::shim::expand_process_pattern("%q{FERRUM_TEST_UNSET_VARIABLE}-x", out,
                                                      sizeof out));
  CHECK(std::string(out) == "-x");
  CHECK_FALSE(
      ferrum_replay::shim::expand_process_pattern(std::string(300, 'x').c_str(), out, sizeof out));
}
