#pragma once
// Rank 0's lines as people read them (run-local and submit): a table row per step line
// {step, loss, step_s, tokens_per_s} — copied to the metrics file when there is one — under a
// header printed before the first; the line naming the backend once; the line of every rank's
// peak memory {"memory": [...]} (runtime/memory.hpp) as a table beside the plan's prediction —
// also copied to the metrics file; anything else as it is.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace het::cli {

class StepPrinter {
 public:
  // zero: the job shards the optimizer (ZeRO >= 1), so rank 0 holds its share of the state.
  StepPrinter(std::ostream* metrics, bool zero) : metrics_(metrics), zero_(zero) {}
  // Per rank: its stage's label and the plan's predicted peak bytes per device (0: none).
  StepPrinter& with_ranks(std::vector<std::string> stage, std::vector<double> predicted) {
    stage_ = std::move(stage), predicted_ = std::move(predicted);
    return *this;
  }
  void operator()(const std::string& line) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      std::cout << line << std::endl;
      return;
    }
    if (j.contains("optimizer_state")) {
      std::cout << "rank 0: " << j.value("backend", "?") << ", AdamW"
                << (j.contains("lr") ? " lr " + j["lr"].dump() : "")  // the value the rank uses, exactly
                << ", state " << j["optimizer_state"].get<std::size_t>() << " values" << (zero_ ? " (ZeRO-1: its share)" : "")
                << std::endl;
      if (j.contains("links")) std::cout << "rank 0: links to other ranks over " << j["links"].get<std::string>() << std::endl;
      if (j.contains("collectives")) std::cout << "rank 0: its collective groups: " << j["collectives"].get<std::string>() << std::endl;
      return;
    }
    if (j.contains("switched")) return;  // an elastic recovery's bytes by route: submit --elastic tables them
    if (j.contains("memory") && j["memory"].is_array()) {
      print_memory(j["memory"]);
      if (metrics_) *metrics_ << line << "\n" << std::flush;
      return;
    }
    if (j.contains("checkpoint") && j["checkpoint"].is_string()) {
      const double mb = j.value("bytes", 0.0) / 1e6, s = j.value("seconds", 0.0);
      char buf[160];
      std::snprintf(buf, sizeof buf, " (%.1f MB in %.3f s%s)", mb, s, s > 0 ? (", " + std::to_string(int(mb / s)) + " MB/s").c_str() : "");
      std::cout << "checkpoint: " << j["checkpoint"].get<std::string>() << ", training resumes there at step " << j.value("next_step", 0) << buf
                << std::endl;
      return;
    }
    if (!j.contains("step")) {
      std::cout << line << std::endl;
      return;
    }
    if (!header_) std::cout << " step        loss    step_s    tokens/s\n", header_ = true;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%5d  %10.6f  %8.4f  %10.0f", j["step"].get<int>(), j["loss"].get<double>(),
                  j["step_s"].get<double>(), j["tokens_per_s"].get<double>());
    std::cout << buf << std::endl;
    if (metrics_) *metrics_ << line << "\n" << std::flush;
  }

 private:
  // Measured: the heap's growth (it holds the accounted buffers and whatever else the rank
  // allocated); predicted ÷ measured is the memory model's error.
  void print_memory(const nlohmann::json& ranks) const {
    auto mib = [](const nlohmann::json& r, const char* k) { return r.value(k, 0.0) / (1 << 20); };
    std::cout << "peak memory per rank, MiB: predicted by the plan; measured: the device buffers' peak (CUDA) or the process heap's growth, and of it the\n"
                 "buffers accounted (parameters, gradients, AdamW moments, sync buffers, activations in flight)\n"
              << " rank  stage              predicted  measured  pred/meas   params    grads     adam  buffers  activat\n";
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const auto& m = ranks[r];
      // A device backend's device memory, else (CPU) the heap's growth.
      const double predicted = r < predicted_.size() ? predicted_[r] / (1 << 20) : 0,
                   measured = mib(m, "device") > 0 ? mib(m, "device") : mib(m, "heap");
      char ratio[32] = "-";
      if (predicted > 0 && measured > 0) std::snprintf(ratio, sizeof ratio, "%.3f", predicted / measured);
      char buf[256];
      std::snprintf(buf, sizeof buf, "%5zu  %-17s %10.3f %9.3f %10s %8.3f %8.3f %8.3f %8.3f %8.3f", r,
                    r < stage_.size() ? stage_[r].c_str() : "", predicted, measured, ratio, mib(m, "parameters"),
                    mib(m, "gradients"), mib(m, "optimizer"), mib(m, "sync_buffers"), mib(m, "activations"));
      std::cout << buf << "\n";
    }
    std::cout << std::flush;
  }

  std::ostream* metrics_;
  bool zero_;
  bool header_ = false;
  std::vector<std::string> stage_;
  std::vector<double> predicted_;
};

}  // namespace het::cli
