#pragma once
// Compute time of one unit for one micro-batch on one device (DESIGN.md §6).
//
// From a profile of the device type when there is one for this model shape: rows with the
// same (tp, cp, seq_length) are interpolated linearly over the micro-batch size; a point
// outside the measured sizes, or a shape that was not measured (scaled from the nearest
// measured shape by the ratio of analytic times), is marked extrapolated. Without a
// profile: model FLOPs / (tp·cp) / (peak × efficiency), backward = 2 × forward; the
// embedding is memory-bound (2·b·s·h·dtype bytes / memory bandwidth).
// Profiled times include the TP and CP collectives of their measurement when the profile says
// so (ProfileSpec::collectives_included, and only for the measured tp and cp); analytic ones do
// not (the stage costing adds them), which UnitCost.includes_tp_comm / includes_cp_comm say.
#include <optional>
#include <string>
#include <vector>

#include "spec/catalog.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het::cost {

enum class Source { profile, interpolated, extrapolated, analytic };
const char* to_string(Source s);

struct UnitCost {
  double forward_s = 0, backward_s = 0;
  double recompute_full_s = 0;       // recomputing the unit's forward
  double recompute_selective_s = 0;  // recomputing the attention core only
  Source source = Source::analytic;
  bool includes_tp_comm = false;  // the TP all-reduces of the unit's shape
  bool includes_cp_comm = false;  // its CP K/V exchanges
};

// Default fraction of peak FLOP/s the analytic model assumes when a device gives none.
inline constexpr double kDefaultEfficiency = 0.5;

class ComputeModel {
 public:
  // Keeps the profiles measured for this model's dimensions; the others are listed in
  // notes() and not used (the command line refuses them first: profile_mismatch()). A kept
  // profile's assumptions are listed in notes() too.
  ComputeModel(const ModelSpec& model, std::vector<ProfileSpec> profiles);

  // `sequences`: sequences of the micro-batch on one device (micro_batch_size / dp).
  UnitCost unit(UnitKind kind, const DeviceSpec& device, int tp, int cp, double sequences) const;
  const std::vector<std::string>& notes() const { return notes_; }
  // The profiled optimizer step per layer's parameters on one device of this type in a stage
  // of this tp, if measured:
  //   - a profile's single time (`optimizer_step: 1.5ms`) holds for every tp;
  //   - rows of this tp: the median over their micro-batch sizes (the step does not depend on
  //     the micro-batch: Sailor's A100-40 OPT-350 tp-1 rows span 2.930-2.947 ms over 1..8);
  //   - a tp not measured: the nearest measured tp (in log2; the larger on a tie) scaled by
  //     measured tp / tp, the share of a layer's parameters one device updates.
  std::optional<double> optimizer_step(const std::string& device_type, int tp) const;
  bool has_profile(const std::string& device_type) const;
  // The same model and profiles costing sequences of `length` tokens (a bucket of
  // model.seq_lengths: ModelSpec's at_length()). The profiles are those measured for the model
  // (their header's seq_length its longest); their rows of that length are used where measured,
  // else scaled as any unmeasured shape.
  ComputeModel at_length(int length) const;

 private:
  UnitCost analytic(UnitKind kind, const DeviceSpec& device, int tp, int cp, double sequences, int seq) const;

  ModelSpec model_;
  std::vector<ProfileSpec> profiles_;
  std::vector<std::string> notes_;
};

}  // namespace het::cost
