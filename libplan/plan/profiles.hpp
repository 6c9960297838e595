#pragma once
// The profiles a plan is costed with (docs/plan-format.md, "Profiles").
//
// `hetplan search` and `simulate` record in the plan, for each device type of its cluster
// that a profile costs, the profile itself and the SHA-256 of its file, so that simulate,
// show, check and diff reproduce the prediction from the plan file alone. A profile given
// on the command line replaces the plan's for its device type.
//
// A profile is "unavailable" when the plan was predicted with it but holds only its digest
// (someone removed the content) or, for plans written before plans embedded their
// profiles, when the recorded prediction says a device type was costed from a profile, and
// no given file covers that device type: its costs are then analytic and the prediction
// cannot be reproduced, which the tools say (and `hetplan check` fails).
#include <set>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "plan/plan.hpp"
#include "spec/profile.hpp"

namespace het {

// A profile file read as a plan embeds it: the device, the SHA-256 of the file's bytes, the
// document and the profile. Errors: the file's, with its lines, as load_profile() gives them.
struct ProfileFile {
  std::string file;  // as given, for sentences
  PlanProfile profile;
};
Result<ProfileFile> load_profile_file(const std::string& file);

struct ProfileChoice {
  std::vector<PlanProfile> used;         // one per device type of the cluster that has one: what the plan records
  std::vector<PlanProfile> unavailable;  // see above; sha256 empty when the plan recorded no digest
  std::vector<std::string> notes;        // sentences: a given profile replaced the plan's, or the plan's was not used and why
  std::vector<ProfileSpec> specs() const;  // `used`, for the cost model
};

// For each device type of the plan's cluster, in its subclusters' order: the last of `given`
// for that device type, else the plan's embedded one if it was measured for the plan's model
// (else a note). Given profiles for device types the cluster does not have are left out
// silently. Errors: a given profile measured for other model dimensions (profile_mismatch(),
// `model_name` saying where the model came from).
Result<ProfileChoice> choose_profiles(const Plan& plan, const std::vector<ProfileFile>& given,
                                      const std::string& model_name);

// The device types (in `cluster`) of the stages that a recorded prediction costed from a
// profile rather than analytically.
std::set<std::string> profiled_device_types(const Prediction& recorded, const ClusterSpec& cluster);

// "the plan was predicted with a profile for A100-40GB (sha256 …) that is not available
// (neither embedded in the plan nor given with --profile); its costs are analytic"
std::string unavailable_sentence(const PlanProfile& profile);

}  // namespace het
