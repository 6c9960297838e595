#pragma once
// Importing public profiles into hetplan.profile/v1 (DESIGN.md §4; the data in the team's
// peer-data/sailor, MIT licence). DIR is one model's directory for one GPU:
//   sailor: DIR/profile.json = {micro_batch: {tp: {layer_index: [forward_s, backward_s, update_s]}}};
//           index 0 is the embedding, the last the head, the rest transformer blocks (their
//           median becomes the `layer` row). update_s is the same for every layer of a
//           (micro-batch, tp): the model's optimizer step over its layers; it becomes the
//           optimizer step of that (tp, micro-batch), unless it is 0 (not measured: every
//           update time of OPT-350 on A100-80, for one). With --llm-info (misc/llm_info.json,
//           value counts per layer and tp), parameter and activation memory are added at the
//           model's dtype.
//   metis:  DIR/mbs<b>_tmp<t>.json, which Sailor wrote from the same measurements:
//           layer_compute_total_ms[] = forward + backward (split 1:2, an assumption the
//           profile states), optimizer_time_ms = the update times summed over the layers,
//           parameters_per_layer_bytes[] (4 bytes a parameter) and layer_memory_total_mb[]
//           (MiB: 20 bytes a parameter of model state + the micro-batch's activations at 4
//           bytes a value), from which both memories come, at the model's dtype. They carry
//           their own memory, so --llm-info is refused.
// The model is checked against what the peer data says about the profiled model (named by
// the directory above the GPU's, e.g. OPT-350) when the data is found: its misc/ (4 levels
// above a sailor DIR, 5 above a metis DIR, as in the peer data's tree) has a
// training_config_*.json for that model (hidden_size, heads, sequence_length, vocab_size),
// or else llm_info.json (--llm-info, or misc/'s) gives a block's output values per sequence
// (seq_length × hidden_size). A contradiction is an error naming the field; without the
// data the model's dimensions are recorded unchecked. The device name comes from a table of
// the peer data's names (A100-40 -> A100-40GB, ...) unless given.
#include <optional>
#include <string>

#include "diag/diag.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het::importer {

struct Options {
  std::string format;                     // "sailor" or "metis"
  std::string dir;                        // one model and one GPU
  ModelSpec model;                        // the model the profile is for
  std::optional<std::string> device;      // replaces the name derived from the directory
  std::optional<std::string> llm_info;    // sailor: misc/llm_info.json (metis: refused)
  std::string model_file = "";            // names the model in errors
};

Result<ProfileSpec> import_profile(const Options& options);

// The catalog name for a peer-data GPU directory name, or the name itself.
std::string device_name(const std::string& peer_name);

}  // namespace het::importer
