#pragma once
// Profiled costs of one device type (profile.yaml, format hetplan.profile/v1; schema in
// docs/inputs.md): per unit kind (embedding, layer, attn, mlp, head) and shape (tp, cp,
// micro-batch size, sequence length) the measured forward/backward/recompute times and
// memory; the optimizer step per tp (and micro-batch); the model dimensions they were
// measured for; and, in sentences, what the profile assumes rather than measured. The cost
// model interpolates between rows.
//
// read_profile() checks the schema and rejects two rows (or two optimizer steps) with the
// same shape; write_profile() writes text that read_profile() reads back to the same values.
#include <functional>
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
  std::optional<double> parameter_memory;  // bytes of the unit's weights on one device, in the model's dtype
  int line = 0;                            // where the row is in its file (0 when made in code)
};

// The model dimensions the profile was measured for. The optional ones are absent from
// profiles written before they were recorded, and then not checked.
struct ProfileModel {
  Architecture architecture = Architecture::gpt;
  int hidden_size = 0;
  int num_attention_heads = 0;
  int seq_length = 0;
  std::optional<int> num_kv_heads = {}, ffn_hidden_size = {}, vocab_size = {};
};
// All the dimensions of a model, as a profile measured for it records them.
ProfileModel profile_model(const ModelSpec& model);

// One measured optimizer step: seconds per layer's parameters on one device. `tp` is absent
// only in the single-time form (`optimizer_step: 1.5ms`), which holds for every tp.
struct OptimizerStep {
  std::optional<int> tp;
  std::optional<int> micro_batch_size;
  double time = 0;
  friend bool operator==(const OptimizerStep&, const OptimizerStep&) = default;
};

struct ProfileSpec {
  std::string file;    // where it was read from; empty when made in code
  int model_line = 0;  // the line of its `model` field
  std::string device;  // device type, as in the cluster (e.g. A100-40GB)
  ProfileModel model;
  std::vector<ProfileRow> units;
  std::vector<OptimizerStep> optimizer_step;  // empty when not measured
  std::vector<std::string> assumptions;       // what the numbers take for granted, in sentences
  std::map<LinkClass, LinkSpec> links;        // fitted alpha-beta per link class
  // Whether the times include the TP and CP collectives of their shape (`collectives:
  // included`, the default: profiles measured in a TP/CP-parallel framework, Megatron's) or are
  // one shard's compute alone (`collectives: excluded`: hetexec profile), which the cost model
  // then adds from the links.
  bool collectives_included = true;
  // hetexec's TCP transport between two ranks of the profiled machine (`transport:`, measured by
  // `hetexec profile` over loopback): what every message of a run with emulated links pays on top
  // of the link it emulates (hetplan simulate --time-dilation composes the two).
  std::optional<LinkSpec> transport;
};

Result<ProfileSpec> read_profile(const input::Document& doc);
Result<ProfileSpec> load_profile(const std::string& file);
// Comments written with a profile: the header as comment lines first; a unit row's and an
// optimizer-step row's comment (when the function is given and returns text) after the row,
// on its line (e.g. how precisely it was measured).
struct ProfileComments {
  std::string header;
  std::function<std::string(const ProfileRow&)> row;
  std::function<std::string(const OptimizerStep&)> optimizer_step;
};
// profile.yaml text.
std::string write_profile(const ProfileSpec& profile, const ProfileComments& comments);
std::string write_profile(const ProfileSpec& profile, const std::string& header_comment);

// One diagnostic per dimension in which the profile's model differs from `model` (at the
// profile's file and `model` line, path model.FIELD, both values named; `model_name` says
// where the model came from); empty when the profile can serve the model. Dimensions the
// profile does not record are not compared.
Diagnostics profile_mismatch(const ProfileSpec& profile, const ModelSpec& model, const std::string& model_name);

}  // namespace het
