#include "validation/inputs.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "spec/catalog.hpp"
#include "spec/cluster.hpp"
#include "spec/hf_config.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het {

bool InputsReport::ok() const {
  return std::all_of(inputs.begin(), inputs.end(), [](const CheckedInput& c) { return c.errors.empty(); });
}

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string human_count(double n) {
  if (n >= 1e9) return fixed(n / 1e9, 1) + "B";
  if (n >= 1e6) return fixed(n / 1e6, 1) + "M";
  return fixed(n, 0);
}

std::string model_summary(const ModelSpec& m) {
  return std::string(to_string(m.architecture)) + ", " + human_count(static_cast<double>(parameter_count(m))) +
         " parameters, " + std::to_string(m.num_layers) + " layers, hidden " + std::to_string(m.hidden_size) + ", " +
         std::to_string(m.num_attention_heads) + " heads, seq " + std::to_string(m.seq_length) + ", global batch " +
         std::to_string(m.training.global_batch_size);
}

std::string cluster_summary(const ClusterSpec& c) {
  double peak = 0;
  std::string subs;
  for (const auto& s : c.subclusters) {
    peak += s.device.peak * s.num_devices();
    subs += (subs.empty() ? "" : ", ") + s.name + " " + std::to_string(s.nodes) + "x" +
            std::to_string(s.devices_per_node) + " " + s.device.type;
  }
  return std::to_string(c.subclusters.size()) + " subcluster" + (c.subclusters.size() == 1 ? "" : "s") + ", " +
         std::to_string(c.num_devices()) + " devices (" + subs + "), " + fixed(peak / 1e15, 2) + " PFLOPS peak";
}

std::string profile_summary(const ProfileSpec& p) {
  std::set<std::string> kinds;
  std::set<int> tps, mbs;
  for (const auto& r : p.units) kinds.insert(to_string(r.unit)), tps.insert(r.tp), mbs.insert(r.micro_batch_size);
  std::string k;
  for (const auto& s : kinds) k += (k.empty() ? "" : "/") + s;
  return p.device + ", " + std::to_string(p.units.size()) + " rows (" + k + "), tp " + std::to_string(*tps.begin()) +
         ".." + std::to_string(*tps.rbegin()) + ", micro-batch " + std::to_string(*mbs.begin()) + ".." +
         std::to_string(*mbs.rbegin());
}

std::string plan_summary(const Plan& plan) {
  std::size_t stages = 0, devices = 0;
  for (const auto& p : plan.pipelines)
    for (const auto& s : p.stages) ++stages, devices += s.devices.size();
  std::string out = std::to_string(plan.pipelines.size()) + " pipeline" + (plan.pipelines.size() == 1 ? "" : "s") +
                    ", " + std::to_string(stages) + " stages, " + std::to_string(devices) + " of " +
                    std::to_string(plan.cluster.num_devices()) + " devices, " + to_string(plan.schedule) + ", for " +
                    plan.model.name + " on " + plan.cluster.name;
  if (plan.predicted) out += ", predicted " + fixed(plan.predicted->iteration_s, 3) + " s/iteration";
  return out;
}

}  // namespace

InputsReport check_inputs(const InputFiles& files) {
  InputsReport report;
  auto add = [&](std::string kind, std::string file) -> CheckedInput& {
    report.inputs.push_back({std::move(kind), std::move(file), {}, {}, {}, {}});
    return report.inputs.back();
  };

  DeviceCatalog catalog;
  {
    auto loaded = files.catalog ? load_catalog(*files.catalog) : builtin_catalog();
    if (files.catalog || !loaded) {
      auto& c = add("catalog", files.catalog.value_or("(built in)"));
      if (loaded) c.summary = std::to_string(loaded->devices.size()) + " device types";
      else c.errors = loaded.errors();
    }
    if (loaded) catalog = std::move(*loaded);
  }

  std::optional<ModelSpec> model;
  if (files.model) {
    auto& c = add("model", *files.model);
    auto m = load_model(*files.model, files.training, &c.assumptions);
    if (m) model = *m, c.summary = model_summary(*m);
    else c.errors = m.errors();
  }
  std::optional<ClusterSpec> cluster;
  if (files.cluster) {
    auto& c = add("cluster", *files.cluster);
    auto cl = load_cluster(*files.cluster, catalog);
    if (cl) cluster = *cl, c.summary = cluster_summary(*cl);
    else c.errors = cl.errors();
  }
  std::vector<ProfileFile> profiles;
  for (const auto& file : files.profiles) {
    auto& c = add("profile", file);
    auto p = load_profile_file(file);
    if (!p) {
      c.errors = p.errors();
      continue;
    }
    const ProfileSpec& spec = *p->profile.profile;
    c.summary = profile_summary(spec);
    c.assumptions = spec.assumptions;
    if (model) c.errors = profile_mismatch(spec, *model, "the model (" + *files.model + ")");
    profiles.push_back(std::move(*p));
  }
  if (files.plan) {
    auto& c = add("plan", *files.plan);
    if ((files.model && !model) || (files.cluster && !cluster)) {
      c.errors.push_back({*files.plan, 0, 0, "", "not checked: the given model or cluster is invalid"});
    } else {
      PlanSpecs specs{model ? &*model : nullptr, cluster ? &*cluster : nullptr, &catalog};
      auto plan = load_plan(*files.plan, specs);
      if (!plan) {
        c.errors = plan.errors();
      } else if (auto problems = validate_plan(*plan, *files.plan); !problems.empty()) {
        c.errors = problems;
      } else {
        c.summary = plan_summary(*plan);
        // A profile of other dimensions than --model is the profile's own error (above); than
        // the plan's embedded model, the plan's.
        auto choice = choose_profiles(*plan, profiles, "the plan's model (" + *files.plan + ")");
        if (!choice && !model) c.errors = choice.errors();
        for (const auto& p : choice ? choice->unavailable : std::vector<PlanProfile>{}) {
          std::string path = "predicted.per_stage";  // a plan that records no digest for it
          for (std::size_t i = 0; i < plan->profiles.size(); ++i)
            if (plan->profiles[i].device == p.device) path = "profiles[" + std::to_string(i) + "]";
          c.warnings.push_back({*files.plan, p.line, 0, path,
                                unavailable_sentence(p) + "; `hetplan check` fails such a plan: give the profile "
                                                             "with --profile to reproduce the prediction"});
        }
      }
    }
  }
  return report;
}

Result<LoadedPlan> read_plan_inputs(const InputFiles& files) {
  Diagnostics errors;
  auto take = [&](const Diagnostics& d) { errors.insert(errors.end(), d.begin(), d.end()); };
  auto catalog = files.catalog ? load_catalog(*files.catalog) : builtin_catalog();
  if (!catalog) return catalog.errors();
  std::optional<ModelSpec> model;
  std::optional<ClusterSpec> cluster;
  if (files.model) {
    if (auto m = load_model(*files.model, files.training)) model = *m;
    else take(m.errors());
  }
  if (files.cluster) {
    if (auto c = load_cluster(*files.cluster, *catalog)) cluster = *c;
    else take(c.errors());
  }
  std::vector<ProfileFile> given;
  for (const auto& f : files.profiles) {
    if (auto p = load_profile_file(f)) given.push_back(std::move(*p));
    else take(p.errors());
  }
  if (!files.plan) errors.push_back({"", 0, 0, "", "no plan given"});
  if (!errors.empty()) return errors;
  auto plan = load_plan(*files.plan, {model ? &*model : nullptr, cluster ? &*cluster : nullptr, &*catalog});
  if (!plan) return plan.errors();
  const std::string model_name = files.model ? "the model (" + *files.model + ")" : "the plan's model (" + *files.plan + ")";
  auto profiles = choose_profiles(*plan, given, model_name);
  if (!profiles) return profiles.errors();
  LoadedPlan out{std::move(*plan), std::move(*profiles)};
  out.plan.profiles = out.profiles.used;
  return out;
}

Result<LoadedPlan> load_plan_inputs(const InputFiles& files) {
  auto loaded = read_plan_inputs(files);
  if (!loaded) return loaded;
  if (auto problems = validate_plan(loaded->plan, *files.plan); !problems.empty()) return problems;
  return loaded;
}

}  // namespace het
