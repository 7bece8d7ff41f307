#include "graph_naming.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activation.hpp"
#include "graph_registry.hpp"
#include "log.hpp"
#include "message_template.hpp"
#include "names_file.hpp"
#include "text_util.hpp"

namespace ferrum {
namespace {

NameRules g_rules;  // written once at activation, before any registration reads it

struct Complaint {
  const char *path;
};

void complain_about_line(int line, const char *problem, void *context) {
  warn_line("FERRUM_REPLAY_NAMES=%s line %d: %s; line ignored",
            static_cast<Complaint *>(context)->path, line, problem);
}

}  // namespace

void load_names_file(const char *path) {
  if (!path || !*path) return;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    warn_line("FERRUM_REPLAY_NAMES=%s cannot be read (%s); no names file applies", path,
              strerror(errno));
    return;
  }
  constexpr size_t kMaxFile = 1 << 20;  // a names file is a few lines; refuse anything huge
  char *text = static_cast<char *>(malloc(kMaxFile));
  size_t length = 0;
  ssize_t got = 0;
  while (text && length < kMaxFile && (got = read(fd, text + length, kMaxFile - length)) > 0)
    length += static_cast<size_t>(got);
  close(fd);
  if (!text || got < 0) {
    warn_line("FERRUM_REPLAY_NAMES=%s cannot be read; no names file applies", path);
    free(text);
    return;
  }
  if (length == kMaxFile) warn_line("FERRUM_REPLAY_NAMES=%s: only its first 1 MiB is read", path);
  Complaint complaint{path};
  g_rules = parse_names_file(text, length, complain_about_line, &complaint);
  free(text);
  log_line(LogLevel::info, "names file %s: %zu rules", path, g_rules.count);
}

bool compose_message(GraphRecord &record, char *out, size_t out_size) {
  bool chosen_by_person = record.user_named;
  if (!record.user_named) {
    if (const char *rule = find_rule_name(g_rules, record.ordinal, record.site, record.content)) {
      copy_printable_utf8(rule, record.name, sizeof record.name);
      chosen_by_person = true;
    } else if (record.site[0]) {
      copy_printable_utf8(record.site, record.name, sizeof record.name);
    } else {
      snprintf(record.name, sizeof record.name, "graph %u", record.ordinal);
    }
  }
  const TemplateValues values{record.name, record.ordinal, record.site, record.content, record.api};
  render_message(settings().message_template, values, out, out_size);
  if (!out[0]) snprintf(out, out_size, "graph %u", record.ordinal);  // e.g. "{site}" unknown
  return chosen_by_person;
}

}  // namespace ferrum
