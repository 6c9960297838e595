#include "predict/stage_cost.hpp"

#include <algorithm>
#include <map>

#include "cost/comm.hpp"

namespace het::predict {

Placement place(const Stage& s, const ClusterSpec& cluster) {
  Placement p;
  p.sub = cluster.find(s.subcluster);
  std::map<int, int> count;
  for (const auto& d : s.devices) ++count[d.node];
  p.nodes = static_cast<int>(count.size());
  for (auto [node, n] : count) p.per_node = std::max(p.per_node, n);
  for (std::size_t g = 0; g + s.tp <= s.devices.size(); g += s.tp)
    for (int k = 1; k < s.tp; ++k)
      if (s.devices[g + k].node != s.devices[g].node) p.tp_in_node = false;
  return p;
}

LinkSpec group_link(const Placement& p, bool within_node) {
  if (within_node || !p.sub->inter_node) return p.sub->intra_node;
  return cost::shared(*p.sub->inter_node, p.per_node);
}

UnitCounts count_units(const Plan& plan, const Stage& s) {
  UnitCounts c;
  const int last_unit = num_units(plan.model, plan.granularity) - 1;
  for (int u = s.first; u <= s.last; ++u) {
    if (u == 0) c.embedding = true;
    else if (u == last_unit) c.head = true;
    else if (plan.granularity == Granularity::layer) ++c.full_layers;
    else if ((u - 1) % 2 == 0) ++c.attn;
    else ++c.mlp;
  }
  c.layers = c.full_layers + 0.5 * (c.attn + c.mlp);
  return c;
}

double stage_parameters(const ModelSpec& m, const UnitCounts& c) {
  const double h = m.hidden_size, v = m.vocab_size;
  const double layer = static_cast<double>(layer_parameter_count(m));
  double p = c.layers * layer;
  if (c.embedding) p += v * h + (m.architecture == Architecture::gpt ? double(m.seq_length) * h : 0);
  if (c.head) p += m.architecture == Architecture::gpt ? 2 * h : h + v * h;
  return p;
}

cost::StageShape shape_of(const Plan& plan, const Pipeline& p, const Stage& s, int zero_dp, int in_flight) {
  const UnitCounts units = count_units(plan, s);
  cost::StageShape shape;
  shape.parameters = stage_parameters(plan.model, units);
  shape.layers = units.layers;
  shape.has_head = units.head;
  shape.tp = s.tp;
  shape.cp = s.cp;
  shape.zero_dp = zero_dp;
  shape.sequences = double(p.micro_batch_size) / s.dp;
  shape.in_flight = in_flight;
  shape.recompute = s.recompute;
  return shape;
}

Hop hop(const Stage& a, const Stage& b, const Placement& pa, const Placement& pb, const ClusterSpec& cluster,
        double bytes, const Options& opt, double sharers) {
  const bool cross = a.subcluster != b.subcluster;
  const int da = static_cast<int>(a.devices.size()), db = static_cast<int>(b.devices.size());
  // The link and how many independent paths it offers.
  LinkSpec link;
  int paths = 1;
  bool same_node = !cross && pa.nodes == 1 && pb.nodes == 1 && a.devices[0].node == b.devices[0].node;
  if (cross) {
    link = cost::shared(cluster.link_between(a.subcluster, b.subcluster), sharers);
    paths = std::min(pa.nodes, pb.nodes);  // the link bandwidth is per node
  } else if (same_node) {
    link = pa.sub->intra_node;
    paths = std::min(da, db);  // each device has its own intra-node link
  } else {
    link = cost::shared(pa.sub->inter_node.value_or(pa.sub->intra_node), sharers);
    paths = std::min(pa.nodes, pb.nodes);
  }
  const double host = cross ? 2 * bytes / std::min(da, db) / opt.host_bandwidth : 0;  // D2H + H2D
  const LinkSpec recv_link = group_link(pb, pb.tp_in_node);
  const LinkSpec send_link = group_link(pa, pa.tp_in_node && pa.nodes == 1);
  const double recv_shard = bytes / (double(b.dp) * b.cp);  // what one receiver TP group needs

  auto make = [&](Resharding r) {
    Hop h;
    h.strategy = r;
    switch (r) {
      case Resharding::all_pairs:  // every receiver rank gets its shard straight from the senders
        h.cross_bytes = bytes * b.tp;
        h.seconds = link.latency * std::max(1, da / std::max(1, db)) + h.cross_bytes / (paths * link.bandwidth) + host;
        break;
      case Resharding::gather_send_scatter:  // one sender, one path, one receiver
        h.cross_bytes = bytes;
        h.seconds = cost::allgather_s(bytes, da / a.tp, send_link) + cost::p2p_s(bytes, link) +
                    cost::allgather_s(bytes, db, recv_link) + 2 * bytes / opt.host_bandwidth * (cross ? 1 : 0);
        break;
      case Resharding::inner_dp_rank0: {  // each replica's rank 0 sends its shard; broadcast in the TP group
        h.cross_bytes = bytes;
        const int p = std::min({paths, a.dp, b.dp});
        h.seconds = link.latency + bytes / (std::max(1, p) * link.bandwidth) + cost::p2p_s(b.tp > 1 ? recv_shard : 0, recv_link) + host;
        break;
      }
      case Resharding::send_recv_allgather:  // every sender rank sends 1/tp; receivers all-gather
      case Resharding::cheapest:
        h.strategy = Resharding::send_recv_allgather;
        h.cross_bytes = bytes;
        h.seconds = link.latency + bytes / (paths * link.bandwidth) + cost::allgather_s(recv_shard, b.tp, recv_link) + host;
        break;
    }
    return h;
  };
  if (opt.resharding != Resharding::cheapest) return make(opt.resharding);
  Hop best = make(Resharding::send_recv_allgather);
  for (auto r : {Resharding::all_pairs, Resharding::gather_send_scatter, Resharding::inner_dp_rank0}) {
    Hop h = make(r);
    if (h.seconds < best.seconds) best = h;
  }
  return best;
}

int source_rank(cost::Source s) {
  switch (s) {
    case cost::Source::profile: return 0;
    case cost::Source::interpolated: return 1;
    case cost::Source::extrapolated: return 2;
    case cost::Source::analytic: return 3;
  }
  return 3;
}

UnitTimes unit_times(const ModelSpec& m, const cost::ComputeModel& compute, UnitKind kind, const Placement& pl, int tp,
                     int cp, Recompute recompute, double b) {
  const cost::UnitCost u = compute.unit(kind, pl.sub->device, tp, cp, b);
  UnitTimes t{u.forward_s, u.backward_s, u.source};
  const bool block = kind != UnitKind::embedding && kind != UnitKind::head;
  if (block && recompute == Recompute::full) t.backward_s += u.recompute_full_s;
  if (block && recompute == Recompute::selective) t.backward_s += u.recompute_selective_s;
  if (block && !u.includes_tp_comm) {
    const double share = kind == UnitKind::layer ? 1.0 : 0.5;  // attn and mlp each carry half a layer's
    // TP: 2 all-reduces of the activation per layer forward, 2 backward (Megatron; with
    // sequence parallelism the all-gather/reduce-scatter pairs move the same bytes).
    const double act = b * double(m.seq_length) * m.hidden_size * dtype_bytes(m.dtype) / cp;
    const double tp_s = share * 2 * cost::allreduce_s(act, tp, group_link(pl, pl.tp_in_node));
    // CP: K/V all-gather per layer forward, reduce-scatter of their gradients backward.
    const double kv = 2 * b * m.seq_length * double(m.hidden_size) * m.num_kv_heads / m.num_attention_heads *
                      dtype_bytes(m.dtype) / tp;
    const double cp_s = share * cost::allgather_s(kv, cp, group_link(pl, pl.nodes == 1));
    t.forward_s += tp_s + cp_s;
    t.backward_s += tp_s + cp_s;
  }
  return t;
}

}  // namespace het::predict
