#include "render/render.hpp"
#include "report/report.hpp"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "spec/model.hpp"
#include "units/units.hpp"

namespace het::render {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) out += "\xEF\xBF\xBD";  // U+FFFD
        else out += ch;
    }
  }
  return out;
}

namespace {

constexpr double kWidth = 1280;   // the picture's width in px; the height follows the content
constexpr double kMargin = 16;
constexpr double kLabel = 230;    // left column: subcluster and lane labels
constexpr double kRight = 170;    // timeline's right column: idle share and memory
constexpr const char* kFont = "font-family=\"sans-serif\"";

// Timeline categories.
constexpr const char* kForward = "#4c78c8";
constexpr const char* kBackward = "#e8833a";
constexpr const char* kSendOn = "#3a9d4a";
constexpr const char* kSendBack = "#96cf6f";
constexpr const char* kSync = "#9467bd";
constexpr const char* kOptimizer = "#444444";
constexpr const char* kIdle = "#e6e6e6";
constexpr const char* kUnused = "#c8c8c8";
constexpr const char* kCross = "#c0392b";
constexpr const char* kIntra = "#303030";

using het::report::fmt;
std::string px(double v) { return fmt("%.1f", v); }
std::string gib(double bytes) { return fmt("%.1f", bytes / (1024.0 * 1024 * 1024)); }

// 1234567 -> "1,234,567"
std::string grouped(double v) {
  std::string digits = fmt("%.0f", v), out;
  const std::size_t start = digits[0] == '-' ? 1 : 0;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > start && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string duration(double s) {
  if (s == 0) return "0 s";
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.2f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}

// Distinct colours for any number of stages: hues a golden angle apart, three lightnesses.
std::string colour(int i) {
  const double h = std::fmod(205.0 + 137.508 * i, 360.0) / 60.0;
  const double s = 0.62, l = i % 3 == 0 ? 0.50 : i % 3 == 1 ? 0.64 : 0.38;
  const double c = (1 - std::fabs(2 * l - 1)) * s, x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1)), m = l - c / 2;
  double r = 0, g = 0, b = 0;
  if (h < 1) r = c, g = x;
  else if (h < 2) r = x, g = c;
  else if (h < 3) g = c, b = x;
  else if (h < 4) g = x, b = c;
  else if (h < 5) r = x, b = c;
  else r = c, b = x;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround((r + m) * 255)),
                static_cast<int>(std::lround((g + m) * 255)), static_cast<int>(std::lround((b + m) * 255)));
  return buf;
}

std::string text(double x, double y, const std::string& content, const std::string& attrs = "") {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\"" + (attrs.empty() ? "" : " " + attrs) + ">" + escape(content) +
         "</text>\n";
}

std::string rect(double x, double y, double w, double h, const std::string& fill, const std::string& attrs = "",
                 const std::string& title = "") {
  std::string r = "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(w) + "\" height=\"" + px(h) +
                  "\" fill=\"" + fill + "\"" + (attrs.empty() ? "" : " " + attrs);
  if (title.empty()) return r + "/>\n";
  return r + "><title>" + escape(title) + "</title></rect>\n";
}

// A network link as people quote it: "10 Gbit/s, 1 ms".
std::string link_text(const LinkSpec& l) {
  const double bits = l.bandwidth * 8;
  std::string bw = bits >= 1e12 ? fmt("%.3g Tbit/s", bits / 1e12) : bits >= 1e9 ? fmt("%.3g Gbit/s", bits / 1e9) : fmt("%.3g Mbit/s", bits / 1e6);
  std::string lat = l.latency >= 1e-3 ? fmt("%.3g ms", l.latency * 1e3) : fmt("%.3g us", l.latency * 1e6);
  return bw + ", " + lat;
}

// A stage's units in few words: "embedding + layers 0-17", "layers 88-95 + head", "attn 3 .. mlp 7".
std::string short_units(const Plan& plan, const Stage& s) {
  const int last_unit = num_units(plan.model, plan.granularity) - 1;
  if (plan.granularity != Granularity::layer) {
    std::string u = unit_name(plan.model, plan.granularity, s.first);
    return s.last == s.first ? u : u + " .. " + unit_name(plan.model, plan.granularity, s.last);
  }
  std::vector<std::string> parts;
  if (s.first == 0) parts.push_back("embedding");
  const int a = std::max(s.first, 1) - 1, b = std::min(s.last, last_unit - 1) - 1;  // layer indices
  if (a <= b) parts.push_back(a == b ? "layer " + std::to_string(a) : "layers " + std::to_string(a) + "-" + std::to_string(b));
  if (s.last == last_unit) parts.push_back("head");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : " + ") + p;
  return out;
}

std::string units_text(const Plan& plan, const Stage& s) {
  std::string u = unit_name(plan.model, plan.granularity, s.first);
  if (s.last != s.first) u += " .. " + unit_name(plan.model, plan.granularity, s.last);
  return u;
}

std::string layout_text(const Stage& s) {
  std::string t = "tp " + std::to_string(s.tp);
  if (s.cp > 1) t += ", cp " + std::to_string(s.cp);
  t += ", dp " + std::to_string(s.dp);
  if (s.recompute != Recompute::none) t += ", " + std::string(to_string(s.recompute)) + " recompute";
  return t;
}

std::string short_layout(const Stage& s) {
  std::string t = "tp" + std::to_string(s.tp) + (s.cp > 1 ? " cp" + std::to_string(s.cp) : "") + " dp" + std::to_string(s.dp);
  if (s.recompute != Recompute::none) t += " · " + std::string(to_string(s.recompute));
  return t;
}

// Pipelines of identical layout and micro-batching (data-parallel replicas) are drawn as one:
// they share stage colours and timeline lanes. Consecutive runs only, like the stage table.
struct Group {
  int first = 0, last = 0;
  std::string name() const {
    return first == last ? "p" + std::to_string(first) : "p" + std::to_string(first) + "-" + std::to_string(last);
  }
};

// "512 × 4096 tokens", or with sequence-length buckets "48 sequences, 196608 tokens (2048 × 36, ...)".
std::string batch_text(const ModelSpec& m) {
  if (m.seq_lengths.empty())
    return std::to_string(m.training.global_batch_size) + " × " + std::to_string(m.seq_length) + " tokens";
  std::string buckets;
  for (std::size_t b = 0; b < m.seq_lengths.size(); ++b)
    buckets += (b ? ", " : "") + std::to_string(m.seq_lengths[b].length) + " × " + std::to_string(bucket_sequences(m, b));
  return std::to_string(m.training.global_batch_size) + " sequences, " + std::to_string(std::int64_t(tokens_per_iteration(m))) +
         " tokens (" + buckets + ")";
}

std::vector<Group> replica_groups(const Plan& plan) {
  auto same = [&](const Pipeline& x, const Pipeline& y) {
    if (x.stages.size() != y.stages.size() || x.micro_batch_size != y.micro_batch_size ||
        x.num_microbatches != y.num_microbatches || x.bucket_microbatches != y.bucket_microbatches)
      return false;
    for (std::size_t i = 0; i < x.stages.size(); ++i) {
      const Stage &a = x.stages[i], &b = y.stages[i];
      if (a.subcluster != b.subcluster || a.first != b.first || a.last != b.last || a.tp != b.tp || a.cp != b.cp ||
          a.dp != b.dp || a.recompute != b.recompute || a.warmup != b.warmup)
        return false;
    }
    return true;
  };
  std::vector<Group> groups;
  for (int p = 0; p < static_cast<int>(plan.pipelines.size()); ++p) {
    if (!groups.empty() && same(plan.pipelines[groups.back().first], plan.pipelines[p])) groups.back().last = p;
    else groups.push_back({p, p});
  }
  return groups;
}

struct Point {
  double x = 0, y = 0;
};

// Everything the drawing needs to know about the plan, computed once.
struct View {
  const predict::Outcome& o;
  const Plan& plan;
  std::vector<Group> groups;
  std::vector<int> group_of;                   // [pipeline]
  std::vector<std::vector<int>> colour_index;  // [pipeline][stage] -> legend entry
  int entries = 0;                             // legend entries: groups x their stages

  explicit View(const predict::Outcome& outcome) : o(outcome), plan(outcome.plan), groups(replica_groups(plan)) {
    group_of.resize(plan.pipelines.size());
    colour_index.resize(plan.pipelines.size());
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const int base = entries;
      for (int p = groups[g].first; p <= groups[g].last; ++p) {
        group_of[p] = static_cast<int>(g);
        for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) colour_index[p].push_back(base + static_cast<int>(s));
      }
      entries += static_cast<int>(plan.pipelines[groups[g].first].stages.size());
    }
  }
  std::string stage_name(int p, int s) const { return groups[group_of[p]].name() + " s" + std::to_string(s); }
};

// ---- title and summary --------------------------------------------------------------------

double draw_title(const View& view, double y, std::string& out) {
  const Plan& plan = view.plan;
  int stages = 0, used = 0;
  for (const auto& p : plan.pipelines) {
    stages += static_cast<int>(p.stages.size());
    for (const auto& s : p.stages) used += static_cast<int>(s.devices.size());
  }
  out += text(kMargin, y + 18, plan.model.name + " on " + plan.cluster.name, std::string(kFont) + " font-size=\"18\" font-weight=\"bold\"");
  out += text(kMargin, y + 38,
              "schedule " + std::string(to_string(plan.schedule)) + " · " + std::to_string(plan.pipelines.size()) +
                  (plan.pipelines.size() == 1 ? " pipeline" : " pipelines") + " · " + std::to_string(stages) + " stages · " +
                  std::to_string(used) + " of " + std::to_string(plan.cluster.num_devices()) + " devices · global batch " +
                  batch_text(plan.model) + (plan.algorithm ? " · found by " + plan.algorithm->name : ""),
              std::string(kFont) + " font-size=\"12\" fill=\"#444\"");
  const auto& pr = *plan.predicted;
  const std::vector<std::pair<std::string, std::string>> numbers = {
      {"iteration", duration(pr.iteration_s)},
      {"throughput", grouped(pr.tokens_per_s) + " tokens/s"},
      {"MFU", fmt("%.1f %%", 100 * pr.mfu)},
      {"bubble", fmt("%.1f %%", 100 * pr.bubble_fraction)},
      {"load balance", fmt("%.1f %%", 100 * pr.load_balance_eta)},
      {"exposed sync", duration(view.o.sim.exposed_sync_s)},
      {"cross-subcluster", fmt("%.2f GB", pr.cross_cluster_bytes / 1e9) + fmt(", %.0f %% hidden", 100 * pr.cross_overlap)}};
  double x = kMargin;
  out += "<g class=\"summary\">\n";
  for (const auto& [k, v] : numbers) {
    const double w = 12 + std::max(6.2 * static_cast<double>(k.size()), 8.0 * static_cast<double>(v.size()));
    out += rect(x, y + 48, w, 38, "#f4f6f8", "rx=\"4\" stroke=\"#d0d4d8\"");
    out += text(x + 6, y + 62, k, std::string(kFont) + " font-size=\"11\" fill=\"#555\"");
    out += text(x + 6, y + 79, v, std::string(kFont) + " font-size=\"13\" font-weight=\"bold\"");
    x += w + 8;
  }
  out += "</g>\n";
  return y + 100;
}

// ---- the cluster ---------------------------------------------------------------------------

double draw_cluster(const View& view, double y, std::string& out) {
  const Plan& plan = view.plan;
  const ClusterSpec& cluster = plan.cluster;
  const int total = cluster.num_devices();
  // Cells shrink with the device count so that ~1000 devices fit in a few rows per subcluster.
  const double cell = total <= 16 ? 26 : total <= 64 ? 16 : total <= 256 ? 11 : 8;
  const double gap = cell >= 11 ? 2 : 1, pad = 3, node_gap = cell >= 11 ? 10 : 5;
  const bool node_labels = cell >= 11;
  const double label_h = node_labels ? 12 : 0;

  // Which stage each device serves: [subcluster][node * devices_per_node + device].
  std::vector<std::vector<std::pair<int, int>>> owner(cluster.subclusters.size());
  for (std::size_t i = 0; i < cluster.subclusters.size(); ++i)
    owner[i].assign(static_cast<std::size_t>(cluster.subclusters[i].num_devices()), {-1, -1});
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p)
    for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) {
      const Stage& st = plan.pipelines[p].stages[s];
      const int sc = cluster.index_of(st.subcluster);
      if (sc < 0) continue;
      const int dpn = cluster.subclusters[sc].devices_per_node;
      for (const auto& d : st.devices) {
        const long k = static_cast<long>(d.node) * dpn + d.device;
        if (d.device < dpn && k >= 0 && k < static_cast<long>(owner[sc].size()))
          owner[sc][static_cast<std::size_t>(k)] = {static_cast<int>(p), static_cast<int>(s)};
      }
    }

  out += text(kMargin, y + 14, "Cluster: every device coloured by the stage it serves; arrows follow each pipeline's stages",
              std::string(kFont) + " font-size=\"14\" font-weight=\"bold\"");
  y += 24;
  // Centres of each legend entry's cells (a stage of a group of identical pipelines), for the arrows.
  std::vector<Point> sum(static_cast<std::size_t>(view.entries));
  std::vector<int> count(static_cast<std::size_t>(view.entries));
  std::vector<double> band_top(cluster.subclusters.size()), band_bottom(cluster.subclusters.size());
  std::string devices;
  const double x0 = kMargin + kLabel, x1 = kWidth - kMargin;
  for (std::size_t sc = 0; sc < cluster.subclusters.size(); ++sc) {
    const SubclusterSpec& sub = cluster.subclusters[sc];
    const int dpn = sub.devices_per_node;
    const int cols = std::max(1, std::min(dpn, 8)), rows = (dpn + cols - 1) / cols;
    const double node_w = cols * cell + (cols - 1) * gap + 2 * pad, node_h = rows * cell + (rows - 1) * gap + 2 * pad;
    const int per_row = std::max(1, static_cast<int>((x1 - x0 + node_gap) / (node_w + node_gap)));
    const int node_rows = (sub.nodes + per_row - 1) / per_row;
    const double inner_h = node_rows * (node_h + label_h + node_gap) - node_gap;
    const double band_h = std::max(sub.inter_node ? 72.0 : 58.0, inner_h + 16);
    band_top[sc] = y, band_bottom[sc] = y + band_h;
    out += "<g class=\"subcluster\" data-subcluster=\"" + escape(sub.name) + "\">\n";
    out += rect(kMargin, y, kWidth - 2 * kMargin, band_h, "#fafbfc", "rx=\"6\" stroke=\"#c9ced4\"");
    out += text(kMargin + 10, y + 20, sub.name, std::string(kFont) + " font-size=\"14\" font-weight=\"bold\"");
    out += text(kMargin + 10, y + 36, std::to_string(sub.nodes) + " × " + std::to_string(dpn) + " " + sub.device.type,
                std::string(kFont) + " font-size=\"11\" fill=\"#333\"");
    out += text(kMargin + 10, y + 50,
                units::format(sub.device.memory, units::Dimension::bytes) + ", " +
                    units::format(sub.device.peak, units::Dimension::flops) + ", " +
                    units::format(sub.intra_node.bandwidth, units::Dimension::bandwidth) + " in a node",
                std::string(kFont) + " font-size=\"10\" fill=\"#666\"");
    if (sub.inter_node)
      out += text(kMargin + 10, y + 63, link_text(*sub.inter_node) + " between nodes", std::string(kFont) + " font-size=\"10\" fill=\"#666\"");
    for (int n = 0; n < sub.nodes; ++n) {
      const double nx = x0 + (n % per_row) * (node_w + node_gap);
      const double ny = y + 8 + (n / per_row) * (node_h + label_h + node_gap) + label_h;
      if (node_labels) out += text(nx, ny - 3, "node " + std::to_string(n), std::string(kFont) + " font-size=\"9\" fill=\"#666\"");
      out += rect(nx, ny, node_w, node_h, "#ffffff", "stroke=\"#9aa3ad\" rx=\"2\"", sub.name + " node " + std::to_string(n));
      for (int d = 0; d < dpn; ++d) {
        const double dx = nx + pad + (d % cols) * (cell + gap), dy = ny + pad + (d / cols) * (cell + gap);
        const auto [p, s] = owner[sc][static_cast<std::size_t>(n) * static_cast<std::size_t>(dpn) + static_cast<std::size_t>(d)];
        const std::string where = sub.name + " node " + std::to_string(n) + " device " + std::to_string(d);
        const std::string data = "data-subcluster=\"" + escape(sub.name) + "\" data-node=\"" + std::to_string(n) +
                                 "\" data-device=\"" + std::to_string(d) + "\"";
        if (p < 0) {
          devices += rect(dx, dy, cell, cell, kUnused, "class=\"device\" " + data + " data-stage=\"unused\"", where + ": unused");
          continue;
        }
        const Stage& st = plan.pipelines[p].stages[s];
        devices += rect(dx, dy, cell, cell, colour(view.colour_index[p][s]),
                        "class=\"device\" " + data + " data-stage=\"p" + std::to_string(p) + " s" + std::to_string(s) + "\"",
                        where + ": pipeline " + std::to_string(p) + " stage " + std::to_string(s) + ", " +
                            units_text(plan, st) + ", " + layout_text(st));
        const auto e = static_cast<std::size_t>(view.colour_index[p][s]);
        sum[e].x += dx + cell / 2, sum[e].y += dy + cell / 2, ++count[e];
      }
    }
    out += devices + "</g>\n";
    devices.clear();
    y += band_h + 10;
  }

  // Arrows: one per stage hop of each group of identical pipelines, from the middle of a
  // stage's devices (over the group's replicas) to the next stage's; groups bend alternately.
  std::set<std::pair<std::string, std::string>> labelled;
  std::string arrows, labels;
  for (std::size_t g = 0; g < view.groups.size(); ++g) {
    const int p = view.groups[g].first;
    const auto& stages = plan.pipelines[p].stages;
    for (std::size_t s = 0; s + 1 < stages.size(); ++s) {
      const auto e = static_cast<std::size_t>(view.colour_index[p][s]);
      if (!count[e] || !count[e + 1]) continue;
      const Point a{sum[e].x / count[e], sum[e].y / count[e]};
      const Point b{sum[e + 1].x / count[e + 1], sum[e + 1].y / count[e + 1]};
      const bool cross = stages[s].subcluster != stages[s + 1].subcluster;
      const double dx = b.x - a.x, dy = b.y - a.y, len = std::max(1.0, std::hypot(dx, dy));
      const double bend = std::clamp(0.18 * len, 8.0, 60.0) * (g % 2 == 0 ? 1 : -1);
      const Point c{(a.x + b.x) / 2 - dy / len * bend, (a.y + b.y) / 2 + dx / len * bend};
      const std::string title = view.groups[g].name() + ": stage " + std::to_string(s) + " (" +
                                stages[s].subcluster + ") to stage " + std::to_string(s + 1) + " (" +
                                stages[s + 1].subcluster + ")";
      arrows += "<path class=\"hop" + std::string(cross ? " cross" : "") + "\" d=\"M" + px(a.x) + "," + px(a.y) + " Q" +
                px(c.x) + "," + px(c.y) + " " + px(b.x) + "," + px(b.y) + "\" fill=\"none\" stroke=\"" +
                (cross ? kCross : kIntra) + "\" stroke-width=\"" + (cross ? "2.2" : "1.3") +
                "\" stroke-opacity=\"0.85\" marker-end=\"url(#" + (cross ? "arrow-cross" : "arrow") + ")\"><title>" +
                escape(title) + "</title></path>\n";
      if (!cross) continue;
      auto key = std::minmax(stages[s].subcluster, stages[s + 1].subcluster);
      if (!labelled.insert({key.first, key.second}).second) continue;
      const LinkSpec link = cluster.link_between(stages[s].subcluster, stages[s + 1].subcluster);
      const std::string label = link_text(link);
      // The label sits where the arrow leaves its band, in the gap between bands (not on the
      // devices), and beside the arrow when it is steep.
      const int from = cluster.index_of(stages[s].subcluster), to = cluster.index_of(stages[s + 1].subcluster);
      const double gap_y = to > from ? (band_bottom[from] + band_top[from + 1]) / 2 : (band_top[from] + band_bottom[from - 1]) / 2;
      Point at = a;
      for (int k = 0; k <= 100; ++k) {
        const double t = k / 100.0;
        const Point q{(1 - t) * (1 - t) * a.x + 2 * (1 - t) * t * c.x + t * t * b.x,
                      (1 - t) * (1 - t) * a.y + 2 * (1 - t) * t * c.y + t * t * b.y};
        if (std::fabs(q.y - gap_y) < std::fabs(at.y - gap_y)) at = q;
      }
      const double w = 12 + 6.4 * static_cast<double>(label.size());
      const bool steep = std::fabs(dy) > std::fabs(dx);
      const double lx = steep ? at.x + 8 + w / 2 : at.x, ly = at.y;
      labels += "<g class=\"link-label\">" + rect(lx - w / 2, ly - 9, w, 18, "#ffffff", "rx=\"3\" stroke=\"" + std::string(kCross) + "\" fill-opacity=\"0.92\"",
                                                  key.first + " – " + key.second + " link") +
                text(lx, ly + 4, label, std::string(kFont) + " font-size=\"11\" text-anchor=\"middle\" fill=\"" + kCross + "\"") + "</g>\n";
    }
  }
  out += "<g class=\"hops\">\n" + arrows + labels + "</g>\n";

  // Legend: one entry per stage (of each group of identical pipelines), then unused devices.
  std::vector<std::string> entries;
  std::vector<std::string> colours, titles;
  for (const auto& g : view.groups) {
    const auto& stages = plan.pipelines[g.first].stages;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      entries.push_back(view.stage_name(g.first, static_cast<int>(s)) + " " + stages[s].subcluster + ": " + short_units(plan, stages[s]));
      colours.push_back(colour(view.colour_index[g.first][s]));
      titles.push_back(layout_text(stages[s]) + ", " + std::to_string(stages[s].devices.size()) + " devices per pipeline");
    }
  }
  bool unused = false;
  for (const auto& o : owner)
    for (const auto& ps : o) unused = unused || ps.first < 0;
  if (unused) entries.push_back("unused"), colours.push_back(kUnused), titles.push_back("devices no stage uses");
  const double entry_w = 260;
  const int per_row = std::max(1, static_cast<int>((kWidth - 2 * kMargin) / entry_w));
  out += "<g class=\"legend\">\n";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const double ex = kMargin + static_cast<double>(i % per_row) * entry_w, ey = y + 4 + static_cast<double>(i / per_row) * 16;
    out += rect(ex, ey, 11, 11, colours[i], "stroke=\"#555\" stroke-width=\"0.5\"", titles[i]);
    std::string e = entries[i];
    if (e.size() > 40) e = e.substr(0, 38) + "..";
    out += text(ex + 16, ey + 10, e, std::string(kFont) + " font-size=\"11\"");
  }
  y += 8 + static_cast<double>((entries.size() + per_row - 1) / per_row) * 16;
  // Links between subclusters, all of them (the arrows label only those the plan crosses).
  if (cluster.subclusters.size() > 1) {
    std::string links = "links between subclusters: ";
    for (std::size_t i = 0; i < cluster.links.size(); ++i)
      links += (i ? "; " : "") + cluster.links[i].a + " – " + cluster.links[i].b + " " + link_text(cluster.links[i].link);
    if (cluster.default_link)
      links += std::string(cluster.links.empty() ? "" : "; ") + (cluster.links.empty() ? "every pair " : "other pairs ") +
               link_text(*cluster.default_link);
    out += text(kMargin, y + 12, links, std::string(kFont) + " font-size=\"11\" fill=\"#333\"");
    y += 18;
  }
  out += "</g>\n";
  return y + 8;
}

// ---- the timeline --------------------------------------------------------------------------

struct Interval {
  double start = 0, end = 0;
};

// Intervals merged where they are less than `join` apart (a pixel, in seconds).
std::vector<Interval> merged(std::vector<Interval> v, double join) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const auto& i : v) {
    if (!out.empty() && i.start - out.back().end < join) out.back().end = std::max(out.back().end, i.end);
    else out.push_back(i);
  }
  return out;
}

// A tick step of 1, 2 or 5 times a power of ten giving about `n` ticks.
double tick_step(double span, int n) {
  const double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * mag >= raw) return f * mag;
  return 10 * mag;
}

double draw_timeline(const View& view, double y, std::string& out) {
  const Plan& plan = view.plan;
  const auto& sim = view.o.sim;
  const double T = sim.iteration_s > 0 ? sim.iteration_s : 1;
  const double tx0 = kMargin + kLabel, tx1 = kWidth - kMargin - kRight;
  const double scale = (tx1 - tx0) / T;
  auto X = [&](double t) { return tx0 + t * scale; };

  out += text(kMargin, y + 14, "One iteration, simulated: " + duration(sim.iteration_s) + " (one lane per stage)",
              std::string(kFont) + " font-size=\"14\" font-weight=\"bold\"");
  // Category legend.
  const std::vector<std::pair<const char*, std::string>> legend = {
      {kForward, "forward"}, {kBackward, "backward"}, {kSendOn, "send activations"}, {kSendBack, "send gradients"},
      {kSync, "gradient sync"}, {kOptimizer, "optimizer step"}, {kIdle, "idle"}};
  double lx = kMargin;
  out += "<g class=\"timeline-legend\">\n";
  for (const auto& [c, name] : legend) {
    out += rect(lx, y + 24, 11, 11, c);
    out += text(lx + 15, y + 34, name, std::string(kFont) + " font-size=\"11\"");
    lx += 30 + 6.5 * static_cast<double>(name.size());
  }
  out += text(tx1 + 8, y + 34, "idle", std::string(kFont) + " font-size=\"11\" fill=\"#444\"");
  out += text(tx1 + 46, y + 34, "peak memory / capacity", std::string(kFont) + " font-size=\"11\" fill=\"#444\"");
  out += "</g>\n";
  y += 44;

  // Trace events by track name.
  std::map<std::string, std::vector<const sim::TraceEvent*>> by_track;
  for (const auto& e : sim.trace) by_track[e.track].push_back(&e);
  auto events = [&](const std::string& track) {
    std::vector<const sim::TraceEvent*> v;
    for (const char* suffix : {"", " send"})
      if (auto it = by_track.find(track + suffix); it != by_track.end()) v.insert(v.end(), it->second.begin(), it->second.end());
    return v;
  };

  const double row = 7, send_row = 3, lane_h = 2 * row + 2 * send_row + 2, lane_gap = 9;
  const double join = 1.0 / scale;  // a pixel
  const double lanes_top = y;
  for (const auto& g : view.groups) {
    const int p = g.first;
    const auto& stages = plan.pipelines[p].stages;
    for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
      const Stage& st = stages[s];
      const auto& detail = view.o.stages[p][s];
      const auto& report = sim.pipelines[p].stages[s];
      const std::string name = view.stage_name(p, s);
      const std::string pre = "p" + std::to_string(p) + " s" + std::to_string(s);
      std::vector<Interval> fwd, bwd, opt, on, back;
      for (const auto* e : events(pre + " compute")) {
        const Interval i{e->start_s, e->start_s + e->duration_s};
        if (e->name == "optimizer") opt.push_back(i);
        else if (!e->name.empty() && e->name[0] == 'F') fwd.push_back(i);
        else bwd.push_back(i);
      }
      if (s + 1 < static_cast<int>(stages.size()))
        for (const auto* e : events(pre + "->s" + std::to_string(s + 1))) on.push_back({e->start_s, e->start_s + e->duration_s});
      if (s > 0)
        for (const auto* e : events(pre + "->s" + std::to_string(s - 1))) back.push_back({e->start_s, e->start_s + e->duration_s});
      const double busy = sim.pipelines[p].makespan_s > 0 ? report.compute_s / sim.pipelines[p].makespan_s : 0;
      out += "<g class=\"lane\" data-lane=\"" + escape(name) + "\"><title>" +
             escape(name + " on " + st.subcluster + ": " + units_text(plan, st) + "; " + layout_text(st) + "; warm-up " +
                    std::to_string(detail.warmup) + "; per micro-batch forward " + duration(detail.forward_s) +
                    ", backward " + duration(detail.backward_s) +
                    (s + 1 < static_cast<int>(stages.size()) ? ", send " + duration(detail.send_forward_s) : "") +
                    fmt("; computing %.0f %% of the pipeline's time", 100 * busy)) +
             "</title>\n";
      // Label: the stage's colour, name and subcluster; its units and layout below.
      out += rect(kMargin, y + 1, 10, 10, colour(view.colour_index[p][s]), "stroke=\"#555\" stroke-width=\"0.5\"");
      out += text(kMargin + 15, y + 10, name + "  " + st.subcluster, std::string(kFont) + " font-size=\"11\" font-weight=\"bold\"");
      std::string sub = short_units(plan, st) + " · " + short_layout(st);
      if (sub.size() > 48) sub = sub.substr(0, 46) + "..";
      out += text(kMargin + 15, y + 21, sub, std::string(kFont) + " font-size=\"9\" fill=\"#555\"");
      // Idle is what the operations leave uncovered.
      out += rect(tx0, y, tx1 - tx0, 2 * row, kIdle);
      out += rect(tx0, y + 2 * row + 1, tx1 - tx0, 2 * send_row, "#f3f3f3");
      auto bars = [&](const std::vector<Interval>& v, double top, double h, const char* fill) {
        std::string r;
        for (const auto& i : merged(v, join)) r += rect(X(i.start), top, std::max(0.6, (i.end - i.start) * scale), h, fill);
        return r;
      };
      out += bars(fwd, y, row, kForward);
      out += bars(bwd, y + row, row, kBackward);
      out += bars(opt, y, 2 * row, kOptimizer);
      out += bars(on, y + 2 * row + 1, send_row, kSendOn);
      out += bars(back, y + 2 * row + 1 + send_row, send_row, kSendBack);
      if (detail.sync_s > 0) {
        const double end = report.sync_end_s, start = std::max(0.0, end - detail.sync_s);
        out += bars({{start, end}}, y + 2 * row + 1, 2 * send_row, kSync);
      }
      // Right column: idle share of the iteration, and peak memory against capacity.
      const double idle = std::max(0.0, 1 - report.compute_s / T);
      out += text(tx1 + 8, y + 13, fmt("%.0f %%", 100 * idle), std::string(kFont) + " font-size=\"11\" fill=\"#444\"");
      const double mem = detail.memory.total(), cap = detail.capacity, share = cap > 0 ? std::min(1.0, mem / cap) : 0;
      const bool over = mem > cap;
      out += rect(tx1 + 46, y + 3, 50, 10, "#e3e3e3");
      out += rect(tx1 + 46, y + 3, 50 * share, 10, over ? "#d62728" : "#6aa56a");
      out += text(tx1 + 100, y + 12, gib(mem) + " / " + gib(cap) + " GiB" + (over ? " !" : ""),
                  std::string(kFont) + " font-size=\"10\"" + (over ? " fill=\"#d62728\" font-weight=\"bold\"" : " fill=\"#333\""));
      out += "</g>\n";
      y += lane_h + lane_gap;
    }
  }
  // Time axis.
  const double step = tick_step(T, 8);
  const bool ms = T < 2;
  out += "<g class=\"axis\">\n";
  out += "<line x1=\"" + px(tx0) + "\" y1=\"" + px(y) + "\" x2=\"" + px(tx1) + "\" y2=\"" + px(y) + "\" stroke=\"#555\"/>\n";
  for (double t = 0; t <= T * (1 + 1e-9); t += step) {
    out += "<line x1=\"" + px(X(t)) + "\" y1=\"" + px(lanes_top - 2) + "\" x2=\"" + px(X(t)) + "\" y2=\"" + px(y + 4) +
           "\" stroke=\"#999\" stroke-width=\"0.5\" stroke-dasharray=\"2,3\"/>\n";
    const std::string label = ms ? fmt(step * 1e3 < 1 ? "%.2f" : "%.0f", t * 1e3) + " ms" : fmt(step < 1 ? "%.1f" : "%.0f", t) + " s";
    out += text(X(t), y + 16, label, std::string(kFont) + " font-size=\"10\" text-anchor=\"middle\" fill=\"#333\"");
  }
  out += "</g>\n";
  return y + 28;
}

std::string svg_element(const predict::Outcome& outcome) {
  const View view(outcome);
  std::string body;
  double y = kMargin;
  y = draw_title(view, y, body);
  y = draw_cluster(view, y, body);
  y = draw_timeline(view, y, body);
  for (const auto& n : outcome.notes) {
    body += text(kMargin, y + 12, "note: " + n, std::string(kFont) + " font-size=\"11\" fill=\"#a33\"");
    y += 16;
  }
  const double height = std::ceil(y + kMargin);
  std::string head = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(kWidth) + "\" height=\"" + px(height) +
                     "\" viewBox=\"0 0 " + px(kWidth) + " " + px(height) + "\">\n";
  head += "<title>" + escape("hetplan: " + outcome.plan.model.name + " on " + outcome.plan.cluster.name) + "</title>\n";
  head += "<defs>\n";
  for (auto [id, c] : {std::pair{"arrow", kIntra}, std::pair{"arrow-cross", kCross}})
    head += "<marker id=\"" + std::string(id) + "\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"" + c + "\"/></marker>\n";
  head += "</defs>\n";
  head += rect(0, 0, kWidth, height, "#ffffff");
  return head + body + "</svg>\n";
}

}  // namespace

std::string svg(const predict::Outcome& outcome) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + svg_element(outcome);
}

std::string html(const predict::Outcome& o) {
  const Plan& plan = o.plan;
  const auto& pr = *plan.predicted;
  const std::string title = plan.model.name + " on " + plan.cluster.name;
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>" + escape("hetplan: " + title) +
                    "</title>\n<style>\n"
                    "body { font-family: sans-serif; margin: 16px; color: #222; }\n"
                    "table { border-collapse: collapse; margin: 8px 0 20px; font-size: 13px; }\n"
                    "th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }\n"
                    "th { background: #f0f2f4; }\n"
                    ".l { text-align: left; }\n"
                    ".over { color: #d62728; font-weight: bold; }\n"
                    "svg { max-width: 100%; height: auto; }\n"
                    "</style>\n</head>\n<body>\n";
  out += "<h1>" + escape(title) + "</h1>\n";
  out += "<table class=\"summary\">\n";
  auto row = [&](const std::string& k, const std::string& v) {
    out += "<tr><th class=\"l\">" + escape(k) + "</th><td>" + escape(v) + "</td></tr>\n";
  };
  row("schedule", std::string(to_string(plan.schedule)) + ", " + std::to_string(plan.pipelines.size()) + " pipeline(s)");
  row("global batch", batch_text(plan.model));
  row("iteration", duration(pr.iteration_s));
  row("throughput", grouped(pr.tokens_per_s) + " tokens/s");
  row("MFU", fmt("%.1f %%", 100 * pr.mfu));
  row("bubble", fmt("%.1f %%", 100 * pr.bubble_fraction));
  row("load balance (eta, HAPT eq. 25)", fmt("%.1f %%", 100 * pr.load_balance_eta));
  row("exposed gradient sync", duration(o.sim.exposed_sync_s));
  row("cross-subcluster traffic", fmt("%.2f GB per iteration", pr.cross_cluster_bytes / 1e9) +
                                      fmt(", %.0f %% of its time hidden behind compute", 100 * pr.cross_overlap));
  if (plan.algorithm) row("found by", plan.algorithm->name + fmt(" in %.1f s", plan.algorithm->seconds));
  out += "</table>\n";
  out += svg_element(o);
  out += "<h2>Stages</h2>\n<table class=\"stages\">\n<tr><th>pipeline</th><th>stage</th><th class=\"l\">subcluster</th>"
         "<th>devices</th><th class=\"l\">units</th><th>tp/cp/dp</th><th class=\"l\">recompute</th><th>warm-up</th>"
         "<th>forward ms</th><th>backward ms</th><th>send ms</th><th>peak memory / capacity GiB</th><th>busy</th></tr>\n";
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const auto& stages = plan.pipelines[p].stages;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const Stage& st = stages[s];
      const auto& d = o.stages[p][s];
      const double makespan = o.sim.pipelines[p].makespan_s;
      const bool over = d.memory.total() > d.capacity;
      out += "<tr><td>" + std::to_string(p) + "</td><td>" + std::to_string(s) + "</td><td class=\"l\">" + escape(st.subcluster) +
             "</td><td>" + std::to_string(st.devices.size()) + "</td><td class=\"l\">" + escape(units_text(plan, st)) +
             "</td><td>" + std::to_string(st.tp) + "/" + std::to_string(st.cp) + "/" + std::to_string(st.dp) +
             "</td><td class=\"l\">" + to_string(st.recompute) + "</td><td>" + std::to_string(d.warmup) + "</td><td>" +
             fmt("%.2f", d.forward_s * 1e3) + "</td><td>" + fmt("%.2f", d.backward_s * 1e3) + "</td><td>" +
             (s + 1 < stages.size() ? fmt("%.2f", d.send_forward_s * 1e3) : "-") + "</td><td" +
             (over ? " class=\"over\"" : "") + ">" + gib(d.memory.total()) + " / " + gib(d.capacity) + "</td><td>" +
             fmt("%.0f %%", makespan > 0 ? 100 * o.sim.pipelines[p].stages[s].compute_s / makespan : 0) + "</td></tr>\n";
    }
  }
  out += "</table>\n";
  if (!o.notes.empty()) {
    out += "<ul class=\"notes\">\n";
    for (const auto& n : o.notes) out += "<li>" + escape(n) + "</li>\n";
    out += "</ul>\n";
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace het::render
