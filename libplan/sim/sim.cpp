#include "sim/sim.hpp"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "schedule/schedule.hpp"

namespace het::sim {

namespace {

constexpr double kUnknown = -1;

using Interval = std::pair<double, double>;

// Length of [a, b) covered by the sorted, disjoint intervals of `busy`, starting the scan
// at `from` (advanced for the next, later query).
double covered(const std::vector<Interval>& busy, std::size_t& from, double a, double b) {
  while (from < busy.size() && busy[from].second <= a) ++from;
  double sum = 0;
  for (std::size_t k = from; k < busy.size() && busy[k].first < b; ++k)
    sum += std::max(0.0, std::min(b, busy[k].second) - std::max(a, busy[k].first));
  return sum;
}

struct CrossTotals {
  double transfer = 0, hidden = 0;
};

// What a pipeline adds to the CrossTotals, transfer by transfer: (its time, the part hidden).
using CrossSteps = std::vector<std::pair<double, double>>;

// What run_pipeline's result depends on (not the stages' names): pipelines with equal keys
// have equal reports.
std::vector<double> schedule_key(const PipelineInput& p) {
  std::vector<double> key = {double(p.num_microbatches), double(p.stages.size())};
  key.insert(key.end(), p.warmup.begin(), p.warmup.end());
  for (const StageCosts& c : p.stages)
    key.insert(key.end(), {c.forward_s, c.backward_s, c.send_forward_s, c.send_backward_s, c.cross_to_next ? 1.0 : 0.0});
  key.push_back(double(p.kind.size()));
  key.insert(key.end(), p.kind.begin(), p.kind.end());
  for (const auto& stages : p.by_kind)
    for (const StageCosts& c : stages) key.insert(key.end(), {c.forward_s, c.backward_s, c.send_forward_s, c.send_backward_s});
  return key;
}

// Simulates one pipeline's DAG; appends trace events when asked.
Result<PipelineReport> run_pipeline(const PipelineInput& p, int index, bool trace, std::vector<TraceEvent>& events,
                                    CrossSteps& cross) {
  const int S = static_cast<int>(p.stages.size());
  const int m = p.num_microbatches;
  const std::string where = "pipelines[" + std::to_string(index) + "]";
  if (S == 0 || m < 1) return Diagnostic{"", 0, 0, where, "a pipeline needs at least one stage and one micro-batch"};
  if (static_cast<int>(p.warmup.size()) != S)
    return Diagnostic{"", 0, 0, where, "expected one warm-up count per stage"};
  if (!p.kind.empty()) {
    if (static_cast<int>(p.kind.size()) != m) return Diagnostic{"", 0, 0, where, "expected one kind per micro-batch"};
    for (int k : p.kind)
      if (k < 0 || k >= static_cast<int>(p.by_kind.size()) || static_cast<int>(p.by_kind[k].size()) != S)
        return Diagnostic{"", 0, 0, where, "a micro-batch's kind has no costs for every stage"};
  }

  std::vector<std::vector<schedule::Op>> ops(S);
  for (int s = 0; s < S; ++s) ops[s] = schedule::stage_ops(p.warmup[s], m);

  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(m);
  std::vector<double> f_end(n, kUnknown), cf_arrive(n, kUnknown), cb_arrive(n, kUnknown);
  auto at = [m](int s, int i) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(m) + static_cast<std::size_t>(i); };
  std::vector<double> free_at(S, 0), link_f_free(S, 0), link_b_free(S, 0);
  std::vector<std::size_t> pos(S, 0);
  std::vector<int> in_flight(S, 0);
  // Busy intervals of stages next to a cross-subcluster hop, and the hop's transfers
  // (forward ones wait on the next stage, backward ones on this one).
  std::vector<std::vector<Interval>> busy(S), sends_f(S), sends_b(S);
  auto near_cross = [&](int s) { return p.stages[s].cross_to_next || (s > 0 && p.stages[s - 1].cross_to_next); };
  PipelineReport report;
  report.stages.resize(S);

  std::vector<int> work;
  std::vector<char> queued(S, 1);
  for (int s = S - 1; s >= 0; --s) work.push_back(s);
  auto wake = [&](int s) {
    if (!queued[s]) queued[s] = 1, work.push_back(s);
  };
  // The event's names are built only when tracing: a search simulates every candidate's
  // micro-batches without a trace, and the strings were most of that time.
  auto emit = [&](auto track, auto name, double start, double dur) {
    if (trace) events.push_back({"p" + std::to_string(index) + " " + track(), name(), start, dur});
  };

  while (!work.empty()) {
    const int s = work.back();
    work.pop_back();
    queued[s] = 0;
    StageReport& r = report.stages[s];
    while (pos[s] < ops[s].size()) {
      const schedule::Op op = ops[s][pos[s]];
      const int i = op.microbatch;
      const StageCosts& c = microbatch_costs(p, s, i);
      if (op.kind == schedule::OpKind::forward) {
        double ready = s == 0 ? 0 : cf_arrive[at(s - 1, i)];
        if (ready == kUnknown) break;  // waiting for activations
        const double start = std::max(free_at[s], ready), end = start + c.forward_s;
        f_end[at(s, i)] = free_at[s] = end;
        r.compute_s += c.forward_s;
        if (near_cross(s)) busy[s].push_back({start, end});
        r.max_in_flight = std::max(r.max_in_flight, ++in_flight[s]);
        emit([&] { return "s" + std::to_string(s) + " compute"; }, [&] { return "F" + std::to_string(i); }, start, c.forward_s);
        if (s + 1 < S) {
          const double cs = std::max(end, link_f_free[s]);
          cf_arrive[at(s, i)] = link_f_free[s] = cs + c.send_forward_s;
          if (p.stages[s].cross_to_next) sends_f[s].push_back({cs, cs + c.send_forward_s});
          r.send_busy_s += c.send_forward_s;
          emit([&] { return "s" + std::to_string(s) + "->s" + std::to_string(s + 1); }, [&] { return "C^F " + std::to_string(i); }, cs,
               c.send_forward_s);
          wake(s + 1);
        }
      } else {
        double ready = s == S - 1 ? f_end[at(s, i)] : cb_arrive[at(s, i)];
        if (ready == kUnknown) break;  // waiting for gradients
        const double start = std::max(free_at[s], ready), end = start + c.backward_s;
        free_at[s] = end;
        r.compute_s += c.backward_s;
        if (near_cross(s)) busy[s].push_back({start, end});
        --in_flight[s];
        r.last_backward_end_s = end;
        emit([&] { return "s" + std::to_string(s) + " compute"; }, [&] { return "B" + std::to_string(i); }, start, c.backward_s);
        if (s > 0) {
          const StageCosts& prev = microbatch_costs(p, s - 1, i);
          const double cs = std::max(end, link_b_free[s - 1]);
          cb_arrive[at(s - 1, i)] = link_b_free[s - 1] = cs + prev.send_backward_s;
          if (p.stages[s - 1].cross_to_next) sends_b[s - 1].push_back({cs, cs + prev.send_backward_s});
          report.stages[s - 1].send_busy_s += prev.send_backward_s;
          emit([&] { return "s" + std::to_string(s) + "->s" + std::to_string(s - 1); }, [&] { return "C^B " + std::to_string(i); }, cs,
               prev.send_backward_s);
          wake(s - 1);
        }
      }
      ++pos[s];
    }
  }
  for (int s = 0; s < S; ++s) {
    if (pos[s] < ops[s].size()) {
      const schedule::Op op = ops[s][pos[s]];
      return Diagnostic{"", 0, 0, where + ".stages[" + std::to_string(s) + "]",
                        "the schedule deadlocks: " + schedule::to_string(op) + " waits for " +
                            (op.kind == schedule::OpKind::forward ? "activations from stage " + std::to_string(s - 1)
                                                                  : "gradients from stage " + std::to_string(s + 1)) +
                            " that never come (warm-up counts must not increase along the pipeline; they are " +
                            [&] {
                              std::string w;
                              for (int x : p.warmup) w += (w.empty() ? "" : ", ") + std::to_string(x);
                              return w;
                            }() + ")"};
    }
    report.makespan_s = std::max(report.makespan_s, report.stages[s].last_backward_end_s);
  }
  for (auto& r : report.stages) r.idle_s = report.makespan_s - r.compute_s;
  // A transfer is hidden while the stage that will consume it computes something else.
  for (int s = 0; s + 1 < S; ++s) {
    if (!p.stages[s].cross_to_next) continue;
    std::size_t k = 0;
    for (auto [a, b] : sends_f[s]) cross.push_back({b - a, covered(busy[s + 1], k, a, b)});
    k = 0;
    for (auto [a, b] : sends_b[s]) cross.push_back({b - a, covered(busy[s], k, a, b)});
  }
  return report;
}

}  // namespace

const StageCosts& microbatch_costs(const PipelineInput& p, int s, int i) {
  return p.kind.empty() ? p.stages[s] : p.by_kind[p.kind[i]][s];
}

Result<PipelineReport> simulate_pipeline(const PipelineInput& pipeline) {
  std::vector<TraceEvent> none;
  CrossSteps cross;
  return run_pipeline(pipeline, 0, false, none, cross);
}

Result<SimResult> simulate(const SimInput& in) {
  SimResult out;
  CrossTotals cross;
  // A pipeline equal to an earlier one (a plan's data-parallel replicas) is simulated once
  // when there is no trace: its report and its cross-subcluster steps are the earlier one's,
  // added again in the same order, so every total is that of simulating it again.
  std::map<std::vector<double>, std::size_t> first_of;  // schedule_key -> the first pipeline with it
  std::vector<CrossSteps> steps(in.pipelines.size());
  for (std::size_t k = 0; k < in.pipelines.size(); ++k) {
    const std::size_t from = in.trace ? k : first_of.emplace(schedule_key(in.pipelines[k]), k).first->second;
    if (from == k) {
      auto r = run_pipeline(in.pipelines[k], static_cast<int>(k), in.trace, out.trace, steps[k]);
      if (!r) return r.errors();
      out.pipelines.push_back(std::move(*r));
    } else {
      PipelineReport same = out.pipelines[from];
      out.pipelines.push_back(std::move(same));
    }
    for (auto [transfer, hidden] : steps[from]) cross.transfer += transfer, cross.hidden += hidden;
  }

  // Gradient sync per group, then optimizer steps.
  for (auto& p : out.pipelines)
    for (auto& st : p.stages) st.sync_end_s = st.last_backward_end_s;
  for (std::size_t g = 0; g < in.sync_groups.size(); ++g) {
    const SyncGroup& group = in.sync_groups[g];
    double ready = 0, all_done = 0;
    for (auto [pi, si] : group.members) {
      if (pi < 0 || pi >= static_cast<int>(out.pipelines.size()) || si < 0 ||
          si >= static_cast<int>(out.pipelines[pi].stages.size()))
        return Diagnostic{"", 0, 0, "sync_groups[" + std::to_string(g) + "]", "names a stage that does not exist"};
      const StageReport& st = out.pipelines[pi].stages[si];
      const PipelineInput& pin = in.pipelines[pi];
      const double last_b = microbatch_costs(pin, si, pin.num_microbatches - 1).backward_s;  // schedules end with it
      // A member's first group may start with its last backward when overlapped; a later one
      // when the member's previous group has ended.
      const bool first = st.sync_end_s == st.last_backward_end_s;
      ready = std::max(ready, in.overlap_sync && first ? st.last_backward_end_s - last_b : st.sync_end_s);
      all_done = std::max(all_done, st.sync_end_s);
    }
    const double end = std::max(ready + group.time_s, all_done);
    for (auto [pi, si] : group.members) out.pipelines[pi].stages[si].sync_end_s = end;
    if (in.trace && group.time_s > 0)
      out.trace.push_back({"sync " + std::to_string(g), "sync", ready, group.time_s});
  }
  double makespan = 0, compute = 0, capacity = 0;
  for (std::size_t k = 0; k < out.pipelines.size(); ++k) {
    auto& p = out.pipelines[k];
    makespan = std::max(makespan, p.makespan_s);
    for (std::size_t s = 0; s < p.stages.size(); ++s) {
      auto& st = p.stages[s];
      const double opt = in.pipelines[k].stages[s].optimizer_s;
      st.finish_s = st.sync_end_s + opt;
      out.iteration_s = std::max(out.iteration_s, st.finish_s);
      compute += st.compute_s;
      capacity += p.makespan_s;
      if (in.trace && opt > 0)
        out.trace.push_back({"p" + std::to_string(k) + " s" + std::to_string(s) + " compute", "optimizer", st.sync_end_s, opt});
    }
  }
  out.bubble_fraction = capacity > 0 ? 1 - compute / capacity : 0;
  double sync_end = 0;
  for (const auto& p : out.pipelines)
    for (const auto& st : p.stages) sync_end = std::max(sync_end, st.sync_end_s);
  out.exposed_sync_s = sync_end - makespan;
  out.cross_overlap = cross.transfer > 0 ? cross.hidden / cross.transfer : 1;
  return out;
}

std::string chrome_trace(const std::vector<TraceEvent>& events) { return chrome_trace(std::vector<TraceProcess>{{"", events}}); }

std::string chrome_trace(const std::vector<TraceProcess>& processes) {
  // Tracks become threads of their process, in order of first appearance.
  nlohmann::json list = nlohmann::json::array();
  for (std::size_t pid = 0; pid < processes.size(); ++pid) {
    const auto& proc = processes[pid];
    if (!proc.name.empty())
      list.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", proc.name}}}});
    std::map<std::string, int> tid;
    for (const auto& e : proc.events) {
      auto [it, fresh] = tid.emplace(e.track, static_cast<int>(tid.size()));
      if (fresh)
        list.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", it->second}, {"args", {{"name", e.track}}}});
      nlohmann::json x = {{"ph", "X"}, {"name", e.name}, {"pid", pid}, {"tid", it->second}, {"ts", e.start_s * 1e6}, {"dur", e.duration_s * 1e6}};
      if (e.compute_s >= 0) x["args"] = {{"compute_us", e.compute_s * 1e6}};
      list.push_back(std::move(x));
    }
  }
  return nlohmann::json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace het::sim
