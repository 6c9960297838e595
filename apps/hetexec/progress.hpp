#pragma once
// Rank 0's lines as people read them (run-local and submit): a table row per step line
// {step, loss, step_s, tokens_per_s} — copied to the metrics file when there is one — under a
// header printed before the first; the line naming the backend once; anything else as it is.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

namespace het::cli {

class StepPrinter {
 public:
  // zero: the job shards the optimizer (ZeRO >= 1), so rank 0 holds its share of the state.
  StepPrinter(std::ostream* metrics, bool zero) : metrics_(metrics), zero_(zero) {}
  void operator()(const std::string& line) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      std::cout << line << std::endl;
      return;
    }
    if (j.contains("optimizer_state")) {
      std::cout << "rank 0: " << j.value("backend", "?") << ", AdamW state " << j["optimizer_state"].get<std::size_t>()
                << " values" << (zero_ ? " (ZeRO-1: its share)" : "") << std::endl;
      if (j.contains("links")) std::cout << "rank 0: links to other ranks over " << j["links"].get<std::string>() << std::endl;
      if (j.contains("collectives")) std::cout << "rank 0: its collective groups: " << j["collectives"].get<std::string>() << std::endl;
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
  std::ostream* metrics_;
  bool zero_;
  bool header_ = false;
};

}  // namespace het::cli
