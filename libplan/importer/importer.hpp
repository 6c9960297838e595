#pragma once
// Importing public profiles into hetplan.profile/v1 (DESIGN.md §4; the data in the team's
// peer-data/sailor, MIT licence).
//   sailor: DIR/profile.json = {micro_batch: {tp: {layer_index: [forward_s, backward_s, update_s]}}};
//           index 0 is the embedding, the last the head, the rest transformer blocks (their
//           median becomes the `layer` row; the median update time the optimizer step).
//           With an llm_info.json (misc/), parameter and activation sizes are added.
//   metis:  DIR/mbs<b>_tmp<t>.json with execution_time.layer_compute_total_ms[] (forward +
//           backward; split 1:2 as the analytic model does) and optimizer_time_ms.
// The model shape comes from the hetplan model the profile is for; the device name from a
// table of the peer data's names (A100-40 -> A100-40GB, ...) unless given.
#include <optional>
#include <string>

#include "diag/diag.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het::importer {

struct Options {
  std::string format;                     // "sailor" or "metis"
  std::string dir;                        // one model and one GPU
  ModelSpec model;                        // the shape the profile was measured with
  std::optional<std::string> device;      // replaces the name derived from the directory
  std::optional<std::string> llm_info;    // sailor: misc/llm_info.json
};

Result<ProfileSpec> import_profile(const Options& options);

// The catalog name for a peer-data GPU directory name, or the name itself.
std::string device_name(const std::string& peer_name);

// profile.yaml text (hetplan.profile/v1); read_profile() reads it back.
std::string to_yaml(const ProfileSpec& profile, const std::string& header_comment);

}  // namespace het::importer
