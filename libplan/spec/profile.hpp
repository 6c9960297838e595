#pragma once
// Profiled costs of one device type (profile.yaml, format hetplan.profile/v1; schema in
// docs/inputs.md): per unit kind (embedding, layer, attn, mlp, head) and shape (tp, cp,
// micro-batch size, sequence length) the measured forward/backward/recompute times and
// memory. The cost model interpolates between rows.
//
// read_profile() checks the schema and rejects two rows with the same shape.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "spec/catalog.hpp"
#include "spec/model.hpp"

namespace het {

enum class UnitKind { embedding, layer, attn, mlp, head };
const char* to_string(UnitKind u);

enum class LinkClass { intra_node, inter_node, cross_subcluster };
const char* to_string(LinkClass c);

struct ProfileRow {
  UnitKind unit = UnitKind::layer;
  int tp = 1, cp = 1, micro_batch_size = 1;
  int seq_length = 0;                      // defaults to the profile's model.seq_length
  double forward = 0, backward = 0;        // seconds per micro-batch
  std::optional<double> recompute;         // seconds
  std::optional<double> activation_memory; // bytes per micro-batch held until backward
  std::optional<double> parameter_memory;  // bytes of parameters on one device
  int line = 0;                            // where the row is in its file (0 when made in code)
};

// The model shape the profile was measured with. The last three are optional in the file
// (profiles written before they were recorded); when given they must match the model too.
struct ProfileModel {
  Architecture architecture = Architecture::gpt;
  int hidden_size = 0;
  int num_attention_heads = 0;
  int seq_length = 0;
  std::optional<int> num_kv_heads, ffn_hidden_size, vocab_size;
};
// The dimensions of `model` as a profile records them (all fields set).
ProfileModel profile_model(const ModelSpec& model);

struct ProfileSpec {
  std::string device;  // device type, as in the cluster (e.g. A100-40GB)
  ProfileModel model;
  std::vector<ProfileRow> units;
  std::optional<double> optimizer_step;  // seconds per layer's parameters
  std::map<LinkClass, LinkSpec> links;   // fitted alpha-beta per link class
};

Result<ProfileSpec> read_profile(const input::Document& doc);
Result<ProfileSpec> load_profile(const std::string& file);

// Empty when the profile can serve this model; else a sentence saying what differs.
std::string profile_mismatch(const ProfileSpec& profile, const ModelSpec& model);

}  // namespace het
