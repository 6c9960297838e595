#include "sweep/report.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "render/render.hpp"
#include "report/report.hpp"

namespace het::sweep {

namespace {

using report::fmt;

std::string stage_shape(const Stage& s) {
  std::string out = s.subcluster;
  if (s.dp > 1) out += " dp" + std::to_string(s.dp);
  if (s.cp > 1) out += " cp" + std::to_string(s.cp);
  if (s.tp > 1) out += " tp" + std::to_string(s.tp);
  if (s.dp * s.cp * s.tp == 1) out += " x1";
  return out + " (" + std::to_string(s.first) + "-" + std::to_string(s.last) + ")";
}

std::string pipeline_shape(const Pipeline& p) {
  std::string out;
  for (const Stage& s : p.stages) out += (out.empty() ? "" : ", ") + stage_shape(s);
  return out;
}

}  // namespace

std::string shape_of(const Plan& plan) {
  // Identical pipelines (the same stages, units and shapes) counted once.
  std::vector<std::pair<std::string, int>> kinds;
  for (const Pipeline& p : plan.pipelines) {
    const std::string s = std::to_string(p.stages.size()) + (p.stages.size() == 1 ? " stage: " : " stages: ") + pipeline_shape(p);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == s; });
    if (it == kinds.end()) kinds.emplace_back(s, 1);
    else ++it->second;
  }
  std::string out;
  for (const auto& [s, n] : kinds)
    out += (out.empty() ? "" : "; ") + std::to_string(n) + (n == 1 ? " pipeline x " : " pipelines x ") + s;
  return out;
}

int devices_used(const Plan& plan) {
  int n = 0;
  for (const Pipeline& p : plan.pipelines)
    for (const Stage& s : p.stages) n += static_cast<int>(s.devices.size());
  return n;
}

nlohmann::ordered_json point_json(const Plan& plan) {
  const Prediction& p = *plan.predicted;
  nlohmann::ordered_json j = {{"iteration_s", p.iteration_s}, {"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu}};
  if (p.usd_per_million_tokens) j["cost_usd_per_hour"] = *p.cost_usd_per_hour, j["usd_per_million_tokens"] = *p.usd_per_million_tokens;
  j["devices_used"] = devices_used(plan);
  j["devices"] = plan.cluster.num_devices();
  j["pipelines"] = plan.pipelines.size();
  j["plan"] = shape_of(plan);
  return j;
}

std::string table(const Vary& vary, const std::vector<Row>& rows) {
  std::size_t width = vary.path.size();
  for (const Row& r : rows) width = std::max(width, r.value.size());
  std::ostringstream out;
  auto pad = [&](const std::string& s) { return s + std::string(width + 2 - std::min(width + 1, s.size()), ' '); };
  // Cost columns when the plans have one (their devices have prices).
  const bool priced = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.plan && r.plan->predicted->usd_per_million_tokens; });
  out << pad(vary.path) << "iteration_s     tokens/s    MFU  devices" << (priced ? "      USD/h  USD/Mtoken" : "") << "    search_s  plan\n";
  for (const Row& r : rows) {
    out << pad(r.value);
    if (!r.plan) {
      out << "          -            -      -        -  " << (priced ? "         -            -  " : "") << fmt("%10.2f", r.search_s)
          << "  " << r.error << "\n";
      continue;
    }
    const Prediction& p = *r.plan->predicted;
    const std::string devices = std::to_string(devices_used(*r.plan)) + "/" + std::to_string(r.plan->cluster.num_devices());
    out << fmt("%11.4f", p.iteration_s) << "  " << fmt("%11.0f", p.tokens_per_s) << "  " << fmt("%4.1f%%", 100 * p.mfu) << "  "
        << std::string(devices.size() < 7 ? 7 - devices.size() : 0, ' ') << devices << "  "
        << (priced ? (p.usd_per_million_tokens ? fmt("%9.2f", *p.cost_usd_per_hour) + "  " + fmt("%10.4f", *p.usd_per_million_tokens)
                                               : std::string("        -           -")) + "  "
                   : std::string())
        << fmt("%10.2f", r.search_s) << "  "
        << shape_of(*r.plan) << "\n";
  }
  return out.str();
}

nlohmann::ordered_json to_json(const Vary& vary, const std::vector<Row>& rows) {
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    nlohmann::ordered_json j = {{"value", r.value}};
    j["number"] = r.number ? nlohmann::ordered_json(*r.number) : nlohmann::ordered_json();
    if (r.plan) {
      j.update(point_json(*r.plan));
    } else {
      j["iteration_s"] = nullptr;
      j["error"] = r.error;
    }
    j["search_s"] = r.search_s;
    points.push_back(std::move(j));
  }
  return {{"vary", vary.path}, {"unit", vary.unit}, {"spacing", vary.ratio ? "ratio" : "even"}, {"points", std::move(points)}};
}

std::string svg(const Vary& vary, const std::vector<Row>& rows, const std::string& title) {
  using render::escape;
  // Layout (px): a chart of iteration time (left axis) and tokens/s (right axis) against the
  // value, and below it one line per point with the plan's shape.
  const double W = 960, left = 90, right = 90, top = 70, chart_h = 320;
  const double plot_w = W - left - right, bottom = top + chart_h;
  const double line_h = 18, table_top = bottom + 70;
  const double H = table_top + line_h * (static_cast<double>(rows.size()) + 1) + 20;
  const bool numeric = !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.number.has_value(); });
  const bool log_x = numeric && vary.ratio;
  double x_lo = 0, x_hi = 1;
  if (numeric) {
    x_lo = x_hi = *rows.front().number;
    for (const Row& r : rows) x_lo = std::min(x_lo, *r.number), x_hi = std::max(x_hi, *r.number);
    if (log_x) x_lo = std::log10(x_lo), x_hi = std::log10(x_hi);
    if (x_hi <= x_lo) x_hi = x_lo + 1;
  }
  auto x_of = [&](std::size_t i) {
    if (!numeric) return left + (rows.size() == 1 ? plot_w / 2 : plot_w * double(i) / double(rows.size() - 1));
    const double v = log_x ? std::log10(*rows[i].number) : *rows[i].number;
    return left + plot_w * (v - x_lo) / (x_hi - x_lo);
  };
  double t_max = 0, k_max = 0;
  for (const Row& r : rows)
    if (r.plan) t_max = std::max(t_max, r.plan->predicted->iteration_s), k_max = std::max(k_max, r.plan->predicted->tokens_per_s);
  // Round axis tops: 1, 2 or 5 times a power of ten.
  auto nice = [](double v) {
    if (v <= 0) return 1.0;
    const double p = std::pow(10, std::floor(std::log10(v)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
      if (m * p >= v) return m * p;
    return 10 * p;
  };
  t_max = nice(t_max * 1.05), k_max = nice(k_max * 1.05);
  auto y_t = [&](double t) { return bottom - chart_h * t / t_max; };
  auto y_k = [&](double k) { return bottom - chart_h * k / k_max; };
  const char* kTime = "#4c78c8";    // iteration time
  const char* kTokens = "#e8833a";  // tokens/s

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
    << "<text x=\"" << left << "\" y=\"28\" font-size=\"16\" font-weight=\"bold\">" << escape(title) << "</text>\n"
    << "<text x=\"" << left << "\" y=\"48\" fill=\"#555\">the best plan at each value of " << escape(vary.path)
    << (log_x ? " (log scale)" : "") << "</text>\n";
  // Axes and grid.
  o << "<g stroke=\"#999\" stroke-width=\"1\"><line x1=\"" << left << "\" y1=\"" << bottom << "\" x2=\"" << left + plot_w << "\" y2=\""
    << bottom << "\"/><line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << bottom << "\"/><line x1=\""
    << left + plot_w << "\" y1=\"" << top << "\" x2=\"" << left + plot_w << "\" y2=\"" << bottom << "\"/></g>\n";
  for (int k = 0; k <= 5; ++k) {
    const double y = bottom - chart_h * k / 5;
    o << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + plot_w << "\" y2=\"" << y
      << "\" stroke=\"#eee\"/>\n"
      << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\" fill=\"" << kTime << "\">"
      << fmt("%.4g", t_max * k / 5) << "</text>\n"
      << "<text x=\"" << left + plot_w + 6 << "\" y=\"" << y + 4 << "\" fill=\"" << kTokens << "\">" << fmt("%.0f", k_max * k / 5)
      << "</text>\n";
  }
  o << "<text transform=\"translate(" << 22 << "," << top + chart_h / 2 << ") rotate(-90)\" text-anchor=\"middle\" fill=\"" << kTime
    << "\">iteration time (s)</text>\n"
    << "<text transform=\"translate(" << W - 24 << "," << top + chart_h / 2 << ") rotate(90)\" text-anchor=\"middle\" fill=\""
    << kTokens << "\">tokens/s</text>\n";
  for (std::size_t i = 0; i < rows.size(); ++i)
    o << "<text x=\"" << x_of(i) << "\" y=\"" << bottom + 18 << "\" text-anchor=\"middle\">" << escape(rows[i].value) << "</text>\n";
  o << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << bottom + 40 << "\" text-anchor=\"middle\">" << escape(vary.path)
    << "</text>\n";
  // The two series: lines through the points that have a plan.
  auto series = [&](const char* colour, const char* cls, auto y_of) {
    std::string d;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!rows[i].plan) continue;
      d += (d.empty() ? "M" : " L") + fmt("%.1f", x_of(i)) + "," + fmt("%.1f", y_of(*rows[i].plan->predicted));
    }
    if (!d.empty()) o << "<path class=\"" << cls << "\" d=\"" << d << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"3\"/>\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!rows[i].plan) continue;
      o << "<circle class=\"point " << cls << "\" cx=\"" << fmt("%.1f", x_of(i)) << "\" cy=\"" << fmt("%.1f", y_of(*rows[i].plan->predicted))
        << "\" r=\"5\" fill=\"" << colour << "\"><title>" << escape(rows[i].value) << ": " << escape(shape_of(*rows[i].plan))
        << "</title></circle>\n";
    }
  };
  series(kTime, "time", [&](const Prediction& p) { return y_t(p.iteration_s); });
  series(kTokens, "tokens", [&](const Prediction& p) { return y_k(p.tokens_per_s); });
  // Points without a plan: a cross on the axis.
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].plan)
      o << "<text class=\"none\" x=\"" << x_of(i) << "\" y=\"" << bottom - 6 << "\" text-anchor=\"middle\" fill=\"#c00\">x<title>"
        << escape(rows[i].value) << ": " << escape(rows[i].error) << "</title></text>\n";
  // Legend and the plans.
  o << "<rect x=\"" << left + 10 << "\" y=\"" << top + 8 << "\" width=\"14\" height=\"4\" fill=\"" << kTime << "\"/><text x=\"" << left + 30
    << "\" y=\"" << top + 14 << "\">iteration time</text>\n"
    << "<rect x=\"" << left + 140 << "\" y=\"" << top + 8 << "\" width=\"14\" height=\"4\" fill=\"" << kTokens << "\"/><text x=\""
    << left + 160 << "\" y=\"" << top + 14 << "\">tokens/s</text>\n";
  o << "<text x=\"" << 20 << "\" y=\"" << table_top << "\" font-weight=\"bold\">" << escape(vary.path) << " : the plan</text>\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::string text = r.value + " : " + (r.plan ? fmt("%.4g s", r.plan->predicted->iteration_s) + ", " +
                                                       (r.plan->predicted->usd_per_million_tokens
                                                            ? fmt("%.4g USD per million tokens", *r.plan->predicted->usd_per_million_tokens) + ", "
                                                            : std::string()) +
                                                       shape_of(*r.plan)
                                                 : r.error);
    if (text.size() > 150) text = text.substr(0, 147) + "...";
    o << "<text x=\"20\" y=\"" << table_top + line_h * double(i + 1) << "\" font-size=\"11\">" << escape(text) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace het::sweep
