#include "review_commands.hpp"

#include <iostream>
#include <string>
#include <vector>

#include "cost/compute.hpp"
#include "predict/predict.hpp"
#include "review/check.hpp"
#include "review/diff.hpp"
#include "validation/inputs.hpp"

namespace hetplan {

namespace {

constexpr int kDifferent = 1;  // diff: the plans differ; check: a rule is violated
constexpr int kInvalid = 2;

void print_errors(const het::Diagnostics& errors) {
  for (const auto& e : errors) std::cerr << "error: " << e.to_string() << "\n";
}

}  // namespace

struct ReviewCommands::Args {
  // diff
  std::string a, b, diff_format = "table";
  std::optional<std::string> diff_model, diff_cluster;
  bool simulate = false;
  // check
  het::InputFiles check_files;
  std::optional<std::string> baseline, max_regression, min_headroom;
  std::optional<double> max_iteration_s;
  std::string check_format = "table";
  // both
  std::vector<std::string> profiles;
  std::optional<std::string> catalog;
};

ReviewCommands::ReviewCommands(CLI::App& app) : args_(std::make_unique<Args>()) {
  Args& a = *args_;
  diff_ = app.add_subcommand("diff", "What changed between two plans: structure in words, predicted metrics with "
                                     "percentages; exit 0 same, 1 different, 2 error");
  diff_->add_option("a", a.a, "the old plan.json")->required();
  diff_->add_option("b", a.b, "the new plan.json")->required();
  diff_->add_option("--format", a.diff_format, "table (default) or json")->check(CLI::IsMember({"table", "json"}));
  diff_->add_flag("--simulate", a.simulate,
                  "predict both plans again before comparing (each with its own model, cluster and embedded "
                  "profiles, the --profile files replacing those), instead of comparing the predictions recorded in "
                  "the files");
  diff_->add_option("--model", a.diff_model, "model.yaml, replacing both plans' own (for plans without one)");
  diff_->add_option("--cluster", a.diff_cluster, "cluster.yaml, replacing both plans' own (for plans without one)");
  diff_->add_option("--profile", a.profiles,
                    "profile.yaml (repeatable), for --simulate; replaces both plans' own for its device type");
  diff_->add_option("--catalog", a.catalog, "device catalog (default: built in)");
  diff_->footer(
      "Compared: schedule, granularity, the embedded model and cluster, pipelines and stages added or removed,\n"
      "micro-batch size and count, each stage's subcluster, devices, layers (unit range), tp/cp/dp, recompute\n"
      "and warm-ups (when both plans give them), and every predicted metric both plans carry. Not compared:\n"
      "the search's statistics and the profiles. Plans without predictions (hand-written ones) are compared\n"
      "on their structure only, unless --simulate predicts both; give it the --profile files to predict both\n"
      "with the same profiles, so that the metric changes come from the plans alone (each plan's embedded\n"
      "ones otherwise; a note names a profile that is replaced or not available).");

  check_ = app.add_subcommand("check", "Re-simulate a plan with the current specs and profiles and hold it to rules "
                                       "(for CI); exit 0 all pass, 1 a rule is violated, 2 unreadable input");
  check_->add_option("plan", a.check_files.plan, "plan.json")->required();
  auto* baseline = check_->add_option("--baseline", a.baseline, "an earlier plan.json with a recorded prediction");
  check_->add_option("--max-regression", a.max_regression,
                     "allowed iteration-time increase over the baseline's, like 5% or 0.05 (default 5%)")
      ->needs(baseline);
  check_->add_option("--min-memory-headroom", a.min_headroom,
                     "1 - peak/capacity every stage must keep, like 10% (default 0: the stage fits)");
  check_->add_option("--max-iteration-s", a.max_iteration_s, "the longest allowed predicted iteration, in seconds")
      ->check(CLI::PositiveNumber);
  check_->add_option("--model", a.check_files.model, "model.yaml, replacing the plan's own");
  check_->add_option("--cluster", a.check_files.cluster, "cluster.yaml, replacing the plan's own");
  check_->add_option("--profile", a.profiles,
                     "profile.yaml (repeatable), replacing the plan's own for its device type");
  check_->add_option("--catalog", a.catalog, "device catalog (default: built in)");
  check_->add_option("--format", a.check_format, "table (default) or json")->check(CLI::IsMember({"table", "json"}));
  check_->footer(
      "Rules: valid (the plan validates against its model and cluster: devices exist, stages fit their\n"
      "shapes), memory (every stage's headroom on its device type), regression (iteration time against the\n"
      "baseline's recorded prediction), iteration (--max-iteration-s), profiles (every profile the plan was\n"
      "predicted with is available). The plan's embedded profiles cost it; a --profile replaces the plan's\n"
      "for its device type (a note says so). A plan that names a profile it does not embed, and that no\n"
      "--profile gives, fails the profiles rule instead of passing on analytic costs.");
}

ReviewCommands::~ReviewCommands() = default;

namespace {

struct DiffArgs {
  const std::string &a, &b, &format;
  bool simulate;
  const std::optional<std::string> &model, &cluster;
  const std::vector<std::string>& profiles;
  const std::optional<std::string>& catalog;
};

int run_diff(const DiffArgs& args) {
  std::vector<het::Plan> plans;
  std::vector<std::string> notes;  // --simulate: the profiles each plan is predicted with
  for (const std::string* file : {&args.a, &args.b}) {
    het::InputFiles files;
    files.plan = *file;
    files.model = args.model;
    files.cluster = args.cluster;
    files.profiles = args.profiles;
    files.catalog = args.catalog;
    auto loaded = het::load_plan_inputs(files);
    if (!loaded) {
      print_errors(loaded.errors());
      return kInvalid;
    }
    if (args.simulate) {
      het::cost::ComputeModel compute(loaded->plan.model, loaded->profiles.specs());
      auto outcome = het::predict::predict(loaded->plan, compute, het::predict::Options{});
      if (!outcome) {
        print_errors(outcome.errors());
        return kInvalid;
      }
      loaded->plan = std::move(outcome->plan);
      for (const auto& n : loaded->profiles.notes) notes.push_back(*file + ": " + n);
      for (const auto& p : loaded->profiles.unavailable) notes.push_back(*file + ": " + het::unavailable_sentence(p));
    }
    plans.push_back(std::move(loaded->plan));
  }
  const auto diff = het::review::diff_plans(plans[0], plans[1], args.a, args.b);
  if (args.format == "json") {
    std::cout << het::review::to_json(diff, args.a, args.b).dump(2) << "\n";
    for (const auto& n : notes) std::cerr << "note: " << n << "\n";
  } else {
    std::cout << het::review::to_text(diff, args.a, args.b);
    for (const auto& n : notes) std::cout << "note: " << n << "\n";
  }
  return diff.same() ? 0 : kDifferent;
}

}  // namespace

std::optional<int> ReviewCommands::run() const {
  const Args& a = *args_;
  if (diff_->parsed()) return run_diff({a.a, a.b, a.diff_format, a.simulate, a.diff_model, a.diff_cluster, a.profiles, a.catalog});
  if (!check_->parsed()) return std::nullopt;

  het::Diagnostics errors;
  het::review::CheckRules rules;
  auto share = [&](const std::optional<std::string>& text, const char* option, double& out) {
    if (!text) return;
    if (auto v = het::review::parse_share(*text, option)) out = *v;
    else errors.insert(errors.end(), v.errors().begin(), v.errors().end());
  };
  share(a.max_regression, "--max-regression", rules.max_regression);
  share(a.min_headroom, "--min-memory-headroom", rules.min_memory_headroom);
  rules.max_iteration_s = a.max_iteration_s;
  het::InputFiles files = a.check_files;
  files.profiles = a.profiles;
  files.catalog = a.catalog;
  auto loaded = het::read_plan_inputs(files);
  if (!loaded) errors.insert(errors.end(), loaded.errors().begin(), loaded.errors().end());
  if (a.baseline) {
    het::InputFiles base;
    base.plan = a.baseline;
    base.catalog = a.catalog;
    if (auto b = het::read_plan_inputs(base)) rules.baseline = het::review::Baseline{*a.baseline, std::move(b->plan)};
    else errors.insert(errors.end(), b.errors().begin(), b.errors().end());
  }
  if (!errors.empty()) {
    print_errors(errors);
    return kInvalid;
  }
  auto report = het::review::check_plan(loaded->plan, *files.plan, loaded->profiles, rules);
  if (!report) {
    print_errors(report.errors());
    return kInvalid;
  }
  for (const auto& n : report->notes) std::cerr << "note: " << n << "\n";
  if (a.check_format == "json") {
    std::cout << het::review::to_json(*report, *files.plan).dump(2) << "\n";
  } else {
    for (const auto& v : report->violations) std::cout << v.rule << ": " << v.message << "\n";
    std::cout << report->summary << "\n";
  }
  return report->ok() ? 0 : kDifferent;
}

}  // namespace hetplan
