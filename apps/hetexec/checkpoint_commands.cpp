#include "checkpoint_commands.hpp"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"

namespace het::cli {

namespace {

// A manifest field as written (any JSON), null when absent: the manifest was checked for what
// resuming needs, not for these, which are only shown.
nlohmann::json shown(const nlohmann::json& m, const char* key) { return m.is_object() && m.contains(key) ? m[key] : nlohmann::json(); }

}  // namespace

CheckpointCommands::CheckpointCommands(CLI::App& app) {
  auto* group = app.add_subcommand("checkpoint", "Look into checkpoints written with --checkpoint-dir");
  group->require_subcommand(1);
  inspect_ = group->add_subcommand("inspect", "What a checkpoint holds: its step, plan, and every tensor's shape and pieces");
  inspect_->add_option("dir", dir_, "a checkpoint, or a --checkpoint-dir (its newest complete checkpoint)")->required();
  inspect_->add_option("--format", format_, "text (default) or json")->check(CLI::IsMember({"text", "json"}));
  export_ = group->add_subcommand("export", "Every tensor whole in one safetensors file (fp32; names and shapes: docs/checkpoints.md)");
  export_->add_option("dir", dir_, "a checkpoint, or a --checkpoint-dir (its newest complete checkpoint)")->required();
  export_->add_option("-o,--output", output_, "the safetensors file to write")->required();
  export_->add_flag("--with-moments", moments_, "also the AdamW moments, as NAME.adam_m and NAME.adam_v");
}

int CheckpointCommands::run() {
  if (inspect_->parsed()) return run_inspect();
  if (export_->parsed()) return run_export();
  return -1;
}

int CheckpointCommands::run_inspect() {
  auto c = checkpoint::Checkpoint::open(dir_);
  if (!c) {
    for (const auto& e : c.errors()) std::cerr << "error: " << e.to_string() << "\n";
    return 2;
  }
  const auto& m = c->manifest();
  nlohmann::json tensors = nlohmann::json::object();
  std::int64_t parameters = 0;
  for (const auto& [name, shape] : c->shapes()) {
    tensors[name] = {{"shape", shape}, {"pieces", m["tensors"][name]["pieces"].size()}};
    parameters += checkpoint::elements_of(shape);
  }
  if (format_ == "json") {
    std::cout << nlohmann::json{{"dir", c->dir()},         {"step", c->step()},           {"world", shown(m, "world")},
                                {"bytes", shown(m, "bytes")}, {"files", m["files"].size()}, {"parameters", parameters},
                                {"seed", shown(m, "seed")}, {"lr", shown(m, "lr")},
                                {"data", shown(m, "data")}, {"tensors", tensors}}
                     .dump(1)
              << "\n";
    return 0;
  }
  std::cout << "checkpoint " << c->dir() << "\n"
            << "  training resumes at step " << c->step() << "; written by " << shown(m, "world").dump() << " ranks into " << m["files"].size()
            << " files, " << shown(m, "bytes").dump() << " bytes\n"
            << "  " << parameters << " parameters in " << c->shapes().size() << " tensors (fp32 values and AdamW moments)\n";
  const nlohmann::json model = shown(m, "model"), pipelines = shown(shown(m, "plan"), "pipelines");
  if (model.is_object()) std::cout << "  model: " << shown(model, "name").dump() << " (" << shown(model, "architecture").dump() << ")\n";
  if (pipelines.is_array()) {
    std::cout << "  written under a plan of " << pipelines.size() << " pipeline(s):";
    for (const auto& p : pipelines) std::cout << " " << shown(p, "stages").size() << " stage(s)";
    std::cout << "\n";
  }
  std::cout << "  seed " << shown(m, "seed").dump() << ", lr " << shown(m, "lr").dump() << ", data " << shown(m, "data").dump() << "\n"
            << "  tensor                     shape            pieces\n";
  for (const auto& [name, shape] : c->shapes()) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-26s %-16s %6zu", name.c_str(), checkpoint::shape_text(shape).c_str(), m["tensors"][name]["pieces"].size());
    std::cout << line << "\n";
  }
  return 0;
}

int CheckpointCommands::run_export() {
  auto c = checkpoint::Checkpoint::open(dir_);
  if (!c) {
    for (const auto& e : c.errors()) std::cerr << "error: " << e.to_string() << "\n";
    return 2;
  }
  // Every tensor whole: one span of all its elements, read from the pieces that hold it.
  std::vector<std::vector<float>> data;
  std::vector<checkpoint::TensorOut> out;
  data.reserve(c->shapes().size() * (moments_ ? 3 : 1));
  for (const auto& [name, shape] : c->shapes()) {
    const std::int64_t n = checkpoint::elements_of(shape);
    const std::vector<checkpoint::Span> whole{{0, n, n, 1}};
    for (auto [field, suffix] : {std::pair{checkpoint::Field::value, ""}, {checkpoint::Field::m, ".adam_m"}, {checkpoint::Field::v, ".adam_v"}}) {
      if (field != checkpoint::Field::value && !moments_) continue;
      data.emplace_back(std::size_t(n));
      if (auto got = c->read(name, shape, field, whole, data.back().data()); !got) {
        for (const auto& e : got.errors()) std::cerr << "error: " << e.to_string() << "\n";
        return 2;
      }
      out.push_back({name + suffix, shape, data.back().data()});
    }
  }
  const auto& m = c->manifest();
  std::map<std::string, std::string> metadata{{"format", "hetexec export"}, {"step", std::to_string(c->step())}};
  if (m.contains("model")) metadata["model"] = m["model"].dump();
  if (auto written = checkpoint::write(output_, out, metadata); !written) {
    for (const auto& e : written.errors()) std::cerr << "error: " << e.to_string() << "\n";
    return 1;
  }
  std::cout << "wrote " << output_ << ": " << out.size() << " tensors of " << c->dir() << " (step " << c->step() << ")\n";
  return 0;
}

}  // namespace het::cli
