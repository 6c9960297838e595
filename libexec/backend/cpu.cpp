// The CPU backend: model::StageModel<float> (Eigen GEMMs, oneTBB tasks in the kernels) with
// the process's oneTBB parallelism capped at the requested number of threads.
#include <tbb/global_control.h>
#include <tbb/info.h>

#include "backend/backend.hpp"
#include "model/stage.hpp"
#ifdef HET_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace het::backend {

namespace {

class CpuStage final : public Stage {
 public:
  explicit CpuStage(const StageSpec& s) : model_(s.model, s.first, s.last, s.tp_rank, s.tp, s.seed, s.comm) {
    model_.set_recompute(s.recompute);
  }
  std::vector<float> forward(int mb, int B, const int* tokens, const float* x, const int* targets, double* loss_sum) override {
    return model_.forward(mb, B, tokens, x, targets, loss_sum);
  }
  std::vector<float> backward(int mb, const float* dy, double loss_scale) override { return model_.backward(mb, dy, loss_scale); }
  std::vector<model::Param<float>*> params() override { return model_.params(); }
  void zero_grad() override { model_.zero_grad(); }
  std::size_t activation_bytes() const override { return model_.activation_bytes(); }
  std::size_t activation_bytes_peak() const override { return model_.activation_bytes_peak(); }

 private:
  model::StageModel<float> model_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads)
      : threads_(threads > 0 ? threads : tbb::info::default_concurrency()),
        limit_(tbb::global_control::max_allowed_parallelism, std::size_t(threads_)) {}
  std::string name() const override { return "cpu"; }
  std::string describe() const override { return "cpu (" + std::to_string(threads_) + " threads)"; }
  std::unique_ptr<Stage> make_stage(const StageSpec& spec) override { return std::make_unique<CpuStage>(spec); }

 private:
  int threads_;
  tbb::global_control limit_;
};

}  // namespace

std::vector<std::string> available() {
#ifdef HET_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Result<std::unique_ptr<Backend>> open(const std::string& name, int threads, [[maybe_unused]] int device) {
  if (threads < 0) return Diagnostic{"", 0, 0, "threads", "must be 0 (every core) or more, got " + std::to_string(threads)};
  if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(threads));
  std::string known;
  for (const auto& b : available()) known += (known.empty() ? "" : ", ") + b;
#ifdef HET_HAVE_CUDA
  if (name == "cuda") {  // host threads play no part: the device runs the kernels
    auto cuda = open_cuda(device);
    if (!cuda.ok())
      return Diagnostic{"", 0, 0, "backend", cuda.errors().front().message + " (available: " + known + ")", ErrorKind::unsupported};
    return cuda;
  }
#else
  if (name == "cuda")
    return Diagnostic{"", 0, 0, "backend", "not built with CUDA: this hetexec was configured without nvcc (available: " + known + ")",
                      ErrorKind::unsupported};
#endif
  return Diagnostic{"", 0, 0, "backend", "unknown backend '" + name + "' (available: " + known + ")"};
}

}  // namespace het::backend
