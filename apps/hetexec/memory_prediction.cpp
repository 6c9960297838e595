#include "memory_prediction.hpp"

#include <optional>

#include "predict/predict.hpp"
#include "program/program.hpp"

namespace het::cli {

std::pair<std::vector<std::string>, std::vector<double>> rank_memory_predictions(const Plan& plan) {
  const program::Topology topo(plan);
  std::optional<predict::Outcome> analytic;
  if (auto o = predict::predict(plan, cost::ComputeModel(plan.model, {}), {})) analytic = std::move(*o);
  std::vector<std::string> stage;
  std::vector<double> predicted;
  for (int r = 0; r < topo.ranks(); ++r) {
    const auto place = topo.place(r);
    const Stage& st = topo.stage_of(r);
    stage.push_back("p" + std::to_string(place.pipeline) + " s" + std::to_string(place.stage) + " " + st.subcluster);
    predicted.push_back(st.predicted ? st.predicted->memory_bytes
                        : analytic   ? analytic->stages[std::size_t(place.pipeline)][std::size_t(place.stage)].memory.total()
                                     : 0.0);
  }
  return {stage, predicted};
}

}  // namespace het::cli
