#include "plan/validate.hpp"

#include <map>
#include <tuple>

#include "input/input.hpp"
#include "spec/limits.hpp"

namespace het {

namespace {

std::string stage_path(std::size_t p, std::size_t s) {
  return "pipelines[" + std::to_string(p) + "].stages[" + std::to_string(s) + "]";
}

}  // namespace

std::int64_t schedule_steps(const Plan& plan) {
  std::int64_t steps = 0;
  for (const Pipeline& p : plan.pipelines) {
    // Each factor is at most a limit of its own (kStages, kGlobalBatchSize): no overflow.
    steps += static_cast<std::int64_t>(p.stages.size()) * p.num_microbatches;
  }
  return steps;
}

std::optional<Diagnostic> too_many_schedule_steps(const Plan& plan, const std::string& file) {
  const std::int64_t steps = schedule_steps(plan);
  if (steps <= limits::kScheduleSteps.max) return std::nullopt;
  return Diagnostic{file, plan.pipelines.empty() ? 0 : plan.pipelines.front().line, 0, "pipelines",
                    "stages x num_microbatches summed over the pipelines is " + std::to_string(steps) + ", more than the limit of " +
                        std::to_string(limits::kScheduleSteps.max) + " (the simulator steps through each)"};
}

Diagnostics validate_plan(const Plan& plan, const std::string& file) {
  Diagnostics errors;
  auto error = [&](int line, std::string path, std::string message) {
    errors.push_back({file, line, 0, std::move(path), std::move(message)});
  };
  const ModelSpec& model = plan.model;
  const int units = num_units(model, plan.granularity);
  const std::string last_unit = unit_name(model, plan.granularity, units - 1);

  // (subcluster, node, device) -> the stage that uses it, for "used twice" reports.
  std::map<std::tuple<std::string, int, int>, std::pair<std::string, int>> owner;
  long long batch = 0;
  std::vector<long long> bucket_batch(model.seq_lengths.size(), 0);  // sequences of each bucket over the pipelines
  if (plan.pipelines.empty()) error(0, "pipelines", "a plan needs at least one pipeline");

  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    const Pipeline& p = plan.pipelines[pi];
    const std::string ppath = "pipelines[" + std::to_string(pi) + "]";
    batch += static_cast<long long>(p.micro_batch_size) * p.num_microbatches;
    if (p.stages.empty()) error(p.line, ppath + ".stages", "a pipeline needs at least one stage");
    if (p.bucket_microbatches.size() != model.seq_lengths.size()) {
      error(p.line, ppath + ".seq_lengths",
            model.seq_lengths.empty() ? "the model has no seq_lengths; remove the pipeline's seq_lengths"
                                      : "expected micro-batch counts for the model's " + std::to_string(model.seq_lengths.size()) +
                                            " sequence-length buckets");
    } else if (!p.bucket_microbatches.empty()) {
      long long counted = 0;
      for (std::size_t b = 0; b < p.bucket_microbatches.size(); ++b) {
        counted += p.bucket_microbatches[b];
        bucket_batch[b] += static_cast<long long>(p.micro_batch_size) * p.bucket_microbatches[b];
      }
      if (counted != p.num_microbatches)
        error(p.line, ppath + ".seq_lengths",
              "the micro-batches of the buckets sum to " + std::to_string(counted) + ", but num_microbatches is " +
                  std::to_string(p.num_microbatches));
    }

    int next_unit = 0;  // the first unit not yet covered by an earlier stage
    for (std::size_t si = 0; si < p.stages.size(); ++si) {
      const Stage& s = p.stages[si];
      const std::string path = stage_path(pi, si);

      // Unit coverage: contiguous, in order, no gap, no overlap, within the sequence.
      if (s.first != next_unit) {
        if (s.first > next_unit)
          error(s.line, path + ".layers",
                "units " + std::to_string(next_unit) + ".." + std::to_string(s.first - 1) + " (" +
                    unit_name(model, plan.granularity, next_unit) + (s.first - 1 > next_unit ? " .. " + unit_name(model, plan.granularity, std::min(s.first - 1, units - 1)) : "") +
                    ") are not assigned to any stage; stage starts at " + std::to_string(s.first));
        else
          error(s.line, path + ".layers",
                "starts at unit " + std::to_string(s.first) + " but units up to " + std::to_string(next_unit - 1) +
                    " belong to the previous stage (stages must not overlap)");
      }
      if (s.last >= units)
        error(s.line, path + ".layers",
              "ends at unit " + std::to_string(s.last) + " but the model has units 0.." + std::to_string(units - 1) +
                  " (embedding, " + std::to_string(model.num_layers) + " layers" +
                  (plan.granularity == Granularity::sublayer ? " as attn/mlp pairs" : "") + ", head)");
      next_unit = std::max(next_unit, s.last + 1);

      // Sharding degrees against the model and the micro-batch.
      if (model.num_attention_heads % s.tp != 0 || model.num_kv_heads % s.tp != 0)
        error(s.line, path + ".tp",
              "tp " + std::to_string(s.tp) + " must divide num_attention_heads " +
                  std::to_string(model.num_attention_heads) + " and num_kv_heads " + std::to_string(model.num_kv_heads));
      if (model.seq_length % s.cp != 0)
        error(s.line, path + ".cp",
              "cp " + std::to_string(s.cp) + " must divide seq_length " + std::to_string(model.seq_length));
      for (std::size_t b = 0; b < p.bucket_microbatches.size() && b < model.seq_lengths.size(); ++b)
        if (p.bucket_microbatches[b] > 0 && model.seq_lengths[b].length % s.cp != 0)
          error(s.line, path + ".cp",
                "cp " + std::to_string(s.cp) + " must divide the length " + std::to_string(model.seq_lengths[b].length) +
                    " of the pipeline's micro-batches in that bucket");
      if (p.micro_batch_size % s.dp != 0)
        error(s.line, path + ".dp",
              "dp " + std::to_string(s.dp) + " must divide the pipeline's micro_batch_size " +
                  std::to_string(p.micro_batch_size) + " (each replica takes micro_batch_size/dp sequences)");
      if (s.warmup && (*s.warmup < 1 || *s.warmup > p.num_microbatches))
        error(s.line, path + ".warmup",
              "warm-up count " + std::to_string(*s.warmup) + " must be between 1 and num_microbatches " +
                  std::to_string(p.num_microbatches));
      if (s.resharding && si + 1 == p.stages.size())
        error(s.line, path + ".resharding",
              std::string("the last stage sends nothing onward; remove resharding '") + to_string(*s.resharding) + "'");

      // Devices: in the subcluster, dp·cp·tp of them, each used once.
      const SubclusterSpec* sub = plan.cluster.find(s.subcluster);
      if (sub == nullptr) {
        std::string names;
        for (const auto& c : plan.cluster.subclusters) names += (names.empty() ? "" : ", ") + c.name;
        error(s.line, path + ".subcluster", "unknown subcluster '" + s.subcluster + "' (cluster " + plan.cluster.name + " has " + names + ")");
        continue;
      }
      const long long want = static_cast<long long>(s.dp) * s.cp * s.tp;
      if (static_cast<long long>(s.devices.size()) != want)
        error(s.line, path + ".devices",
              "expected dp*cp*tp = " + std::to_string(s.dp) + "*" + std::to_string(s.cp) + "*" + std::to_string(s.tp) +
                  " = " + std::to_string(want) + " devices, got " + std::to_string(s.devices.size()));
      for (std::size_t di = 0; di < s.devices.size(); ++di) {
        const DeviceRef& d = s.devices[di];
        const std::string dpath = path + ".devices[" + std::to_string(di) + "]";
        if (d.node >= sub->nodes || d.device >= sub->devices_per_node) {
          error(s.line, dpath,
                "device (node " + std::to_string(d.node) + ", device " + std::to_string(d.device) +
                    ") does not exist in subcluster " + sub->name + " (" + std::to_string(sub->nodes) + " nodes of " +
                    std::to_string(sub->devices_per_node) + " devices)");
          continue;
        }
        auto [it, fresh] = owner.emplace(std::make_tuple(sub->name, d.node, d.device), std::make_pair(path, s.line));
        if (!fresh)
          error(s.line, dpath,
                "device (node " + std::to_string(d.node) + ", device " + std::to_string(d.device) + ") of " + sub->name +
                    " is already used by " + it->second.first +
                    (it->second.second > 0 ? " (line " + std::to_string(it->second.second) + ")" : ""));
      }
    }
    for (std::size_t si = 1; si < p.stages.size(); ++si) {
      const Stage& prev = p.stages[si - 1];
      const Stage& s = p.stages[si];
      if (prev.warmup && s.warmup && std::min(*s.warmup, p.num_microbatches) > std::min(*prev.warmup, p.num_microbatches))
        error(s.line, stage_path(pi, si) + ".warmup",
              "warm-up count " + std::to_string(*s.warmup) + " exceeds the previous stage's " +
                  std::to_string(*prev.warmup) + "; the schedule would deadlock (the previous stage sends the "
                  "activations only after its first backward)");
    }
    if (!p.stages.empty() && next_unit < units)
      error(p.stages.back().line, stage_path(pi, p.stages.size() - 1) + ".layers",
            "the last stage ends at unit " + std::to_string(next_unit - 1) + " but the model's units run to " +
                std::to_string(units - 1) + " (" + last_unit + ")");
  }

  if (auto steps = too_many_schedule_steps(plan, file)) errors.push_back(std::move(*steps));
  if (!plan.pipelines.empty() && batch != model.training.global_batch_size) {
    std::string terms;
    for (const auto& p : plan.pipelines)
      terms += (terms.empty() ? "" : " + ") + std::to_string(p.micro_batch_size) + "*" + std::to_string(p.num_microbatches);
    error(plan.pipelines.front().line, "pipelines",
          "micro_batch_size*num_microbatches summed over pipelines is " + terms + " = " + std::to_string(batch) +
              ", but the model's global_batch_size is " + std::to_string(model.training.global_batch_size));
  }
  for (std::size_t b = 0; b < model.seq_lengths.size() && !plan.pipelines.empty(); ++b)
    if (bucket_batch[b] != bucket_sequences(model, b))
      error(plan.pipelines.front().line, "pipelines",
            "the pipelines run " + std::to_string(bucket_batch[b]) + " sequences of length " +
                std::to_string(model.seq_lengths[b].length) + " (micro_batch_size x its micro-batches, summed), but the model's "
                "share of them is " + std::to_string(bucket_sequences(model, b)) + " of the global batch");
  return errors;
}

}  // namespace het
