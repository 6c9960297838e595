#include "review/diff.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "plan/buckets.hpp"
#include "plan/plan_io.hpp"
#include "review/text.hpp"

namespace het::review {

using Json = nlohmann::ordered_json;

const char* to_string(Change::Kind kind) {
  switch (kind) {
    case Change::Kind::added: return "added";
    case Change::Kind::removed: return "removed";
    case Change::Kind::changed: return "changed";
  }
  return "?";
}

namespace {

using text::fmt;
using text::seconds;

std::string bytes(double b) {
  if (std::abs(b) >= 1 << 30) return fmt("%.2f GiB", b / (1 << 30));
  if (std::abs(b) >= 1 << 20) return fmt("%.2f MiB", b / (1 << 20));
  return fmt("%.1f KiB", b / (1 << 10));
}

std::string where(std::optional<int> pipeline, std::optional<int> stage) {
  std::string out;
  if (pipeline) out = "pipeline " + std::to_string(*pipeline);
  if (stage) out += " stage " + std::to_string(*stage);
  return out;
}

// "layer 10", or "layer 10 .. layer 13"; units first..last of the plan's unit sequence.
std::string unit_range(const Plan& plan, int first, int last) {
  std::string out = unit_name(plan.model, plan.granularity, first);
  if (last != first) out += " .. " + unit_name(plan.model, plan.granularity, last);
  return out;
}

Json devices_json(const std::vector<DeviceRef>& devices) {
  Json out = Json::array();
  for (const auto& d : devices) out.push_back({{"node", d.node}, {"device", d.device}});
  return out;
}

std::string describe_stage(const Plan& plan, const Stage& s) {
  return describe_devices(s.subcluster, s.devices) + ", layers " + std::to_string(s.first) + "-" +
         std::to_string(s.last) + " (" + unit_range(plan, s.first, s.last) + "), tp " + std::to_string(s.tp) + ", cp " +
         std::to_string(s.cp) + ", dp " + std::to_string(s.dp) + ", recompute " + to_string(s.recompute);
}

// Leaf-by-leaf differences of two JSON values (the embedded model or cluster); `path` is
// the field path of `a` and `b`. Lists of different lengths: common elements compared,
// the rest added or removed.
void json_diff(const std::string& path, const Json& a, const Json& b,
               const std::function<void(Change::Kind, const std::string&, const Json&, const Json&)>& report) {
  if (a == b) return;
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items())
      if (b.contains(key)) json_diff(path + "." + key, value, b[key], report);
      else report(Change::Kind::removed, path + "." + key, value, nullptr);
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) report(Change::Kind::added, path + "." + key, nullptr, value);
    return;
  }
  if (a.is_array() && b.is_array() && (a.size() != b.size() || (!a.empty() && a[0].is_structured()))) {
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      if (i >= b.size()) report(Change::Kind::removed, p, a[i], nullptr);
      else if (i >= a.size()) report(Change::Kind::added, p, nullptr, b[i]);
      else json_diff(p, a[i], b[i], report);
    }
    return;
  }
  report(Change::Kind::changed, path, a, b);
}

class Differ {
 public:
  Differ(const Plan& a, const Plan& b, PlanDiff& out) : a_(a), b_(b), out_(out) {}

  void plans() {
    if (a_.schedule != b_.schedule)
      add(Change::Kind::changed, {}, {}, "schedule.kind", to_string(a_.schedule), to_string(b_.schedule),
          std::string("schedule ") + to_string(a_.schedule) + " -> " + to_string(b_.schedule));
    if (a_.granularity != b_.granularity)
      add(Change::Kind::changed, {}, {}, "granularity", to_string(a_.granularity), to_string(b_.granularity),
          std::string("granularity ") + to_string(a_.granularity) + " -> " + to_string(b_.granularity) +
              " (unit numbers count " + (b_.granularity == Granularity::sublayer ? "attn/mlp units" : "layers") + ")");
    specs("model", het::to_json(a_.model), het::to_json(b_.model));
    specs("cluster", het::to_json(a_.cluster), het::to_json(b_.cluster));
    const std::size_t np = std::max(a_.pipelines.size(), b_.pipelines.size());
    for (std::size_t pi = 0; pi < np; ++pi) {
      const int p = static_cast<int>(pi);
      if (pi >= b_.pipelines.size())
        add(Change::Kind::removed, p, {}, "pipeline", pipeline_json(a_, a_.pipelines[pi]), nullptr,
            "pipeline " + std::to_string(p) + " removed: " + describe_pipeline(a_, a_.pipelines[pi]));
      else if (pi >= a_.pipelines.size())
        add(Change::Kind::added, p, {}, "pipeline", nullptr, pipeline_json(b_, b_.pipelines[pi]),
            "pipeline " + std::to_string(p) + " added: " + describe_pipeline(b_, b_.pipelines[pi]));
      else
        pipeline(p, a_.pipelines[pi], b_.pipelines[pi]);
    }
  }

 private:
  void add(Change::Kind kind, std::optional<int> p, std::optional<int> s, std::string field, Json from, Json to,
           std::string text) {
    out_.changes.push_back({kind, p, s, std::move(field), std::move(from), std::move(to), std::move(text)});
  }

  void specs(const std::string& what, const Json& a, const Json& b) {
    json_diff(what, a, b, [&](Change::Kind kind, const std::string& path, const Json& from, const Json& to) {
      std::string text = path + ": ";
      if (kind == Change::Kind::added) text += "added " + to.dump();
      else if (kind == Change::Kind::removed) text += "removed " + from.dump();
      else text += from.dump() + " -> " + to.dump();
      add(kind, {}, {}, path, from, to, text);
    });
  }

  static Json pipeline_json(const Plan& plan, const Pipeline& p) {
    Json stages = Json::array();
    for (const auto& s : p.stages) stages.push_back(stage_json(s));
    Json out = {{"micro_batch_size", p.micro_batch_size}, {"num_microbatches", p.num_microbatches}};
    if (!p.bucket_microbatches.empty()) out["seq_lengths"] = seq_lengths_json(plan.model, p);
    out["stages"] = stages;
    return out;
  }

  static Json stage_json(const Stage& s) {
    return {{"subcluster", s.subcluster}, {"layers", {s.first, s.last}}, {"tp", s.tp}, {"cp", s.cp}, {"dp", s.dp},
            {"recompute", to_string(s.recompute)}, {"devices", devices_json(s.devices)}};
  }

  static std::string describe_pipeline(const Plan& plan, const Pipeline& p) {
    std::string out = std::to_string(p.num_microbatches) + " micro-batches of " + std::to_string(p.micro_batch_size) +
                      (p.bucket_microbatches.empty() ? "" : " (" + length_counts(plan.model, p) + ")") + ", " +
                      std::to_string(p.stages.size()) + " stage" + (p.stages.size() == 1 ? "" : "s");
    for (std::size_t si = 0; si < p.stages.size(); ++si)
      out += (si ? "; " : ": ") + describe_stage(plan, p.stages[si]);
    return out;
  }

  void pipeline(int p, const Pipeline& a, const Pipeline& b) {
    const std::string at = where(p, {});
    if (a.micro_batch_size != b.micro_batch_size)
      add(Change::Kind::changed, p, {}, "micro_batch_size", a.micro_batch_size, b.micro_batch_size,
          at + ": micro-batch size " + std::to_string(a.micro_batch_size) + " -> " + std::to_string(b.micro_batch_size) +
              " sequences");
    if (a.num_microbatches != b.num_microbatches)
      add(Change::Kind::changed, p, {}, "num_microbatches", a.num_microbatches, b.num_microbatches,
          at + ": micro-batches per iteration " + std::to_string(a.num_microbatches) + " -> " +
              std::to_string(b.num_microbatches));
    if (a.bucket_microbatches != b.bucket_microbatches) {
      auto counts = [](const Plan& plan, const Pipeline& q) {
        const std::string c = length_counts(plan.model, q);
        return c.empty() ? std::string("one length") : c;
      };
      add(Change::Kind::changed, p, {}, "seq_lengths", a.bucket_microbatches, b.bucket_microbatches,
          at + ": micro-batches per sequence length " + counts(a_, a) + " -> " + counts(b_, b));
    }
    const std::size_t ns = std::max(a.stages.size(), b.stages.size());
    for (std::size_t si = 0; si < ns; ++si) {
      const int s = static_cast<int>(si);
      if (si >= b.stages.size())
        add(Change::Kind::removed, p, s, "stage", stage_json(a.stages[si]), nullptr,
            where(p, s) + " removed: " + describe_stage(a_, a.stages[si]));
      else if (si >= a.stages.size())
        add(Change::Kind::added, p, s, "stage", nullptr, stage_json(b.stages[si]),
            where(p, s) + " added: " + describe_stage(b_, b.stages[si]));
      else
        stage(p, s, a, b);
    }
  }

  void stage(int p, int s, const Pipeline& pa, const Pipeline& pb) {
    const Stage& a = pa.stages[s];
    const Stage& b = pb.stages[s];
    const std::string at = where(p, s);
    if (a.subcluster != b.subcluster)
      add(Change::Kind::changed, p, s, "subcluster", a.subcluster, b.subcluster,
          at + " moved from subcluster " + a.subcluster + " to " + b.subcluster + " (devices " +
              describe_devices(a.subcluster, a.devices) + " -> " + describe_devices(b.subcluster, b.devices) + ")");
    else if (a.devices != b.devices)
      add(Change::Kind::changed, p, s, "devices", devices_json(a.devices), devices_json(b.devices),
          at + ": devices " + describe_devices(a.subcluster, a.devices) + " -> " + describe_devices(b.subcluster, b.devices));
    if (a.first != b.first || a.last != b.last)
      add(Change::Kind::changed, p, s, "layers", Json{a.first, a.last}, Json{b.first, b.last},
          at + ": layers " + std::to_string(a.first) + "-" + std::to_string(a.last) + " -> " + std::to_string(b.first) +
              "-" + std::to_string(b.last) + boundaries(s, a, b, pa, pb));
    auto degree = [&](const char* name, int from, int to) {
      if (from != to)
        add(Change::Kind::changed, p, s, name, from, to,
            at + ": " + name + " " + std::to_string(from) + " -> " + std::to_string(to));
    };
    degree("tp", a.tp, b.tp);
    degree("cp", a.cp, b.cp);
    degree("dp", a.dp, b.dp);
    if (a.recompute != b.recompute)
      add(Change::Kind::changed, p, s, "recompute", to_string(a.recompute), to_string(b.recompute),
          at + ": recompute " + to_string(a.recompute) + " -> " + to_string(b.recompute));
    if (a.warmup && b.warmup && *a.warmup != *b.warmup)
      add(Change::Kind::changed, p, s, "warmup", *a.warmup, *b.warmup,
          at + ": warm-ups " + std::to_string(*a.warmup) + " -> " + std::to_string(*b.warmup) +
              " (forwards before its first backward)");
  }

  // " (boundary moved by 2 units: takes layer 10 .. layer 11 from stage 1)": which units
  // moved to or from a neighbour that exists in both plans.
  std::string boundaries(int s, const Stage& a, const Stage& b, const Pipeline& pa, const Pipeline& pb) const {
    std::vector<std::string> moves;
    auto move = [&](int first, int last, bool takes, int neighbour) {
      const int n = last - first + 1;
      moves.push_back("boundary moved by " + std::to_string(n) + " unit" + (n == 1 ? "" : "s") + ": " +
                      (takes ? "takes " : "gives ") + unit_range(takes ? b_ : a_, first, last) +
                      (takes ? " from stage " : " to stage ") + std::to_string(neighbour));
    };
    const bool before = s > 0;
    const bool after = static_cast<std::size_t>(s) + 1 < std::min(pa.stages.size(), pb.stages.size());
    if (before && b.first < a.first) move(b.first, a.first - 1, true, s - 1);
    if (before && b.first > a.first) move(a.first, b.first - 1, false, s - 1);
    if (after && b.last > a.last) move(a.last + 1, b.last, true, s + 1);
    if (after && b.last < a.last) move(b.last + 1, a.last, false, s + 1);
    std::string out;
    for (const auto& m : moves) out += (out.empty() ? " (" : "; ") + m;
    return out.empty() ? out : out + ")";
  }

  const Plan& a_;
  const Plan& b_;
  PlanDiff& out_;
};

bool differs(double a, double b) { return std::abs(a - b) > 1e-9 * std::max(std::abs(a), std::abs(b)); }

void metric(PlanDiff& out, std::string name, std::optional<int> p, std::optional<int> s, double from, double to,
            const std::string& label, const std::function<std::string(double)>& show) {
  if (!differs(from, to)) return;
  std::optional<double> change;
  if (from != 0) change = (to - from) / from;
  std::string text = where(p, s);
  text += (text.empty() ? "" : ": ") + label + " " + show(from) + " -> " + show(to) + " (" +
          (change ? fmt("%+.1f%%", 100 * *change) : std::string("was 0")) + ")";
  out.metrics.push_back({std::move(name), p, s, from, to, change, std::move(text)});
}

void metrics(const Plan& a, const Plan& b, PlanDiff& out) {
  auto pct = [](double v) { return fmt("%.1f%%", 100 * v); };
  const Prediction& x = *a.predicted;
  const Prediction& y = *b.predicted;
  metric(out, "iteration_s", {}, {}, x.iteration_s, y.iteration_s, "iteration", seconds);
  metric(out, "tokens_per_s", {}, {}, x.tokens_per_s, y.tokens_per_s, "throughput",
         [](double v) { return fmt("%.0f tokens/s", v); });
  metric(out, "mfu", {}, {}, x.mfu, y.mfu, "MFU", pct);
  metric(out, "bubble_fraction", {}, {}, x.bubble_fraction, y.bubble_fraction, "bubble", pct);
  metric(out, "load_balance_eta", {}, {}, x.load_balance_eta, y.load_balance_eta, "load balance", pct);
  metric(out, "cross_cluster_bytes", {}, {}, x.cross_cluster_bytes, y.cross_cluster_bytes,
         "cross-subcluster traffic per iteration", [](double v) { return fmt("%.3f GB", v / 1e9); });
  metric(out, "cross_overlap", {}, {}, x.cross_overlap, y.cross_overlap,
         "cross-subcluster transfer time overlapped with compute", pct);
  for (std::size_t pi = 0; pi < std::min(a.pipelines.size(), b.pipelines.size()); ++pi) {
    const auto& sa = a.pipelines[pi].stages;
    const auto& sb = b.pipelines[pi].stages;
    for (std::size_t si = 0; si < std::min(sa.size(), sb.size()); ++si) {
      if (!sa[si].predicted || !sb[si].predicted) continue;
      const StagePrediction& u = *sa[si].predicted;
      const StagePrediction& v = *sb[si].predicted;
      const int p = static_cast<int>(pi), s = static_cast<int>(si);
      metric(out, "forward_s", p, s, u.forward_s, v.forward_s, "forward per micro-batch", seconds);
      metric(out, "backward_s", p, s, u.backward_s, v.backward_s, "backward per micro-batch", seconds);
      metric(out, "memory_bytes", p, s, u.memory_bytes, v.memory_bytes, "peak memory per device", bytes);
    }
  }
}

}  // namespace

std::string describe_devices(const std::string& subcluster, const std::vector<DeviceRef>& devices) {
  // Runs of consecutive devices on one node: "a100 node 0: 0-3, node 1: 0-1".
  std::string out = subcluster;
  std::size_t i = 0;
  while (i < devices.size()) {
    const int node = devices[i].node;
    out += (i ? ", node " : " node ") + std::to_string(node) + ":";
    bool first = true;
    while (i < devices.size() && devices[i].node == node) {
      std::size_t j = i;
      while (j + 1 < devices.size() && devices[j + 1].node == node && devices[j + 1].device == devices[j].device + 1) ++j;
      out += (first ? " " : ",") + std::to_string(devices[i].device) +
             (j > i ? "-" + std::to_string(devices[j].device) : "");
      first = false;
      i = j + 1;
    }
  }
  return out;
}

PlanDiff diff_plans(const Plan& a, const Plan& b, const std::string& a_name, const std::string& b_name) {
  PlanDiff out;
  Differ(a, b, out).plans();
  if (a.predicted && b.predicted) metrics(a, b, out);
  else if (a.predicted || b.predicted)
    out.not_compared = (a.predicted ? b_name : a_name) + " has no predictions";
  else
    out.not_compared = "neither plan has predictions";
  return out;
}

std::string to_text(const PlanDiff& diff, const std::string& a_name, const std::string& b_name) {
  const std::string skipped =
      diff.not_compared.empty() ? "" : "predictions not compared: " + diff.not_compared + " (--simulate predicts both)";
  if (diff.same())
    return "same: " + a_name + " and " + b_name + " are the same plan" + (skipped.empty() ? "" : "; " + skipped) + "\n";
  std::string out = a_name + " -> " + b_name + ": " + std::to_string(diff.changes.size()) + " change" +
                    (diff.changes.size() == 1 ? "" : "s") + ", " + std::to_string(diff.metrics.size()) +
                    " predicted metric" + (diff.metrics.size() == 1 ? "" : "s") + " differ" +
                    (diff.metrics.size() == 1 ? "s" : "") + "\n";
  for (const auto& c : diff.changes) out += "  " + c.text + "\n";
  for (const auto& m : diff.metrics) out += "  " + m.text + "\n";
  if (!skipped.empty()) out += "  " + skipped + "\n";
  return out;
}

Json to_json(const PlanDiff& diff, const std::string& a_name, const std::string& b_name) {
  auto opt = [](const std::optional<int>& v) { return v ? Json(*v) : Json(); };
  Json changes = Json::array();
  for (const auto& c : diff.changes)
    changes.push_back({{"kind", to_string(c.kind)}, {"pipeline", opt(c.pipeline)}, {"stage", opt(c.stage)},
                       {"field", c.field}, {"from", c.from}, {"to", c.to}, {"text", c.text}});
  Json metrics = Json::array();
  for (const auto& m : diff.metrics)
    metrics.push_back({{"metric", m.metric}, {"pipeline", opt(m.pipeline)}, {"stage", opt(m.stage)}, {"from", m.from},
                       {"to", m.to}, {"change", m.change ? Json(*m.change) : Json()}, {"text", m.text}});
  return {{"same", diff.same()}, {"a", a_name},   {"b", b_name},
          {"changes", changes},  {"metrics", metrics},
          {"not_compared", diff.not_compared.empty() ? Json() : Json(diff.not_compared)}};
}

}  // namespace het::review
