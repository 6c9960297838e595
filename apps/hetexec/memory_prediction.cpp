#include "memory_prediction.hpp"

#include <optional>

#include "predict/predict.hpp"
#include "program/program.hpp"

namespace het::cli {

std::pair<std::vector<std::string>, std::vector<double>> rank_memory_predictions(const Plan& plan, const std::string& backend) {
  const program::Topology topo(plan);
  // The memory model predicts the layout of the backend that trains the model's dtype (cost/
  // memory.hpp): fp32 the CPU backend's, bf16 the CUDA backend's. A backend trains its own
  // precision whatever the model says, so the plan is predicted again in it where they differ.
  const DType trains = backend == "cuda" ? DType::bf16 : DType::fp32;
  const bool carried = plan.model.dtype == trains;
  Plan as_run = plan;
  as_run.model.dtype = trains;
  std::optional<predict::Outcome> analytic;
  if (auto o = predict::predict(as_run, cost::ComputeModel(as_run.model, {}), {})) analytic = std::move(*o);
  std::vector<std::string> stage;
  std::vector<double> predicted;
  for (int r = 0; r < topo.ranks(); ++r) {
    const auto place = topo.place(r);
    const Stage& st = topo.stage_of(r);
    stage.push_back("p" + std::to_string(place.pipeline) + " s" + std::to_string(place.stage) + " " + st.subcluster);
    predicted.push_back(carried && st.predicted ? st.predicted->memory_bytes
                        : analytic   ? analytic->stages[std::size_t(place.pipeline)][std::size_t(place.stage)].memory.total()
                                     : 0.0);
  }
  return {stage, predicted};
}

}  // namespace het::cli
