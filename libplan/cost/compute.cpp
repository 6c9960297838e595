#include "cost/compute.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "cost/flops.hpp"

namespace het::cost {

const char* to_string(Source s) {
  switch (s) {
    case Source::profile: return "profile";
    case Source::interpolated: return "interpolated";
    case Source::extrapolated: return "extrapolated";
    case Source::analytic: return "analytic";
  }
  return "?";
}

ComputeModel::ComputeModel(const ModelSpec& model, std::vector<ProfileSpec> profiles) : model_(model) {
  for (auto& p : profiles) {
    if (auto why = profile_mismatch(p, model, "the model"); !why.empty()) {
      std::string fields;
      for (const auto& d : why) fields += (fields.empty() ? "" : "; ") + d.message;
      notes_.push_back("profile for " + p.device + " not used: " + fields);
      continue;
    }
    for (const auto& a : p.assumptions) notes_.push_back("profile for " + p.device + " assumes: " + a);
    profiles_.push_back(std::move(p));
  }
}

ComputeModel ComputeModel::at_length(int length) const {
  ComputeModel out = *this;
  out.model_ = het::at_length(model_, length);
  return out;
}

bool ComputeModel::has_profile(const std::string& device_type) const {
  return std::any_of(profiles_.begin(), profiles_.end(), [&](const ProfileSpec& p) { return p.device == device_type; });
}

std::optional<double> ComputeModel::optimizer_step(const std::string& device_type, int tp) const {
  const ProfileSpec* profile = nullptr;
  for (const auto& p : profiles_)
    if (p.device == device_type && !p.optimizer_step.empty()) profile = &p;
  if (profile == nullptr) return std::nullopt;
  const auto& steps = profile->optimizer_step;
  if (!steps.front().tp) return steps.front().time;  // the single time of every tp
  auto distance = [&](int measured) { return std::fabs(std::log2(double(measured) / tp)); };
  int nearest = *steps.front().tp;
  for (const auto& s : steps)
    if (distance(*s.tp) < distance(nearest) || (distance(*s.tp) == distance(nearest) && *s.tp > nearest))
      nearest = *s.tp;
  std::vector<double> times;
  for (const auto& s : steps)
    if (*s.tp == nearest) times.push_back(s.time);
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  const double median = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  return median * nearest / tp;
}

UnitCost ComputeModel::analytic(UnitKind kind, const DeviceSpec& d, int tp, int cp, double b, int seq) const {
  UnitCost c;
  const double rate = d.peak * (d.efficiency > 0 ? d.efficiency : kDefaultEfficiency);
  // A layer's work is split over its TP shards and context members; the embedding's and the
  // head's over the context members only: every TP shard of both backends computes them whole
  // (model/stage.cpp, backend/cuda/stage.cpp: no vocabulary-parallel head yet).
  const double s = seq, shard = double(tp) * cp;
  double fwd_flops = 0, split = shard;
  switch (kind) {
    case UnitKind::layer: fwd_flops = layer_forward_flops(model_, b, s); break;
    case UnitKind::attn: fwd_flops = attn_forward_flops(model_, b, s); break;
    case UnitKind::mlp: fwd_flops = mlp_forward_flops(model_, b, s); break;
    case UnitKind::head: fwd_flops = head_forward_flops(model_, b, s), split = cp; break;
    case UnitKind::embedding: {
      const double bytes = 2 * b * s * model_.hidden_size * dtype_bytes(model_.dtype) / cp;
      c.forward_s = bytes / d.mem_bandwidth;
      c.backward_s = 2 * c.forward_s;
      c.recompute_full_s = c.forward_s;
      return c;
    }
  }
  c.forward_s = fwd_flops / split / rate;
  c.backward_s = 2 * c.forward_s;
  c.recompute_full_s = c.forward_s;
  if (kind == UnitKind::layer || kind == UnitKind::attn)
    c.recompute_selective_s = attention_core_flops(model_, b, s) / shard / rate;
  return c;
}

UnitCost ComputeModel::unit(UnitKind kind, const DeviceSpec& device, int tp, int cp, double b) const {
  const int seq = model_.seq_length;
  const ProfileSpec* profile = nullptr;
  for (const auto& p : profiles_)
    if (p.device == device.type) profile = &p;
  const UnitCost model_cost = analytic(kind, device, tp, cp, b, seq);
  if (profile == nullptr) return model_cost;

  // Sublayer units from whole-layer rows: split by the analytic FLOP fractions.
  UnitKind row_kind = kind;
  double fraction = 1;
  auto has_rows = [&](UnitKind k) {
    return std::any_of(profile->units.begin(), profile->units.end(), [&](const ProfileRow& r) { return r.unit == k; });
  };
  if ((kind == UnitKind::attn || kind == UnitKind::mlp) && !has_rows(kind) && has_rows(UnitKind::layer)) {
    row_kind = UnitKind::layer;
    const double part = kind == UnitKind::attn ? attn_forward_flops(model_, b, seq) : mlp_forward_flops(model_, b, seq);
    fraction = part / layer_forward_flops(model_, b, seq);
  }
  // Rows grouped by shape; the exact shape if measured, else the nearest one in log space.
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::vector<const ProfileRow*>> groups;
  for (const auto& r : profile->units)
    if (r.unit == row_kind) groups[{r.tp, r.cp, r.seq_length}].push_back(&r);
  if (groups.empty()) return model_cost;
  const Key want{tp, cp, seq};
  auto distance = [&](const Key& k) {
    return std::fabs(std::log2(double(std::get<0>(k)) / tp)) + std::fabs(std::log2(double(std::get<1>(k)) / cp)) +
           std::fabs(std::log2(double(std::get<2>(k)) / seq));
  };
  auto best = groups.begin();
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (distance(it->first) < distance(best->first)) best = it;
  auto rows = best->second;
  std::sort(rows.begin(), rows.end(), [](auto* x, auto* y) { return x->micro_batch_size < y->micro_batch_size; });

  UnitCost c;
  c.includes_tp_comm = c.includes_cp_comm = profile->collectives_included;
  c.source = best->first == want ? Source::profile : Source::extrapolated;
  // Linear in the micro-batch size between (or beyond) the two nearest measured sizes.
  auto at = [&](auto field) {
    if (rows.size() == 1) return field(*rows[0]) * b / rows[0]->micro_batch_size;
    std::size_t hi = 1;
    while (hi + 1 < rows.size() && rows[hi]->micro_batch_size < b) ++hi;
    const ProfileRow& r0 = *rows[hi - 1];
    const ProfileRow& r1 = *rows[hi];
    const double x0 = r0.micro_batch_size, x1 = r1.micro_batch_size;
    return std::max(0.0, field(r0) + (field(r1) - field(r0)) * (b - x0) / (x1 - x0));
  };
  c.forward_s = at([](const ProfileRow& r) { return r.forward; });
  c.backward_s = at([](const ProfileRow& r) { return r.backward; });
  c.recompute_full_s = at([](const ProfileRow& r) { return r.recompute.value_or(r.forward); });
  const bool exact_b = std::any_of(rows.begin(), rows.end(), [&](auto* r) { return r->micro_batch_size == b; });
  const bool inside = b >= rows.front()->micro_batch_size && b <= rows.back()->micro_batch_size;
  if (c.source == Source::profile && !exact_b) c.source = inside ? Source::interpolated : Source::extrapolated;
  if (best->first != want) {
    // Scale a neighbouring shape by the analytic ratio of the two shapes' times.
    const UnitCost there = analytic(kind, device, std::get<0>(best->first), std::get<1>(best->first), b, std::get<2>(best->first));
    const double ratio = there.forward_s > 0 ? model_cost.forward_s / there.forward_s : 1;
    c.forward_s *= ratio, c.backward_s *= ratio, c.recompute_full_s *= ratio;
    c.includes_tp_comm = profile->collectives_included && std::get<0>(best->first) == tp;
    c.includes_cp_comm = profile->collectives_included && std::get<1>(best->first) == cp;
  }
  c.forward_s *= fraction, c.backward_s *= fraction, c.recompute_full_s *= fraction;
  // Selective recomputation: the attention core's share of the measured forward.
  if (kind == UnitKind::layer || kind == UnitKind::attn)
    c.recompute_selective_s = c.forward_s * model_cost.recompute_selective_s / std::max(1e-30, model_cost.forward_s);
  return c;
}

}  // namespace het::cost
