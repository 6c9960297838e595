// hetplan: the planner's command line. Argument parsing and output formatting only; the
// work is done in libplan. Exit status: 0 success, 2 invalid input or usage.
#include <CLI/CLI.hpp>

#include <iostream>
#include <nlohmann/json.hpp>

#include "het/version.hpp"
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kInvalid;
  }
  if (validate->parsed()) return run_validate(files, format);
  return kInvalid;
}
