#include "fidelity/fidelity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "input/input.hpp"

namespace het::fidelity {

ClusterSpec dilate(ClusterSpec c, double x, const std::optional<LinkSpec>& transport) {
  auto slow = [&](LinkSpec& l) {
    l.bandwidth /= x, l.latency *= x;
    if (transport) l.bandwidth = 1 / (1 / l.bandwidth + 1 / transport->bandwidth), l.latency += transport->latency;
  };
  for (auto& s : c.subclusters) {
    s.device.peak /= x, s.device.mem_bandwidth /= x;
    slow(s.intra_node);
    if (s.inter_node) slow(*s.inter_node);
  }
  for (auto& l : c.links) slow(l.link);
  if (c.default_link) slow(*c.default_link);
  return c;
}

ProfileSpec dilate(ProfileSpec p, double x) {
  for (auto& r : p.units) {
    r.forward *= x, r.backward *= x;
    if (r.recompute) *r.recompute *= x;
  }
  for (auto& o : p.optimizer_step) o.time *= x;
  for (auto& [kind, l] : p.links) l.bandwidth /= x, l.latency *= x;
  return p;
}

void emulated_run(Plan& plan, std::vector<ProfileSpec>& profiles, double x) {
  std::optional<LinkSpec> transport;
  for (const auto& p : profiles)
    if (p.transport && (!transport || p.transport->latency > transport->latency)) transport = p.transport;
  plan.cluster = dilate(plan.cluster, x, transport);
  for (auto& p : profiles) p = dilate(p, x);
}

Result<std::vector<sim::TraceEvent>> read_chrome_trace(const std::string& file) {
  auto text = input::read_file(file);
  if (!text) return text.errors();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  const nlohmann::json* list = j.is_array() ? &j : j.is_object() && j.contains("traceEvents") ? &j["traceEvents"] : nullptr;
  if (j.is_discarded() || !list || !list->is_array())
    return Diagnostic{file, 0, 0, "", "not a Chrome trace (JSON with traceEvents), as hetexec run-local --trace writes"};
  std::map<std::pair<long, long>, std::string> names;
  for (const auto& e : *list)
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" && e.contains("args"))
      names[{e.value("pid", 0L), e.value("tid", 0L)}] = e["args"].value("name", "");
  std::vector<sim::TraceEvent> out;
  for (const auto& e : *list) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const auto key = std::make_pair(e.value("pid", 0L), e.value("tid", 0L));
    const auto it = names.find(key);
    if (!e.contains("ts") || !e.contains("dur") || !e["ts"].is_number() || !e["dur"].is_number())
      return Diagnostic{file, 0, 0, "traceEvents", "an X event without numeric ts and dur"};
    double compute_s = -1;  // hetexec's compute events: args.compute_us
    if (e.contains("args") && e["args"].is_object() && e["args"].contains("compute_us") && e["args"]["compute_us"].is_number())
      compute_s = e["args"]["compute_us"].get<double>() * 1e-6;
    out.push_back({it != names.end() ? it->second : std::to_string(key.second), e.value("name", ""), e["ts"].get<double>() * 1e-6,
                   e["dur"].get<double>() * 1e-6, compute_s});
  }
  if (out.empty()) return Diagnostic{file, 0, 0, "", "the trace holds no events"};
  return out;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// One rank's track cut into steps: the events inside each "step" event.
struct Steps {
  std::vector<sim::TraceEvent> step;                // the "step" events, in time order
  std::vector<std::vector<sim::TraceEvent>> inside;  // per step, the others
};

std::map<std::string, Steps> by_track(const std::vector<sim::TraceEvent>& events) {
  std::map<std::string, Steps> out;
  for (const auto& e : events)
    if (e.name == "step") out[e.track].step.push_back(e);
  for (auto& [track, s] : out) {
    std::sort(s.step.begin(), s.step.end(), [](const auto& a, const auto& b) { return a.start_s < b.start_s; });
    s.inside.resize(s.step.size());
  }
  for (const auto& e : events) {
    if (e.name == "step") continue;
    auto it = out.find(e.track);
    if (it == out.end()) continue;
    auto& s = it->second;
    const auto k = std::upper_bound(s.step.begin(), s.step.end(), e.start_s, [](double t, const auto& st) { return t < st.start_s; });
    if (k == s.step.begin()) continue;
    const std::size_t i = std::size_t(k - s.step.begin()) - 1;
    if (e.start_s <= s.step[i].start_s + s.step[i].duration_s + 1e-9) s.inside[i].push_back(e);
  }
  return out;
}

// The measured times of one track over steps [1, n).
StageTimes measure(const Steps& s, std::size_t n) {
  std::vector<double> f, b, compute, own, wait, sync, opt, step;
  for (std::size_t k = 1; k < n; ++k) {
    double c = 0, sy = 0, op = 0, oc = 0;
    double fs = 0, bs = 0;  // the step's forwards and backwards
    int fn = 0, bn = 0;
    for (const auto& e : s.inside[k]) {
      const bool fwd = starts_with(e.name, "F"), bwd = starts_with(e.name, "B");
      if (fwd) fs += e.duration_s, ++fn;
      if (bwd) bs += e.duration_s, ++bn;
      if (fwd || bwd) c += e.duration_s, oc += std::max(0.0, e.compute_s);
      if (e.name == "sync" || e.name == "gather") sy += e.duration_s;
      if (e.name == "optimizer") op += e.duration_s;
    }
    if (fn) f.push_back(fs / fn);
    if (bn) b.push_back(bs / bn);
    compute.push_back(c), own.push_back(oc), sync.push_back(sy), opt.push_back(op), step.push_back(s.step[k].duration_s);
    wait.push_back(s.step[k].duration_s - c - sy - op);
  }
  return {median(f), median(b), median(compute), median(own), median(wait), median(sync), median(opt), median(step)};
}

std::string track_of(int p, int s) { return "p" + std::to_string(p) + " s" + std::to_string(s) + " compute"; }

// A measured run by rank track, its steps aligned: the steps every track has (n), and per step
// the slowest rank's time (the iteration).
struct Run {
  std::map<std::string, Steps> tracks;
  std::size_t n = 0;
  std::vector<double> slowest;  // [n]
};

Run run_of(const std::vector<sim::TraceEvent>& events) {
  Run r{by_track(events), 0, {}};
  if (r.tracks.empty()) return r;
  r.n = SIZE_MAX;
  for (const auto& [name, s] : r.tracks) r.n = std::min(r.n, s.step.size());
  r.slowest.assign(r.n, 0.0);
  for (std::size_t k = 0; k < r.n; ++k)
    for (const auto& [name, s] : r.tracks) r.slowest[k] = std::max(r.slowest[k], s.step[k].duration_s);
  return r;
}

}  // namespace

Result<Comparison> compare(const predict::Outcome& o, const std::vector<sim::TraceEvent>& measured) {
  const Run run = run_of(measured);
  const auto& tracks = run.tracks;
  const std::size_t n = run.n;
  if (n < 2)
    return Diagnostic{"", 0, 0, "", "the trace needs at least two steps (\"step\" events) on every rank; run with --steps 2 or more"};
  Comparison c;
  c.steps_used = int(n) - 1;
  c.predicted_step_s = o.sim.iteration_s;
  for (std::size_t pi = 0; pi < o.plan.pipelines.size(); ++pi)
    for (std::size_t si = 0; si < o.plan.pipelines[pi].stages.size(); ++si) {
      const auto it = tracks.find(track_of(int(pi), int(si)));
      if (it == tracks.end())
        return Diagnostic{"", 0, 0, "", "the trace has no track \"" + track_of(int(pi), int(si)) + "\": is it a run of this plan?"};
      const predict::StageDetail& d = o.stages[pi][si];
      const sim::StageReport& r = o.sim.pipelines[pi].stages[si];
      // The stage's member with the most compute of its own (a CP stage's last context member,
      // whose compute the profile times and the others wait for), else its first member.
      StageTimes times = measure(it->second, n);
      const std::string prefix = "p" + std::to_string(pi) + " s" + std::to_string(si) + " ";
      for (auto t = tracks.lower_bound(prefix); t != tracks.end() && starts_with(t->first, prefix.c_str()); ++t)
        if (t != it)
          if (StageTimes other = measure(t->second, n); other.own_compute_s > times.own_compute_s) times = other;
      StageRow row{int(pi), int(si), o.plan.pipelines[pi].stages[si].subcluster, {}, times};
      StageTimes& p = row.predicted;
      p.forward_s = d.forward_s, p.backward_s = d.backward_s, p.compute_s = r.compute_s;
      p.own_compute_s = r.compute_s - o.plan.pipelines[pi].num_microbatches * d.collectives_s;
      p.sync_s = r.sync_end_s - r.last_backward_end_s, p.optimizer_s = r.finish_s - r.sync_end_s;
      p.step_s = o.sim.iteration_s;
      p.wait_s = p.step_s - p.compute_s - p.sync_s - p.optimizer_s;
      c.stages.push_back(row);
    }
  // The iteration, measured: per step the slowest rank's, then the median over steps.
  c.measured_step_s = median({run.slowest.begin() + 1, run.slowest.end()});
  return c;
}

double Comparison::compute_ratio() const {
  double predicted = 0, measured = 0;
  for (const auto& r : stages) predicted += r.predicted.own_compute_s, measured += r.measured.own_compute_s;
  return predicted > 0 && measured > 0 ? measured / predicted : 0;
}

namespace {
std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s * 1e3);
  return buf;
}
std::string pct(double predicted, double measured) {
  if (measured <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * (predicted / measured - 1));
  return buf;
}
}  // namespace

std::string table(const Comparison& c) {
  struct Col {
    const char* name;
    double StageTimes::*field;
  };
  const Col cols[] = {{"forward/mb", &StageTimes::forward_s}, {"backward/mb", &StageTimes::backward_s}, {"compute", &StageTimes::compute_s},
                      {"own compute", &StageTimes::own_compute_s}, {"wait", &StageTimes::wait_s},          {"sync", &StageTimes::sync_s},             {"optimizer", &StageTimes::optimizer_s},
                      {"step", &StageTimes::step_s}};
  std::ostringstream out;
  out << "times in ms, predicted / measured (error of the prediction); measured: median of " << c.steps_used
      << " steps after the first\n";
  out << "stage      subcluster";
  for (const auto& col : cols) out << "  " << std::string(std::max(0, 24 - int(std::string(col.name).size())), ' ') << col.name;
  out << "\n";
  for (const auto& r : c.stages) {
    std::string name = "p" + std::to_string(r.pipeline) + " s" + std::to_string(r.stage);
    out << name << std::string(std::max<std::size_t>(1, 11 - name.size()), ' ') << r.subcluster
        << std::string(std::max<std::size_t>(0, 10 - std::min<std::size_t>(10, r.subcluster.size())), ' ');
    for (const auto& col : cols) {
      const double p = r.predicted.*col.field, m = r.measured.*col.field;
      std::string cell = ms(p) + " / " + ms(m) + " (" + pct(p, m) + ")";
      out << "  " << std::string(std::max(0, 24 - int(cell.size())), ' ') << cell;
    }
    out << "\n";
  }
  out << "step: predicted " << ms(c.predicted_step_s) << " ms, measured " << ms(c.measured_step_s)
      << " ms (slowest rank, median); predicted ÷ measured " << [&] {
           char buf[32];
           std::snprintf(buf, sizeof buf, "%.3f", c.ratio());
           return std::string(buf);
         }() << "\n";
  if (const double k = c.compute_ratio(); k > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "own compute: measured ÷ profiled %.3f (the machine %s during the run than when profiled)\n", k,
                  k > 1 ? "computed slower" : "computed faster");
    out << buf;
  }
  return out.str();
}

nlohmann::ordered_json to_json(const Comparison& c) {
  auto times = [](const StageTimes& t) {
    return nlohmann::ordered_json{{"forward_s", t.forward_s}, {"backward_s", t.backward_s}, {"compute_s", t.compute_s},
                                  {"own_compute_s", t.own_compute_s}, {"wait_s", t.wait_s},       {"sync_s", t.sync_s},         {"optimizer_s", t.optimizer_s},
                                  {"step_s", t.step_s}};
  };
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const auto& r : c.stages)
    stages.push_back({{"pipeline", r.pipeline}, {"stage", r.stage}, {"subcluster", r.subcluster},
                      {"predicted", times(r.predicted)}, {"measured", times(r.measured)}});
  return {{"predicted_step_s", c.predicted_step_s}, {"measured_step_s", c.measured_step_s},
          {"predicted_over_measured", c.ratio()},   {"compute_measured_over_profiled", c.compute_ratio()},
          {"steps_used", c.steps_used},
          {"stages", stages}};
}

std::string side_by_side_trace(const std::vector<sim::TraceEvent>& predicted, const std::vector<sim::TraceEvent>& measured) {
  const Run run = run_of(measured);
  std::vector<sim::TraceEvent> one;
  if (run.n > 0) {
    // The step whose slowest rank took the median time (after the first, when there are more).
    std::vector<std::pair<double, std::size_t>> slowest;
    for (std::size_t k = run.n > 1 ? 1 : 0; k < run.n; ++k) slowest.push_back({run.slowest[k], k});
    std::sort(slowest.begin(), slowest.end());
    const std::size_t k = slowest[slowest.size() / 2].second;
    double t0 = INFINITY;
    for (const auto& [name, s] : run.tracks) t0 = std::min(t0, s.step[k].start_s);
    for (const auto& [name, s] : run.tracks) {
      one.push_back({name, "step", s.step[k].start_s - t0, s.step[k].duration_s});
      for (auto e : s.inside[k]) e.start_s -= t0, one.push_back(e);
    }
  }
  return sim::chrome_trace({{"predicted", predicted}, {"measured", one}});
}

}  // namespace het::fidelity
