// hetplan: the planner's command line. Argument parsing and output formatting only; the
// work is done in libplan. Exit status: 0 success, 2 invalid input or usage.
#include <CLI/CLI.hpp>

#include <iostream>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>

#include "het/version.hpp"
#include "importer/importer.hpp"
#include "plan/plan_io.hpp"
#include "predict/predict.hpp"
#include "report/report.hpp"
#include "sim/sim.hpp"
#include "validation/inputs.hpp"

namespace {

constexpr int kInvalid = 2;

nlohmann::ordered_json report_json(const het::InputsReport& report) {
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
  for (const auto& c : report.inputs) {
    nlohmann::ordered_json errors = nlohmann::ordered_json::array();
    for (const auto& e : c.errors)
      errors.push_back({{"file", e.file}, {"line", e.line}, {"column", e.column}, {"path", e.path},
                        {"message", e.message}, {"text", e.to_string()}});
    inputs.push_back({{"kind", c.kind}, {"file", c.file}, {"valid", c.errors.empty()}, {"summary", c.summary},
                      {"errors", errors}});
  }
  return {{"valid", report.ok()}, {"inputs", inputs}};
}

int run_validate(const het::InputFiles& files, const std::string& format) {
  if (!files.model && !files.cluster && !files.plan && files.profiles.empty() && !files.catalog) {
    std::cerr << "hetplan validate: nothing to check; give --model, --cluster, --profile, --plan or --catalog\n";
    return kInvalid;
  }
  het::InputsReport report = het::check_inputs(files);
  if (format == "json") {
    std::cout << report_json(report).dump(2) << "\n";
    return report.ok() ? 0 : kInvalid;
  }
  std::size_t width = 0;
  for (const auto& c : report.inputs) width = std::max(width, c.file.size());
  for (const auto& c : report.inputs) {
    std::string kind = c.kind + std::string(8 - std::min<std::size_t>(8, c.kind.size()), ' ');
    std::string file = c.file + std::string(width - c.file.size(), ' ');
    if (c.errors.empty()) {
      std::cout << kind << file << "  ok       " << c.summary << "\n";
    } else {
      std::cout << kind << file << "  INVALID  " << c.errors.size() << " problem" << (c.errors.size() == 1 ? "" : "s")
                << "\n";
      for (const auto& e : c.errors) std::cerr << "error: " << e.to_string() << "\n";
    }
  }
  return report.ok() ? 0 : kInvalid;
}

void print_errors(const het::Diagnostics& errors) {
  for (const auto& e : errors) std::cerr << "error: " << e.to_string() << "\n";
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::cerr << "error: cannot write " << path << "\n";
    return false;
  }
  return true;
}

struct SimulateArgs {
  het::InputFiles files;
  std::string schedule, format = "table", output, trace, resharding = "cheapest";
  bool no_overlap_sync = false;
};

// simulate and show: load, validate, predict; print a table or the completed plan.
int run_simulate(const SimulateArgs& a, bool show) {
  auto loaded = het::load_plan_inputs(a.files);
  if (!loaded) {
    print_errors(loaded.errors());
    return kInvalid;
  }
  het::predict::Options opt;
  if (!a.schedule.empty()) {
    for (auto k : {het::ScheduleKind::gpipe, het::ScheduleKind::one_f_one_b, het::ScheduleKind::eager_1f1b,
                   het::ScheduleKind::h_1f1b, het::ScheduleKind::virtual_1f1b})
      if (a.schedule == het::to_string(k)) opt.schedule = k;
  }
  for (auto r : {het::predict::Resharding::cheapest, het::predict::Resharding::all_pairs,
                 het::predict::Resharding::gather_send_scatter, het::predict::Resharding::inner_dp_rank0,
                 het::predict::Resharding::send_recv_allgather})
    if (a.resharding == het::predict::to_string(r)) opt.resharding = r;
  opt.overlap_sync = !a.no_overlap_sync;
  opt.trace = !a.trace.empty();
  het::cost::ComputeModel compute(loaded->plan.model, loaded->profiles);
  auto outcome = het::predict::predict(loaded->plan, compute, opt);
  if (!outcome) {
    print_errors(outcome.errors());
    return kInvalid;
  }
  if (!a.trace.empty() && !write_file(a.trace, het::sim::chrome_trace(outcome->sim.trace))) return kInvalid;
  const std::string plan_json = het::write_plan(outcome->plan);
  if (!a.output.empty() && !write_file(a.output, plan_json)) return kInvalid;
  if (a.format == "json" && !show) {
    std::cout << plan_json;
  } else {
    std::cout << het::report::stage_table(*outcome) << "\n" << het::report::summary(*outcome);
  }
  return 0;
}

struct ImportArgs {
  std::string from, dir, model, output;
  std::optional<std::string> device, llm_info;
};

int run_import(const ImportArgs& a) {
  auto model = het::load_model(a.model);
  if (!model) {
    print_errors(model.errors());
    return kInvalid;
  }
  het::importer::Options o{a.from, a.dir, *model, a.device, a.llm_info};
  auto profile = het::importer::import_profile(o);
  if (!profile) {
    print_errors(profile.errors());
    return kInvalid;
  }
  std::string header = "Imported by `hetplan profile import --from " + a.from + "` from " + a.dir +
                       "\nfor the model shape of " + model->name + ". Times are measured per micro-batch.";
  if (a.from == "sailor") header += "\nSource: Sailor (eth-easl/sailor), MIT licence.";
  const std::string text = het::importer::to_yaml(*profile, header);
  // What we write must read back: the importer's output goes through the same checks.
  auto doc = het::input::parse(text, a.output);
  auto reread = doc ? het::read_profile(*doc) : het::Result<het::ProfileSpec>(doc.errors());
  if (!reread) {
    print_errors(reread.errors());
    std::cerr << "error: internal: the imported profile does not read back\n";
    return 1;
  }
  if (!write_file(a.output, text)) return kInvalid;
  std::cout << "wrote " << a.output << ": " << profile->device << ", " << profile->units.size() << " rows\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hetplan: hybrid-parallel training plans for heterogeneous GPU clusters"};
  app.set_version_flag("--version", std::string("hetplan ") + het::kVersion);
  app.require_subcommand(1);

  het::InputFiles files;
  std::string format = "text";
  auto* validate = app.add_subcommand(
      "validate", "Check model, cluster, profile and plan files (any subset); exit 0 when valid, 2 when not");
  validate->add_option("--model", files.model, "model.yaml");
  validate->add_option("--cluster", files.cluster, "cluster.yaml");
  validate->add_option("--profile", files.profiles, "profile.yaml (repeatable)");
  validate->add_option("--plan", files.plan, "plan.json; --model/--cluster, when given, replace the plan's own");
  validate->add_option("--catalog", files.catalog, "device catalog (default: the built-in configs/devices.yaml)");
  validate->add_option("--format", format, "output: text (a table) or json")->check(CLI::IsMember({"text", "json"}));

  SimulateArgs sim_args;
  auto add_plan_inputs = [&](CLI::App* cmd) {
    cmd->add_option("plan", sim_args.files.plan, "plan.json")->required();
    cmd->add_option("--model", sim_args.files.model, "model.yaml, replacing the plan's own");
    cmd->add_option("--cluster", sim_args.files.cluster, "cluster.yaml, replacing the plan's own");
    cmd->add_option("--profile", sim_args.files.profiles, "profile.yaml (repeatable); analytic costs without");
    cmd->add_option("--catalog", sim_args.files.catalog, "device catalog (default: built in)");
    cmd->add_option("--schedule", sim_args.schedule, "replace the plan's schedule")
        ->check(CLI::IsMember({"gpipe", "1f1b", "eager-1f1b", "h-1f1b", "virtual-1f1b"}));
    cmd->add_option("--resharding", sim_args.resharding, "between stages of different (dp, cp, tp)")
        ->check(CLI::IsMember({"cheapest", "all-pairs", "gather-send-scatter", "inner-dp-rank0", "send-recv-allgather"}));
    cmd->add_flag("--no-overlap-sync", sim_args.no_overlap_sync, "gradient sync waits for the last backward");
    cmd->add_option("--trace", sim_args.trace, "write a Chrome trace of one iteration (open in Perfetto)");
  };
  auto* simulate = app.add_subcommand(
      "simulate", "Predict a plan: warm-ups, iteration time, throughput, MFU, memory per stage (the plan's derived fields)");
  add_plan_inputs(simulate);
  simulate->add_option("--format", sim_args.format, "table (default) or json (the completed plan)")
      ->check(CLI::IsMember({"table", "json"}));
  simulate->add_option("-o,--output", sim_args.output, "write the completed plan to this file");
  auto* show = app.add_subcommand("show", "Print a plan's stage table and predicted summary");
  add_plan_inputs(show);

  ImportArgs import_args;
  auto* profile = app.add_subcommand("profile", "Work with profiles of measured costs");
  profile->require_subcommand(1);
  auto* import = profile->add_subcommand("import", "Convert public profiles (Sailor, Metis) to hetplan.profile/v1");
  import->add_option("--from", import_args.from, "sailor or metis")->required()->check(CLI::IsMember({"sailor", "metis"}));
  import->add_option("dir", import_args.dir, "the profile directory of one model and one GPU")->required();
  import->add_option("--model", import_args.model, "model.yaml of the profiled model's shape")->required();
  import->add_option("--device", import_args.device, "device type (default: from the directory name)");
  import->add_option("--llm-info", import_args.llm_info, "sailor: misc/llm_info.json, for memory sizes");
  import->add_option("-o,--output", import_args.output, "profile.yaml to write")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kInvalid;
  }
  if (validate->parsed()) return run_validate(files, format);
  if (simulate->parsed()) return run_simulate(sim_args, false);
  if (show->parsed()) return run_simulate(sim_args, true);
  if (import->parsed()) return run_import(import_args);
  return kInvalid;
}
