#include "calibrate_command.hpp"
#include "report/report.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fidelity/calibrate.hpp"
#include "fidelity/fidelity.hpp"
#include "input/input.hpp"
#include "spec/profile.hpp"
#include "validation/inputs.hpp"

namespace hetplan {

namespace {

constexpr int kInvalid = 2;

void print_errors(const het::Diagnostics& errors, const std::string& file = "") {
  for (auto e : errors) {
    if (e.file.empty()) e.file = file;
    std::cerr << "error: " << e.to_string() << "\n";
  }
}

using het::report::fmt;

// "x1.234", right-aligned in `width`; "-" when nothing was fitted.
std::string factor(const het::fidelity::Factor& f, int width) {
  std::string s = f.stages ? fmt("x%.3f", f.value) : "-";
  return std::string(std::size_t(std::max(0, width - int(s.size()))), ' ') + s;
}

// "predicted 237.0 ms (-18.7%)"
std::string step_line(const het::fidelity::Comparison& c) {
  return fmt("%.3f ms", c.predicted_step_s * 1e3) + " (" + fmt("%+.1f%%", 100 * (c.ratio() - 1)) + ")";
}

}  // namespace

struct CalibrateCommand::Args {
  het::InputFiles files;
  std::string trace, output, format = "table";
  double time_dilation = 1;
};

CalibrateCommand::CalibrateCommand(CLI::App& app) : args_(std::make_unique<Args>()) {
  Args& a = *args_;
  command_ = app.add_subcommand(
      "calibrate", "Fit the profiles' unit costs to a measured run of a plan (hetexec run-local --trace), "
                   "one calibrated profile.yaml per device type");
  command_->add_option("--trace", a.trace, "the measured run's Chrome trace (hetexec run-local/submit --trace)")->required();
  command_->add_option("--plan", a.files.plan, "the plan that run ran")->required();
  command_->add_option("--model", a.files.model, "model.yaml, replacing the plan's own");
  command_->add_option("--cluster", a.files.cluster, "cluster.yaml, replacing the plan's own");
  command_->add_option("--profile", a.files.profiles,
                       "profile.yaml to calibrate (repeatable), replacing the plan's own for its device type (the "
                       "plan's embedded profiles otherwise)");
  command_->add_option("--catalog", a.files.catalog, "device catalog (default: built in)");
  command_->add_option("--time-dilation", a.time_dilation,
                       "the run's hetexec --time-dilation X; the written profiles are of the undilated machine")
      ->check(CLI::Range(1.0, 1000.0));
  command_->add_option("-o,--output", a.output,
                       "a file (ends in .yaml or .yml; one device type) or a directory that gets DEVICE.profile.yaml "
                       "per device type")
      ->required();
  command_->add_option("--format", a.format, "table (default) or json: the factors and the step before and after")
      ->check(CLI::IsMember({"table", "json"}));
  command_->footer(
      "Per device type, forward, backward (with recompute) and optimizer_step rows are each scaled by one factor,\n"
      "measured / predicted, fitted over the plan's stages on it weighted by their unit counts. Device types\n"
      "without a profile (analytic costs) get their factors printed and no file. Links, transfers and the\n"
      "gradient sync are not fitted (the cost model takes them from the cluster). docs/executor.md.");
}

CalibrateCommand::~CalibrateCommand() = default;

std::optional<int> CalibrateCommand::run() const {
  if (!command_->parsed()) return std::nullopt;
  const Args& a = *args_;
  auto loaded = het::load_plan_inputs(a.files);
  if (!loaded) {
    print_errors(loaded.errors());
    return kInvalid;
  }
  auto measured = het::fidelity::read_chrome_trace(a.trace);
  if (!measured) {
    print_errors(measured.errors());
    return kInvalid;
  }
  het::fidelity::CalibrateOptions options;
  options.time_dilation = a.time_dilation;
  auto fitted = het::fidelity::calibrate(loaded->plan, loaded->profiles.specs(), *measured, options);
  if (!fitted) {
    print_errors(fitted.errors(), a.trace);
    return kInvalid;
  }

  // Where each profile goes.
  std::vector<const het::fidelity::DeviceFit*> written;
  for (const auto& d : fitted->devices)
    if (d.profile) written.push_back(&d);
  for (const auto& d : fitted->devices)
    for (const auto& n : d.notes) std::cerr << "note: " << d.device << ": " << n << "\n";
  if (written.empty()) {
    std::cerr << "error: nothing to calibrate: no device type of the plan has a profile (give them with --profile; "
                 "`hetexec profile` measures one)\n";
    return kInvalid;
  }
  namespace fs = std::filesystem;
  const fs::path out(a.output);
  std::error_code ec;
  const bool one_file = !fs::is_directory(out, ec) && (out.extension() == ".yaml" || out.extension() == ".yml");
  if (one_file && written.size() > 1) {
    std::cerr << "error: -o " << a.output << ": " << written.size()
              << " device types were calibrated, one file each: give a directory\n";
    return kInvalid;
  }
  if (!one_file && !fs::create_directories(out, ec) && ec) {
    std::cerr << "error: -o " << a.output << ": cannot make the directory (" << ec.message() << ")\n";
    return kInvalid;
  }
  std::vector<std::string> files;
  for (const auto* d : written) {
    const std::string file = one_file ? a.output : (out / (d->device + ".profile.yaml")).string();
    const auto& given = a.files.profiles;
    const std::string source = std::find(given.begin(), given.end(), d->profile->file) != given.end()
                                   ? d->profile->file
                                   : "the plan's embedded profile for " + d->device;
    const std::string text = het::write_profile(*d->profile, het::fidelity::calibration_header(
                                                                   *d, a.trace, *a.files.plan, source, a.time_dilation,
                                                                   fitted->before.steps_used));
    // What we write must read back.
    auto doc = het::input::parse(text, file);
    auto reread = doc ? het::read_profile(*doc) : het::Result<het::ProfileSpec>(doc.errors());
    if (!reread) {
      print_errors(reread.errors());
      std::cerr << "error: internal: the calibrated profile does not read back\n";
      return 1;
    }
    std::ofstream os(file, std::ios::binary);
    os << text;
    os.close();
    if (!os) {
      std::cerr << "error: cannot write " << file << "\n";
      return kInvalid;
    }
    files.push_back(file);
  }

  if (a.format == "json") {
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const auto& d : fitted->devices) {
      auto f = [](const het::fidelity::Factor& x) { return nlohmann::ordered_json{{"factor", x.value}, {"stages", x.stages}}; };
      std::string file;
      for (std::size_t i = 0; i < written.size(); ++i)
        if (written[i] == &d) file = files[i];
      devices.push_back({{"device", d.device}, {"stages", d.stages}, {"forward", f(d.forward)}, {"backward", f(d.backward)},
                         {"optimizer", f(d.optimizer)}, {"profile", file.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(file)},
                         {"notes", d.notes}});
    }
    nlohmann::ordered_json j{{"trace", a.trace},
                             {"plan", *a.files.plan},
                             {"time_dilation", a.time_dilation},
                             {"passes", fitted->passes},
                             {"devices", devices},
                             {"before", het::fidelity::to_json(fitted->before)},
                             {"after", het::fidelity::to_json(fitted->after)}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "calibrated from " << a.trace << " (" << fitted->before.steps_used << " steps after the first"
            << (a.time_dilation != 1 ? ", time dilation " + fmt("%g", a.time_dilation) + " undone" : std::string()) << ")\n";
  std::cout << "device            stages   forward  backward  optimizer  written\n";
  for (const auto& d : fitted->devices) {
    std::string file = "- (no profile: analytic)";
    for (std::size_t i = 0; i < written.size(); ++i)
      if (written[i] == &d) file = files[i];
    std::string name = d.device + std::string(d.device.size() < 16 ? 16 - d.device.size() : 1, ' ');
    std::cout << name << fmt("%8.0f", d.stages) << factor(d.forward, 10)
              << factor(d.backward, 10) << factor(d.optimizer, 11) << "  " << file << "\n";
  }
  std::cout << "step of the measured plan: measured " << fmt("%.3f ms", fitted->before.measured_step_s * 1e3)
            << "; predicted " << step_line(fitted->before) << " with the given profiles, " << step_line(fitted->after)
            << " calibrated\n";
  return 0;
}

}  // namespace hetplan
