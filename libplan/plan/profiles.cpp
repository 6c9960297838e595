#include "plan/profiles.hpp"

#include <algorithm>
#include <set>

#include "digest/digest.hpp"
#include "input/input.hpp"

namespace het {

Result<ProfileFile> load_profile_file(const std::string& file) {
  auto bytes = input::read_file(file);
  if (!bytes) return bytes.errors();
  auto doc = input::parse(*bytes, file);
  if (!doc) return doc.errors();
  auto profile = read_profile(*doc);
  if (!profile) return profile.errors();
  PlanProfile p;
  p.device = profile->device;
  p.sha256 = sha256_hex(*bytes);
  p.document = input::to_json(doc->root);
  p.profile = std::move(*profile);
  return ProfileFile{file, std::move(p)};
}

std::vector<ProfileSpec> ProfileChoice::specs() const {
  std::vector<ProfileSpec> out;
  for (const auto& p : used) out.push_back(*p.profile);
  return out;
}

std::set<std::string> profiled_device_types(const Prediction& recorded, const ClusterSpec& cluster) {
  std::set<std::string> types;
  for (const auto& st : recorded.per_stage) {
    // per_stage is the simulator's free-form detail: read it without trusting its types.
    if (!st.is_object() || !st.contains("subcluster") || !st["subcluster"].is_string() || !st.contains("source") ||
        !st["source"].is_string() || st["source"] == "analytic")
      continue;
    if (const SubclusterSpec* sub = cluster.find(st["subcluster"].get<std::string>())) types.insert(sub->device.type);
  }
  return types;
}

Result<ProfileChoice> choose_profiles(const Plan& plan, const std::vector<ProfileFile>& given,
                                      const std::string& model_name) {
  Diagnostics errors;
  for (const auto& g : given) {
    const Diagnostics why = profile_mismatch(*g.profile.profile, plan.model, model_name);
    errors.insert(errors.end(), why.begin(), why.end());
  }
  if (!errors.empty()) return errors;
  const std::set<std::string> profiled =
      plan.predicted ? profiled_device_types(*plan.predicted, plan.cluster) : std::set<std::string>{};
  ProfileChoice out;
  std::vector<std::string> types;
  for (const auto& s : plan.cluster.subclusters)
    if (std::find(types.begin(), types.end(), s.device.type) == types.end()) types.push_back(s.device.type);
  for (const auto& type : types) {
    const ProfileFile* chosen = nullptr;
    for (const auto& g : given)
      if (g.profile.device == type) chosen = &g;
    auto recorded = std::find_if(plan.profiles.begin(), plan.profiles.end(),
                                 [&](const PlanProfile& p) { return p.device == type; });
    const bool has_recorded = recorded != plan.profiles.end();
    if (chosen) {
      const std::string& sha = chosen->profile.sha256;
      if (has_recorded && recorded->sha256 != sha)
        out.notes.push_back("profile for " + type + ": " + chosen->file + " (sha256 " + sha + ")" +
                            (recorded->profile ? ", replacing the plan's (sha256 " + recorded->sha256 + ")"
                                               : "; the plan was predicted with sha256 " + recorded->sha256 +
                                                     ", which it does not embed"));
      out.used.push_back(chosen->profile);
    } else if (has_recorded && recorded->profile) {
      if (auto why = profile_mismatch(*recorded->profile, plan.model, model_name); !why.empty())
        out.notes.push_back("the plan's profile for " + type + " not used: " + why.front().message);
      else
        out.used.push_back(*recorded);
    } else if (has_recorded) {
      out.unavailable.push_back(*recorded);
    } else if (profiled.count(type)) {
      PlanProfile p;
      p.device = type;
      out.unavailable.push_back(std::move(p));
    }
  }
  return out;
}

std::string unavailable_sentence(const PlanProfile& p) {
  if (p.sha256.empty())
    return "the plan's recorded prediction costed " + p.device +
           " from a profile that the plan does not record and no --profile gives; its costs are now analytic";
  return "the plan was predicted with a profile for " + p.device + " (sha256 " + p.sha256 +
         ") that is not available (neither embedded in the plan nor given with --profile); its costs are now analytic";
}

}  // namespace het
