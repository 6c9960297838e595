#include "plan/plan_io.hpp"

#include <algorithm>

#include "jsontext/jsontext.hpp"
#include "spec/limits.hpp"

namespace het {

using input::Need;

const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::eager_1f1b: return "eager-1f1b";
    case ScheduleKind::h_1f1b: return "h-1f1b";
    case ScheduleKind::virtual_1f1b: return "virtual-1f1b";
  }
  return "?";
}

const char* to_string(Granularity g) { return g == Granularity::layer ? "layer" : "sublayer"; }

const char* to_string(Resharding r) {
  switch (r) {
    case Resharding::all_pairs: return "all-pairs";
    case Resharding::gather_send_scatter: return "gather-send-scatter";
    case Resharding::inner_dp_rank0: return "inner-dp-rank0";
    case Resharding::send_recv_allgather: return "send-recv-allgather";
  }
  return "?";
}

std::optional<Resharding> parse_resharding(const std::string& text) {
  for (Resharding r : kReshardings)
    if (text == to_string(r)) return r;
  return std::nullopt;
}


int num_units(const ModelSpec& model, Granularity granularity) {
  return (granularity == Granularity::layer ? 1 : 2) * model.num_layers + 2;
}

std::string unit_name(const ModelSpec& model, Granularity granularity, int unit) {
  if (unit == 0) return "embedding";
  if (unit == num_units(model, granularity) - 1) return "head";
  if (granularity == Granularity::layer) return "layer " + std::to_string(unit - 1);
  return std::string((unit - 1) % 2 == 0 ? "attn " : "mlp ") + std::to_string((unit - 1) / 2);
}

namespace {

const input::Choices<ScheduleKind> kScheduleChoices = {{"gpipe", ScheduleKind::gpipe},
                                                       {"1f1b", ScheduleKind::one_f_one_b},
                                                       {"eager-1f1b", ScheduleKind::eager_1f1b},
                                                       {"h-1f1b", ScheduleKind::h_1f1b},
                                                       {"virtual-1f1b", ScheduleKind::virtual_1f1b}};

double number(const input::Fields& f, std::string_view key, Need need) {
  return f.number(key, need, 0, 1e300).value_or(0);
}

std::optional<Stage> read_stage(const input::Context& ctx, const YAML::Node& node, const std::string& path) {
  input::Fields f(ctx, node, path, {"subcluster", "layers", "tp", "cp", "dp", "recompute", "devices", "warmup", "resharding", "predicted"});
  if (!f.is_map()) return std::nullopt;
  Stage s;
  s.line = f.line();
  s.subcluster = f.string("subcluster", Need::required).value_or("");
  if (auto layers = f.list("layers", Need::required, limits::kStages)) {
    if (layers->size() != 2) {
      f.error("layers", "expected [first, last], an inclusive range of units, got " +
                            std::to_string(layers->size()) + " values");
    } else {
      s.first = static_cast<int>(input::as_integer(ctx, (*layers)[0], input::index(f.path_of("layers"), 0), 0, limits::kUnitIndex).value_or(0));
      s.last = static_cast<int>(input::as_integer(ctx, (*layers)[1], input::index(f.path_of("layers"), 1), 0, limits::kUnitIndex).value_or(0));
      if (s.last < s.first)
        f.error("layers", "last unit " + std::to_string(s.last) + " comes before first unit " + std::to_string(s.first));
    }
  }
  s.tp = static_cast<int>(f.integer("tp", Need::optional, 1, limits::kAttentionHeads).value_or(1));
  s.cp = static_cast<int>(f.integer("cp", Need::optional, 1, limits::kSeqLength).value_or(1));
  s.dp = static_cast<int>(f.integer("dp", Need::optional, 1, limits::kGlobalBatchSize).value_or(1));
  // dp x cp x tp devices: in 64 bits, at most a cluster's (validate_plan() counts them in a long long).
  if (auto n = limits::checked_product({s.dp, s.cp, s.tp}); !n || *n > limits::kDevices.max)
    f.error("dp", "dp x cp x tp = " + std::to_string(s.dp) + " x " + std::to_string(s.cp) + " x " + std::to_string(s.tp) +
                      " devices, more than the limit of " + std::to_string(limits::kDevices.max) + " " + limits::kDevices.what);
  s.recompute = f.choice<Recompute>("recompute", Need::optional,
                                    {{"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}})
                    .value_or(Recompute::none);
  if (auto devices = f.list("devices", Need::required, limits::kDevices)) {
    for (std::size_t i = 0; i < devices->size(); ++i) {
      input::Fields d(ctx, (*devices)[i], input::index(f.path_of("devices"), i), {"node", "device"});
      if (!d.is_map()) continue;
      s.devices.push_back({static_cast<int>(d.integer("node", Need::required, 0, limits::kNodes).value_or(0)),
                           static_cast<int>(d.integer("device", Need::required, 0, limits::kDevicesPerNode).value_or(0))});
    }
  }
  if (f.has("warmup")) s.warmup = static_cast<int>(f.integer("warmup", Need::optional, 0, limits::kGlobalBatchSize).value_or(0));
  s.resharding = f.choice<Resharding>("resharding", Need::optional,
                                      {{"all-pairs", Resharding::all_pairs},
                                       {"gather-send-scatter", Resharding::gather_send_scatter},
                                       {"inner-dp-rank0", Resharding::inner_dp_rank0},
                                       {"send-recv-allgather", Resharding::send_recv_allgather}});
  if (auto p = f.map("predicted", Need::optional, {"forward_s", "backward_s", "memory_bytes"}))
    s.predicted = StagePrediction{number(*p, "forward_s", Need::required), number(*p, "backward_s", Need::required),
                                  number(*p, "memory_bytes", Need::required)};
  return s;
}

// `model`: the plan's model, whose seq_lengths the pipeline's `seq_lengths` counts refer to.
std::optional<Pipeline> read_pipeline(const input::Context& ctx, const YAML::Node& node, const std::string& path,
                                      const ModelSpec& model) {
  input::Fields f(ctx, node, path, {"micro_batch_size", "num_microbatches", "seq_lengths", "stages"});
  if (!f.is_map()) return std::nullopt;
  Pipeline p;
  p.line = f.line();
  p.micro_batch_size = static_cast<int>(f.integer("micro_batch_size", Need::required, 1, limits::kGlobalBatchSize).value_or(1));
  p.num_microbatches = static_cast<int>(f.integer("num_microbatches", Need::required, 1, limits::kGlobalBatchSize).value_or(1));
  if (!model.seq_lengths.empty()) p.bucket_microbatches.assign(model.seq_lengths.size(), 0);
  if (auto list = f.list("seq_lengths", Need::optional, limits::kSeqLengthBuckets)) {
    if (model.seq_lengths.empty()) f.error("seq_lengths", "the model has no seq_lengths; every sequence has seq_length tokens");
    std::vector<bool> seen(model.seq_lengths.size(), false);
    for (std::size_t i = 0; i < list->size() && !model.seq_lengths.empty(); ++i) {
      input::Fields b(ctx, (*list)[i], input::index(f.path_of("seq_lengths"), i), {"length", "microbatches"});
      if (!b.is_map()) continue;
      auto length = b.integer("length", Need::required, 1, limits::kSeqLength);
      auto count = b.integer("microbatches", Need::required, 0, limits::kGlobalBatchSize);
      if (!length || !count) continue;
      std::size_t k = 0;
      while (k < model.seq_lengths.size() && model.seq_lengths[k].length != *length) ++k;
      if (k == model.seq_lengths.size()) {
        std::string lengths;
        for (const auto& mb : model.seq_lengths) lengths += (lengths.empty() ? "" : ", ") + std::to_string(mb.length);
        b.error("length", "the model has no bucket of length " + std::to_string(*length) + " (its seq_lengths: " + lengths + ")");
      } else if (seen[k]) {
        b.error("length", "length " + std::to_string(*length) + " listed twice");
      } else {
        seen[k] = true;
        p.bucket_microbatches[k] = static_cast<int>(*count);
      }
    }
  } else if (!model.seq_lengths.empty()) {
    f.error("seq_lengths", "the model's sequence lengths vary: say how many micro-batches of each length the pipeline runs "
                           "(seq_lengths: [{length: " + std::to_string(model.seq_lengths.front().length) + ", microbatches: N}, ...])");
  }
  if (auto stages = f.list("stages", Need::required, limits::kStages)) {
    if (stages->size() == 0) f.error("stages", "expected at least one stage");
    for (std::size_t i = 0; i < stages->size(); ++i)
      if (auto s = read_stage(ctx, (*stages)[i], input::index(f.path_of("stages"), i))) p.stages.push_back(std::move(*s));
  }
  return p;
}

bool is_sha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// One entry of `profiles`: {device, sha256, profile}. The embedded profile is read by
// read_profile() in place, so its problems point into the plan file.
std::optional<PlanProfile> read_plan_profile(const input::Context& ctx, const YAML::Node& node, const std::string& path,
                                             const std::vector<PlanProfile>& earlier) {
  input::Fields f(ctx, node, path, {"device", "sha256", "profile"});
  if (!f.is_map()) return std::nullopt;
  PlanProfile p;
  p.line = f.line();
  p.device = f.string("device", Need::required).value_or("");
  p.sha256 = f.string("sha256", Need::required).value_or("");
  if (!p.sha256.empty() && !is_sha256(p.sha256))
    f.error("sha256", "expected the SHA-256 of the profile file as 64 lowercase hex digits (as sha256sum prints it), got '" +
                          p.sha256 + "'");
  for (const auto& e : earlier)
    if (!p.device.empty() && e.device == p.device)
      f.error("device", "a profile for " + p.device + " is already given at line " + std::to_string(e.line) +
                            " (a plan records one per device type)");
  if (!f.has("profile")) return p;
  const YAML::Node embedded = f.get("profile");
  if (!embedded.IsMap()) {
    f.error("profile", "expected the profile as a map of fields (a hetplan.profile/v1 document), got " +
                           input::describe(embedded));
    return p;
  }
  auto profile = read_profile(input::Document{ctx.file, embedded});
  if (!profile) {
    for (Diagnostic d : profile.errors()) {
      d.path = d.path.empty() ? f.path_of("profile") : input::join(f.path_of("profile"), d.path);
      ctx.sink->push_back(std::move(d));
    }
    return p;
  }
  if (!p.device.empty() && profile->device != p.device)
    ctx.error(embedded["device"], input::join(f.path_of("profile"), "device"),
              "the embedded profile is for " + profile->device + ", but " + f.path_of("device") + " says " + p.device);
  p.profile = std::move(*profile);
  p.document = input::to_json(embedded);
  return p;
}

}  // namespace

Result<Plan> read_plan(const input::Document& doc, const PlanSpecs& specs) {
  Diagnostics errors;
  input::Context ctx{doc.file, &errors};
  input::Fields top(ctx, doc.root, "",
                    {"format", "model", "cluster", "profiles", "algorithm", "schedule", "granularity", "pipelines",
                     "predicted"});
  if (!top.is_map()) return errors;
  if (auto format = top.string("format", Need::required); format && *format != "hetplan.plan/v1")
    top.error("format", "expected hetplan.plan/v1, got '" + *format + "'");
  Plan plan;

  auto take = [&](auto result, auto& out) {
    if (result) out = std::move(*result);
    else errors.insert(errors.end(), result.errors().begin(), result.errors().end());
  };
  if (specs.model) {
    plan.model = *specs.model;
  } else if (top.has("model")) {
    take(read_model(doc.file, top.get("model"), "model"), plan.model);
  } else {
    top.error("model", "missing: a plan embeds its model, or give one with --model");
  }
  if (specs.cluster) {
    plan.cluster = *specs.cluster;
  } else if (top.has("cluster")) {
    if (specs.catalog) take(read_cluster(doc.file, top.get("cluster"), "cluster", *specs.catalog), plan.cluster);
    else top.error("cluster", "no device catalog to resolve the embedded cluster");
  } else {
    top.error("cluster", "missing: a plan embeds its cluster, or give one with --cluster");
  }

  if (auto list = top.list("profiles", Need::optional, limits::kPlanProfiles)) {
    for (std::size_t i = 0; i < list->size(); ++i)
      if (auto p = read_plan_profile(ctx, (*list)[i], input::index("profiles", i), plan.profiles))
        plan.profiles.push_back(std::move(*p));
  }
  if (auto a = top.map("algorithm", Need::optional,
                       {"name", "seconds", "candidates_evaluated", "lower_bound_s", "gap", "results"})) {
    AlgorithmInfo info;
    info.name = a->string("name", Need::required).value_or("");
    info.seconds = number(*a, "seconds", Need::optional);
    info.candidates_evaluated = a->integer("candidates_evaluated", Need::optional, 0, INT64_MAX).value_or(0);
    info.lower_bound_s = number(*a, "lower_bound_s", Need::optional);
    info.gap = a->number("gap", Need::optional, -1, 1e300).value_or(0);
    if (auto list = a->list("results", Need::optional, limits::kAlgorithmResults)) {
      for (std::size_t i = 0; i < list->size(); ++i) {
        input::Fields r(ctx, (*list)[i], input::index("algorithm.results", i),
                        {"name", "iteration_s", "seconds", "candidates_evaluated"});
        if (!r.is_map()) continue;
        info.results.push_back({r.string("name", Need::required).value_or(""), number(r, "iteration_s", Need::optional),
                                number(r, "seconds", Need::optional),
                                r.integer("candidates_evaluated", Need::optional, 0, INT64_MAX).value_or(0)});
      }
    }
    plan.algorithm = std::move(info);
  }
  if (auto s = top.map("schedule", Need::required, {"kind"}))
    plan.schedule = s->choice<ScheduleKind>("kind", Need::required, kScheduleChoices).value_or(ScheduleKind::one_f_one_b);
  plan.granularity = top.choice<Granularity>("granularity", Need::optional,
                                             {{"layer", Granularity::layer}, {"sublayer", Granularity::sublayer}})
                         .value_or(Granularity::layer);
  if (auto list = top.list("pipelines", Need::required, limits::kPipelines)) {
    if (list->size() == 0) top.error("pipelines", "expected at least one pipeline");
    for (std::size_t i = 0; i < list->size(); ++i)
      if (auto p = read_pipeline(ctx, (*list)[i], input::index("pipelines", i), plan.model)) plan.pipelines.push_back(std::move(*p));
  }
  if (auto p = top.map("predicted", Need::optional,
                       {"iteration_s", "tokens_per_s", "mfu", "bubble_fraction", "load_balance_eta",
                        "cross_cluster_bytes", "cross_overlap", "cost_usd_per_hour", "usd_per_million_tokens", "per_stage"})) {
    Prediction pr;
    pr.iteration_s = number(*p, "iteration_s", Need::required);
    pr.tokens_per_s = number(*p, "tokens_per_s", Need::optional);
    pr.mfu = number(*p, "mfu", Need::optional);
    pr.bubble_fraction = number(*p, "bubble_fraction", Need::optional);
    pr.load_balance_eta = number(*p, "load_balance_eta", Need::optional);
    pr.cross_cluster_bytes = number(*p, "cross_cluster_bytes", Need::optional);
    pr.cross_overlap = p->number("cross_overlap", Need::optional, 0, 1).value_or(1);
    pr.cost_usd_per_hour = p->number("cost_usd_per_hour", Need::optional, 0, 1e300);
    pr.usd_per_million_tokens = p->number("usd_per_million_tokens", Need::optional, 0, 1e300);
    if (auto ps = p->list("per_stage", Need::optional, limits::kDevices)) pr.per_stage = input::to_json(*ps);  // a device per stage at least
    plan.predicted = std::move(pr);
  }
  if (!errors.empty()) return errors;
  return plan;
}

Result<Plan> load_plan(const std::string& file, const PlanSpecs& specs) {
  auto doc = input::load(file);
  if (!doc) return doc.errors();
  return read_plan(*doc, specs);
}

nlohmann::ordered_json seq_lengths_json(const ModelSpec& model, const Pipeline& p) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < p.bucket_microbatches.size() && k < model.seq_lengths.size(); ++k)
    out.push_back({{"length", model.seq_lengths[k].length}, {"microbatches", p.bucket_microbatches[k]}});
  return out;
}

nlohmann::ordered_json to_json(const Plan& plan) {
  using J = nlohmann::ordered_json;
  J out = {{"format", "hetplan.plan/v1"}, {"model", to_json(plan.model)}, {"cluster", to_json(plan.cluster)}};
  J profiles = J::array();
  for (const auto& p : plan.profiles) {
    J entry = {{"device", p.device}, {"sha256", p.sha256}};
    if (!p.document.is_null()) entry["profile"] = p.document;
    profiles.push_back(std::move(entry));
  }
  out["profiles"] = profiles;
  if (plan.algorithm) {
    const auto& a = *plan.algorithm;
    J results = J::array();
    for (const auto& r : a.results)
      results.push_back({{"name", r.name}, {"iteration_s", r.iteration_s}, {"seconds", r.seconds},
                         {"candidates_evaluated", r.candidates_evaluated}});
    out["algorithm"] = {{"name", a.name},           {"seconds", a.seconds},
                        {"candidates_evaluated", a.candidates_evaluated}, {"lower_bound_s", a.lower_bound_s},
                        {"gap", a.gap},             {"results", results}};
  }
  out["schedule"] = {{"kind", to_string(plan.schedule)}};
  out["granularity"] = to_string(plan.granularity);
  J pipelines = J::array();
  for (const auto& p : plan.pipelines) {
    J stages = J::array();
    for (const auto& s : p.stages) {
      J devices = J::array();
      for (const auto& d : s.devices) devices.push_back({{"node", d.node}, {"device", d.device}});
      J js = {{"subcluster", s.subcluster}, {"layers", {s.first, s.last}}, {"tp", s.tp},      {"cp", s.cp},
              {"dp", s.dp},                 {"recompute", to_string(s.recompute)}, {"devices", devices}};
      if (s.warmup) js["warmup"] = *s.warmup;
      if (s.resharding) js["resharding"] = to_string(*s.resharding);
      if (s.predicted)
        js["predicted"] = {{"forward_s", s.predicted->forward_s},
                           {"backward_s", s.predicted->backward_s},
                           {"memory_bytes", s.predicted->memory_bytes}};
      stages.push_back(std::move(js));
    }
    J jp = {{"micro_batch_size", p.micro_batch_size}, {"num_microbatches", p.num_microbatches}};
    if (!p.bucket_microbatches.empty()) jp["seq_lengths"] = seq_lengths_json(plan.model, p);
    jp["stages"] = stages;
    pipelines.push_back(std::move(jp));
  }
  out["pipelines"] = pipelines;
  if (plan.predicted) {
    const auto& pr = *plan.predicted;
    out["predicted"] = {{"iteration_s", pr.iteration_s},
                        {"tokens_per_s", pr.tokens_per_s},
                        {"mfu", pr.mfu},
                        {"bubble_fraction", pr.bubble_fraction},
                        {"load_balance_eta", pr.load_balance_eta},
                        {"cross_cluster_bytes", pr.cross_cluster_bytes},
                        {"cross_overlap", pr.cross_overlap}};
    if (pr.cost_usd_per_hour) out["predicted"]["cost_usd_per_hour"] = *pr.cost_usd_per_hour;
    if (pr.usd_per_million_tokens) out["predicted"]["usd_per_million_tokens"] = *pr.usd_per_million_tokens;
    out["predicted"]["per_stage"] = pr.per_stage;
  }
  return out;
}

std::string write_plan(const Plan& plan) { return to_text(to_json(plan)); }

}  // namespace het
