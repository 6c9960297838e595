#include "report/report.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "plan/buckets.hpp"

namespace het::report {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

namespace {

std::string gib(double bytes) { return fmt("%.1f", bytes / (1024.0 * 1024 * 1024)); }

// Columns padded to their widest cell; numbers right-aligned.
std::string table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right) {
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      std::string pad(width[c] - r[c].size(), ' ');
      line += (c ? "  " : "") + (right[c] ? pad + r[c] : r[c] + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string stage_table(const predict::Outcome& o) {
  const Plan& plan = o.plan;
  std::vector<std::vector<std::string>> rows = {{"pipe", "stage", "subcluster", "devices", "units", "tp/cp/dp",
                                                 "recompute", "warmup", "fwd_ms", "bwd_ms", "send_ms", "memory_GiB",
                                                 "busy%", "source"}};
  // Identical pipelines (data-parallel replicas of one layout) are printed once, as "0-3".
  auto same = [&](std::size_t a, std::size_t b) {
    const auto& x = plan.pipelines[a].stages;
    const auto& y = plan.pipelines[b].stages;
    if (x.size() != y.size() || plan.pipelines[a].micro_batch_size != plan.pipelines[b].micro_batch_size ||
        plan.pipelines[a].bucket_microbatches != plan.pipelines[b].bucket_microbatches)
      return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i].subcluster != y[i].subcluster || x[i].first != y[i].first || x[i].last != y[i].last || x[i].tp != y[i].tp ||
          x[i].cp != y[i].cp || x[i].dp != y[i].dp || x[i].recompute != y[i].recompute || x[i].warmup != y[i].warmup)
        return false;
    return true;
  };
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    const auto& p = plan.pipelines[pi];
    const double makespan = o.sim.pipelines[pi].makespan_s;
    std::size_t last_same = pi;
    while (last_same + 1 < plan.pipelines.size() && same(pi, last_same + 1)) ++last_same;
    const std::string pipe = last_same == pi ? std::to_string(pi) : std::to_string(pi) + "-" + std::to_string(last_same);
    for (std::size_t si = 0; si < p.stages.size(); ++si) {
      const Stage& s = p.stages[si];
      const auto& d = o.stages[pi][si];
      std::string units = unit_name(plan.model, plan.granularity, s.first);
      if (s.last != s.first) units += " .. " + unit_name(plan.model, plan.granularity, s.last);
      rows.push_back({pipe, std::to_string(si), s.subcluster, std::to_string(s.devices.size()), units,
                      std::to_string(s.tp) + "/" + std::to_string(s.cp) + "/" + std::to_string(s.dp),
                      to_string(s.recompute), std::to_string(d.warmup), fmt("%.2f", d.forward_s * 1e3),
                      fmt("%.2f", d.backward_s * 1e3), si + 1 < p.stages.size() ? fmt("%.2f", d.send_forward_s * 1e3) : "-",
                      gib(d.memory.total()) + " / " + gib(d.capacity) +
                          (d.capacity > 0 ? fmt(" (%.0f%%)", 100 * (1 - d.memory.total() / d.capacity)) : "") +
                          (d.memory.total() > d.limit ? " !" : ""),
                      fmt("%.0f", makespan > 0 ? 100 * o.sim.pipelines[pi].stages[si].compute_s / makespan : 0),
                      cost::to_string(d.source)});
    }
    pi = last_same;
  }
  return table(rows, {true, true, false, true, false, false, false, true, true, true, true, true, true, false});
}

std::string summary(const predict::Outcome& o) {
  const auto& pr = *o.plan.predicted;
  std::string out;
  out += "schedule " + std::string(to_string(o.plan.schedule)) + ", " + std::to_string(o.plan.pipelines.size()) +
         " pipeline(s), global batch " + std::to_string(o.plan.model.training.global_batch_size) + "\n";
  if (!o.plan.model.seq_lengths.empty()) {
    // Micro-batches per length, pipelines with the same counts together: "0-3: 3 x 2048, 1 x 8192".
    const auto& pipes = o.plan.pipelines;
    out += "lengths        micro-batches of each sequence length per pipeline:";
    for (std::size_t a = 0; a < pipes.size();) {
      std::size_t b = a;
      while (b + 1 < pipes.size() && pipes[b + 1].bucket_microbatches == pipes[a].bucket_microbatches) ++b;
      out += (a == 0 ? " " : "; ") + (a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b)) + ": " +
             length_counts(o.plan.model, pipes[a]);
      a = b + 1;
    }
    out += "\n";
  }
  out += "iteration      " + fmt("%.4f s", pr.iteration_s) + "\n";
  out += "throughput     " + fmt("%.0f tokens/s", pr.tokens_per_s) + "\n";
  out += "MFU            " + fmt("%.1f %%", 100 * pr.mfu) + "\n";
  if (pr.cost_usd_per_hour)
    out += "cost           " + fmt("%.2f USD/h", *pr.cost_usd_per_hour) + " (the devices used), " +
           fmt("%.4f USD per million tokens", *pr.usd_per_million_tokens) + "\n";
  out += "bubble         " + fmt("%.1f %%", 100 * pr.bubble_fraction) + "\n";
  out += "load balance   " + fmt("%.1f %% (eta, HAPT eq. 25)", 100 * pr.load_balance_eta) + "\n";
  out += "exposed sync   " + fmt("%.4f s", o.sim.exposed_sync_s) + "\n";
  out += "cross-cluster  " + fmt("%.2f GB per iteration", pr.cross_cluster_bytes / 1e9) + ", " +
         fmt("%.0f %% of its transfer time overlapped with compute", 100 * o.sim.cross_overlap) + "\n";
  // The tightest stage: the least margin of usable memory (its device's less the reserve).
  double least = 2;
  std::size_t at_p = 0, at_s = 0;
  for (std::size_t pi = 0; pi < o.stages.size(); ++pi)
    for (std::size_t si = 0; si < o.stages[pi].size(); ++si)
      if (const auto& d = o.stages[pi][si]; d.capacity > 0 && 1 - d.memory.total() / d.capacity < least)
        least = 1 - d.memory.total() / d.capacity, at_p = pi, at_s = si;
  if (least <= 1) {
    const auto& d = o.stages[at_p][at_s];
    const Stage& s = o.plan.pipelines[at_p].stages[at_s];
    const SubclusterSpec* sub = o.plan.cluster.find(s.subcluster);
    out += "memory         tightest stage p" + std::to_string(at_p) + " s" + std::to_string(at_s) + " (" + s.subcluster + "): " +
           gib(d.memory.total()) + " of " + gib(d.capacity) + " GiB usable, margin " + fmt("%.1f %%", 100 * least) +
           (sub && sub->device.reserve > 0 ? " (" + gib(sub->device.memory) + " GiB less a reserve of " + gib(sub->device.reserve) + " GiB)"
                                           : "") +
           "\n";
  }
  for (const auto& n : o.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace het::report
