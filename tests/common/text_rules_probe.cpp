// Runs the C++ implementation of the text rules (common/text_rules.hpp) on cases read from
// stdin, one per line, and prints one result line per case; tests/common/test_text_rules_cpp.py
// feeds it tests/cases/text_rules.json. Every string is hex ("-" for an empty one), so that
// any byte can pass.
//   env NAME VALUE            -> ok             (sets NAME in the probe's fake environment)
//   expand PID HOST PATTERN   -> ok OUT UNSET   (UNSET: the names, ", "-separated) | error
//   fresh PATH TOKEN          -> OUT | error
//   printable LIMIT IN        -> OUT
//   domain IN                 -> OUT ok | OUT problem
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <string>

#include "text_rules.hpp"

namespace {

std::map<std::string, std::string> g_env;

const char *fake_env(const char *name, void *) {
  const auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

std::string unhex(const std::string &hex) {
  if (hex == "-") return "";
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string hex(const std::string &text) {
  if (text.empty()) return "-";
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

}  // namespace

int main() {
  char *line = nullptr;
  size_t capacity = 0;
  ssize_t length;
  while ((length = getline(&line, &capacity, stdin)) > 0) {
    std::string fields[4];
    int n = 0;
    for (char *token = strtok(line, " \n"); token && n < 4; token = strtok(nullptr, " \n"))
      fields[n++] = token;
    std::string reply;
    if (fields[0] == "env" && n == 3) {
      g_env[unhex(fields[1])] = unhex(fields[2]);
      reply = "ok";
    } else if (fields[0] == "expand" && n == 4) {
      static char out[ferrum_replay::common::kMaxExpandedPath + 1];
      char unset[1024];
      const std::string host = unhex(fields[2]), pattern = unhex(fields[3]);
      if (ferrum_replay::common::expand_pattern(pattern.c_str(), atol(fields[1].c_str()),
                                                host.c_str(), fake_env, nullptr, out, sizeof out,
                                                unset, sizeof unset))
        reply = "ok " + hex(out) + " " + hex(unset);
      else
        reply = "error";
    } else if (fields[0] == "fresh" && n == 3) {
      char out[8192];
      const std::string path = unhex(fields[1]), token = unhex(fields[2]);
      reply = ferrum_replay::common::fresh_name(path.c_str(), token.c_str(), out, sizeof out)
                  ? hex(out)
                  : "error";
    } else if (fields[0] == "printable" && n == 3) {
      const size_t limit = strtoul(fields[1].c_str(), nullptr, 10);
      const std::string in = unhex(fields[2]);
      std::string out(limit + 4, '\0');
      out.resize(ferrum_replay::common::printable_quote(in.data(), in.size(), limit, out.data(),
                                                        out.size()));
      reply = hex(out);
    } else if (fields[0] == "domain" && n == 2) {
      const std::string in = unhex(fields[1]);
      const char *problem = nullptr;
      const char *name = ferrum_replay::common::domain_name(in.c_str(), &problem);
      reply = hex(name) + (problem ? " problem" : " ok");
    } else {
      reply = "bad command";
    }
    printf("%s\n", reply.c_str());
    fflush(stdout);
  }
  free(line);
  return 0;
}
