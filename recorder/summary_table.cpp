#include "summary_table.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "utf8.hpp"

namespace ferrum_replay::recorder {

std::vector<RangeStats> aggregate(const Snapshot &snap) {
  // First by (domain id, name pointer): names are interned per thread, so this map stays small
  // and cheap however many ranges there are; then merged by text across threads.
  std::map<std::pair<std::string, std::string>, RangeStats> by_text;
  for (const ThreadSnapshot &t : snap.threads) {
    std::map<std::pair<uint32_t, const char *>, RangeStats> by_pointer;
    for_each_event(snap, t, [&](const Event &e) {
      RangeStats &s = by_pointer[{e.domain_id, e.attrs.name}];
      const uint64_t dur = snap.scale.span_ns(e.start, e.end);
      s.min_ns = s.count == 0 ? dur : std::min(s.min_ns, dur);
      s.max_ns = std::max(s.max_ns, dur);
      s.total_ns += dur;
      ++s.count;
    });
    for (const auto &[key, s] : by_pointer) {
      const std::string domain =
          key.first < snap.domain_names.size() ? snap.domain_names[key.first] : "?";
      RangeStats &m = by_text[{domain, key.second}];
      m.min_ns = m.count == 0 ? s.min_ns : std::min(m.min_ns, s.min_ns);
      m.max_ns = std::max(m.max_ns, s.max_ns);
      m.total_ns += s.total_ns;
      m.count += s.count;
    }
  }
  std::vector<RangeStats> rows;
  rows.reserve(by_text.size());
  for (auto &[key, s] : by_text) {
    s.domain = key.first;
    s.name = key.second;
    rows.push_back(std::move(s));
  }
  return rows;
}

namespace {

// A table cell must stay on one line whatever bytes a range name holds.
std::string printable(const std::string &text) {
  std::string out;
  for (char c : text) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) ? '?' : c;
  return out.empty() ? "\"\"" : out;
}

void pad_left_aligned(std::string &line, const std::string &cell, size_t width) {
  line += cell;
  for (size_t w = display_width(cell); w < width; ++w) line += ' ';
}

void pad_right_aligned(std::string &line, const std::string &cell, size_t width) {
  for (size_t w = cell.size(); w < width; ++w) line += ' ';
  line += cell;
}

std::string fixed3(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", value);
  // The table is for people, but keep it locale-independent like the trace.
  for (char *p = buf; *p; ++p)
    if (*p == ',') *p = '.';
  return buf;
}

}  // namespace

std::string format_summary(const Snapshot &snap, const std::vector<RangeStats> &all_rows,
                           const std::string &trace_path, size_t max_rows) {
  std::string out = "ferrum-replay recorder: ";
  size_t threads_with_ranges = 0;
  for (const ThreadSnapshot &t : snap.threads)
    if (t.event_count() != 0) ++threads_with_ranges;
  // The ranges the rows were computed from, not a figure kept elsewhere: the first line and the
  // rows always agree.
  uint64_t ranges = 0;
  for (const RangeStats &r : all_rows) ranges += r.count;
  out += std::to_string(ranges) + " ranges on " + std::to_string(threads_with_ranges) +
         " threads";  // fixed wording, even for 1: scripts parse this line
  out += trace_path.empty() ? ", trace not written\n" : ", trace: " + trace_path + "\n";

  // A run with many distinct names (a graph re-instantiated 50,000 times gets 50,000 names)
  // shows its busiest rows and one line for the rest; the trace keeps every range.
  std::vector<RangeStats> busiest;
  uint64_t rest_rows = 0, rest_ranges = 0, rest_ns = 0;
  if (max_rows > 0 && all_rows.size() > max_rows) {
    std::vector<const RangeStats *> order;
    order.reserve(all_rows.size());
    for (const RangeStats &r : all_rows) order.push_back(&r);
    std::stable_sort(order.begin(), order.end(), [](const RangeStats *a, const RangeStats *b) {
      return a->total_ns > b->total_ns;
    });
    for (size_t i = 0; i < order.size(); ++i) {
      if (i < max_rows) {
        busiest.push_back(*order[i]);
      } else {
        ++rest_rows;
        rest_ranges += order[i]->count;
        rest_ns += order[i]->total_ns;
      }
    }
  }
  const std::vector<RangeStats> &rows = rest_rows ? busiest : all_rows;

  if (!rows.empty()) {
    struct Cells {
      std::string domain, name, count, total, mean, min, max;
    };
    std::vector<Cells> cells;
    cells.push_back({"domain", "range", "count", "total ms", "mean us", "min us", "max us"});
    for (const RangeStats &r : rows) {
      const double mean_us =
          r.count ? static_cast<double>(r.total_ns) / static_cast<double>(r.count) / 1e3 : 0.0;
      cells.push_back({printable(r.domain), printable(r.name), std::to_string(r.count),
                       fixed3(static_cast<double>(r.total_ns) / 1e6), fixed3(mean_us),
                       fixed3(static_cast<double>(r.min_ns) / 1e3),
                       fixed3(static_cast<double>(r.max_ns) / 1e3)});
    }
    // Text columns are left-aligned and separated by at least three spaces; numbers are
    // right-aligned under their headers.
    size_t w[7] = {};
    for (const Cells &c : cells) {
      w[0] = std::max(w[0], display_width(c.domain));
      w[1] = std::max(w[1], display_width(c.name));
      w[2] = std::max(w[2], c.count.size());
      w[3] = std::max(w[3], c.total.size());
      w[4] = std::max(w[4], c.mean.size());
      w[5] = std::max(w[5], c.min.size());
      w[6] = std::max(w[6], c.max.size());
    }
    for (const Cells &c : cells) {
      std::string line;
      pad_left_aligned(line, c.domain, w[0] + 3);
      pad_left_aligned(line, c.name, w[1] + 3);
      pad_left_aligned(line, c.count, w[2] + 3);
      pad_right_aligned(line, c.total, w[3]);
      pad_right_aligned(line, c.mean, w[4] + 4);
      pad_right_aligned(line, c.min, w[5] + 4);
      pad_right_aligned(line, c.max, w[6] + 4);
      out += line + "\n";
    }
    if (rest_rows)
      out += "... and " + std::to_string(rest_rows) + " more range names (" +
             std::to_string(rest_ranges) + " ranges, total " +
             fixed3(static_cast<double>(rest_ns) / 1e6) + " ms); the trace has every range\n";
  }

  const ProtocolErrors &e = snap.errors;
  if (e.none()) {
    out += "protocol errors: none\n";
  } else {
    std::string parts;
    const auto add = [&](uint64_t n, const char *what) {
      if (n == 0) return;
      if (!parts.empty()) parts += ", ";
      parts += std::to_string(n) + " " + what;
    };
    add(e.pop_without_push, "pop without push");
    add(e.pop_wrong_domain, "popped in wrong domain");
    add(e.open_at_exit, "open at exit");
    out += "protocol errors: " + parts + "\n";
  }
  if (snap.rejected_pushes > 0)
    out += "rejected pushes: " + std::to_string(snap.rejected_pushes) + "\n";
  return out;
}

}  // namespace ferrum_replay::recorder
