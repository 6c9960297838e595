#include "runtime/runtime.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>

#include <csignal>
#include <cstdio>
#include <random>

#include <unistd.h>

#include "model/stage.hpp"
#include "runtime/buckets.hpp"
#include "runtime/checkpoints.hpp"
#include "runtime/pace.hpp"
#include "runtime/sync_plan.hpp"
#include "plan/plan_io.hpp"
#include "predict/predict.hpp"
#include "schedule/schedule.hpp"

namespace het::runtime {

namespace {

// A failure deep in a step (a transport error, a broken invariant), carried to run_rank.
struct Failure {
  Diagnostic why;
};

void check(const Result<Done>& done) {
  if (!done) throw Failure{done.errors().front()};
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

enum Tag : std::uint32_t {
  kActivation = 1, kGradient = 2, kTensorParallel = 3, kSync = 4, kLoss = 5, kContext = 6, kMemory = 7, kCheckpoint = 8, kSwitch = 9,
  kLinks = 10
};

// ---- Moving a micro-batch between stages: the program's messages --------------------------

// Part of a micro-batch's tensor a rank holds: `block`, row-major (rows, time, channels).
struct Piece {
  program::Block block;
  std::vector<float> data;
};

// Copies `region` (inside both blocks) from a tensor laid out as `from` to one laid out as `to`.
void copy_region(const float* src, const program::Block& from, float* dst, const program::Block& to,
                 const program::Block& region) {
  const std::size_t run = std::size_t(region.c1 - region.c0);
  for (int r = region.r0; r < region.r1; ++r)
    for (int t = region.t0; t < region.t1; ++t) {
      const std::size_t s = (std::size_t(r - from.r0) * std::size_t(from.t1 - from.t0) + std::size_t(t - from.t0)) *
                                std::size_t(from.c1 - from.c0) + std::size_t(region.c0 - from.c0);
      const std::size_t d = (std::size_t(r - to.r0) * std::size_t(to.t1 - to.t0) + std::size_t(t - to.t0)) *
                                std::size_t(to.c1 - to.c0) + std::size_t(region.c0 - to.c0);
      std::copy_n(src + s, run, dst + d);
    }
}

// Fills `want` from the pieces held (on the host or the device), `copy(piece, region)` copying
// each overlap; every element of it must be held exactly once.
template <class Held, class Copy>
void fill(const std::vector<Held>& held, const program::Block& want, Copy&& copy, const char* where) {
  std::size_t filled = 0;
  for (const Held& p : held) {
    const program::Block region = p.block & want;
    if (region.empty()) continue;
    copy(p, region);
    filled += region.elements();
  }
  if (filled != want.elements())
    throw Failure{failure(ErrorKind::internal, "the resharding program left " + std::to_string(want.elements()) +
                                                   " elements covered by " + std::to_string(filled) + where)};
}

// `want` assembled from the pieces held.
std::vector<float> assemble(const std::vector<Piece>& held, const program::Block& want) {
  std::vector<float> out(want.elements());
  fill(held, want, [&](const Piece& p, const program::Block& region) { copy_region(p.data.data(), p.block, out.data(), want, region); },
       "");
  return out;
}

// The rank a hop's receiver waits for first: the sender of its first incoming message; -1 if none.
int first_sender(const program::HopPart& hop) {
  for (std::size_t i = 0; i < hop.messages.size(); ++i)
    if (hop.messages[i].to == hop.me) return hop.from_rank[i];
  return -1;
}

// This rank's part of one hop, phase by phase: first what it sends (from what it held before
// the phase; sends never block), then what it receives, which it holds from then on.
void run_hop(transport::Peers& peers, std::uint32_t tag, const program::HopPart& hop, std::vector<Piece>& held) {
  const auto& msgs = hop.messages;
  for (std::size_t lo = 0, hi = 0; lo < msgs.size(); lo = hi) {
    while (hi < msgs.size() && msgs[hi].phase == msgs[lo].phase) ++hi;
    for (std::size_t k = lo; k < hi; ++k)
      if (msgs[k].from == hop.me) {
        const std::vector<float> data = assemble(held, msgs[k].block);
        peers.send(hop.to_rank[k], tag, data.data(), data.size() * sizeof(float));
      }
    for (std::size_t k = lo; k < hi; ++k)
      if (msgs[k].to == hop.me) {
        Piece p{msgs[k].block, std::vector<float>(msgs[k].block.elements())};
        check(peers.recv(hop.from_rank[k], tag, p.data.data(), p.data.size() * sizeof(float)));
        held.push_back(std::move(p));
      }
  }
}

// ---- Moving a micro-batch on the device (issue 21 step 3) ------------------------------------
// Where a stage's backend keeps activations on the device and every rank of two neighbouring
// stages sits on a GPU of one subcluster, the boundary's messages (the same program) go as NCCL
// point-to-point between device tensors in bf16 — the bytes the planner costs — never through
// the host. Sends are enqueued and not waited for, as TCP sends never block (so the schedule
// cannot deadlock on them); the tensors they read are kept until their group is idle.

// A boundary's NCCL group as a hop sees it: member i is ranks[i].
struct DeviceLink {
  collective::Group* group = nullptr;  // null: the hop goes through the host
  std::vector<int> ranks;
  int member(int rank) const { return int(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin()); }
};

struct DevicePiece {
  program::Block block;
  backend::DeviceTensor data;
};

// Tensors a send still reads, with the group that sends them.
using InTransit = std::vector<std::pair<collective::Group*, backend::DeviceTensor>>;

// `want` from the device pieces held: the piece itself where one is exactly it, else copied
// together.
backend::DeviceTensor assemble_device(backend::Stage& stage, const std::vector<DevicePiece>& held, const program::Block& want) {
  for (const DevicePiece& p : held)
    if (p.block == want) return p.data;
  backend::DeviceTensor out = stage.device_tensor(want.elements());
  fill(held, want, [&](const DevicePiece& p, const program::Block& region) { stage.copy_device(p.data, p.block, out, want, region); },
       " on the device");
  return out;
}

// run_hop on the device: each phase one exchange of the rank's sends and receives, waited for
// where it receives; a phase of sends only is enqueued, its tensors left in `in_transit`.
void run_hop_device(backend::Stage& stage, const DeviceLink& link, const program::HopPart& hop, std::vector<DevicePiece>& held,
                    InTransit& in_transit, std::uint64_t& sent, std::uint64_t& received) {
  const auto& msgs = hop.messages;
  for (std::size_t lo = 0, hi = 0; lo < msgs.size(); lo = hi) {
    while (hi < msgs.size() && msgs[hi].phase == msgs[lo].phase) ++hi;
    std::vector<collective::Group::Transfer> ops;
    std::vector<backend::DeviceTensor> outgoing;
    std::vector<DevicePiece> incoming;
    for (std::size_t k = lo; k < hi; ++k)
      if (msgs[k].from == hop.me) {
        backend::DeviceTensor t = assemble_device(stage, held, msgs[k].block);
        ops.push_back({collective::Group::Transfer::send, link.member(hop.to_rank[k]), t.data, t.elements});
        sent += t.elements * 2;  // bf16
        outgoing.push_back(std::move(t));
      }
    for (std::size_t k = lo; k < hi; ++k)
      if (msgs[k].to == hop.me) {
        backend::DeviceTensor t = stage.device_tensor(msgs[k].block.elements());
        ops.push_back({collective::Group::Transfer::recv, link.member(hop.from_rank[k]), t.data, t.elements});
        received += t.elements * 2;
        incoming.push_back({msgs[k].block, std::move(t)});
      }
    const bool wait = !incoming.empty();
    check(link.group->exchange_on_device(ops, wait));
    if (!wait)
      for (auto& t : outgoing) in_transit.emplace_back(link.group, std::move(t));
    for (auto& p : incoming) held.push_back(std::move(p));
  }
}

// The ranks of stages s and s + 1 of pipeline p, in increasing order.
std::vector<int> boundary_ranks(const program::Topology& topo, const Pipeline& pipe, int p, int s) {
  std::vector<int> ranks;
  for (int k : {s, s + 1})
    for (std::size_t i = 0; i < pipe.stages[std::size_t(k)].devices.size(); ++i) ranks.push_back(topo.rank(p, k, int(i)));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// After the step's last backward: every bucket's gradients summed over its group (buckets.hpp),
// AdamW on the owned part of every bucket, and with ZeRO the updated parts all-gathered.
// `record(name, start[, computed])` traces the three phases (the optimizer's with its compute).
// `at(activity, what)` tells the watchdog where the rank is. The caller has begun the pace's
// "sync" operation (the packing is the device's compute; the ZeRO gather's unpacking is not
// in the profile's optimizer step and runs outside an operation).
template <class Record, class At>
void sync_and_update(std::vector<Bucket>& buckets, bool zero, const model::AdamW& adamw, int step, Pace& pace, Record&& record, At&& at) {
  at(progress::Activity::collective, "sync");
  double start = now_s();
  for (auto& b : buckets) {
    pack_gradients(b);
    if (b.group.size() > 1) check(pace.wait([&] { return sum_gradients(b, zero); }));
  }
  pace.end();  // the "sync" operation the caller began: the gradients made whole and packed
  record("sync", start);
  at(progress::Activity::computing, "optimizer");
  pace.begin("optimizer");
  start = now_s();
  const double computed = pace.computed_s();
  for (auto& b : buckets) update(b, adamw, step + 1, zero);
  pace.end();
  record("optimizer", start, computed);
  if (!zero) return;
  at(progress::Activity::collective, "gather");
  start = now_s();
  for (auto& b : buckets) {
    if (b.group.size() <= 1) continue;
    check(pace.wait([&] { return gather_values(b); }));
    unpack_values(b);
  }
  record("gather", start);
}

// The step's loss on rank 0: the sum of the partials of the ranks that hold one (TP shard 0 of
// every last-stage block); 0 elsewhere.
double gather_loss(transport::Peers& peers, const program::Topology& topo, double mine, std::uint32_t tag) {
  std::vector<int> holders;
  for (int r = 0; r < topo.ranks(); ++r) {
    const auto& pl = topo.place(r);
    if (pl.shard == 0 && pl.stage + 1 == int(topo.pipeline_of(r).stages.size())) holders.push_back(r);
  }
  const int me = peers.rank();
  const bool holds = std::find(holders.begin(), holders.end(), me) != holders.end();
  if (me != 0) {
    if (holds) peers.send(0, tag, &mine, sizeof mine);
    return 0;
  }
  double total = holds ? mine : 0;
  for (int r : holders) {
    if (r == 0) continue;
    double part = 0;
    check(peers.recv(r, tag, &part, sizeof part));
    total += part;
  }
  return total;
}

// The checkpoint of step `next` (checkpoint/checkpoint.hpp): every rank writes what it owns and
// reports it to rank 0 (the length of its answer, then the answer's JSON text), which commits
// once every answer is in. Rank 0 returns the checkpoint's directory and bytes; others nothing.
template <class At>
std::optional<checkpoint::Committed> save_checkpoint(transport::Peers& peers, const std::vector<Bucket>& buckets, bool zero,
                                                                      const Options::Checkpointing& c, int next, Pace& pace, At&& at) {
  const int me = peers.rank();
  at(progress::Activity::computing, "checkpoint");
  // Every chunk written is progress for the watchdog: a large checkpoint on a slow disk is not a
  // hang. A test's fault kills the rank halfway through its file.
  const bool die = c.die_while_saving == next;
  auto answer = checkpoint::write_rank(c.dir, next, me, checkpoint_pieces(buckets, me, zero), [&](std::uint64_t written, std::uint64_t total) {
    at(progress::Activity::computing, "checkpoint");
    if (die && 2 * written >= total && written < total) std::raise(SIGKILL);
  });
  if (!answer) throw Failure{answer.errors().front()};
  if (me != 0) {
    const std::string text = answer->dump();
    const std::uint64_t length = text.size();
    peers.send(0, kCheckpoint, &length, sizeof length);
    peers.send(0, kCheckpoint, text.data(), text.size());
    return std::nullopt;
  }
  std::vector<nlohmann::json> ranks{*answer};
  for (int r = 1; r < peers.world(); ++r) {
    at(progress::Activity::receiving, "checkpoint", r);
    std::uint64_t length = 0;
    check(pace.wait([&] { return peers.recv(r, kCheckpoint, &length, sizeof length); }));
    if (length > (std::uint64_t{1} << 30))
      throw Failure{failure(ErrorKind::internal, "rank " + std::to_string(r) + " reported a checkpoint answer of " + std::to_string(length) + " bytes")};
    std::string text(length, '\0');
    check(pace.wait([&] { return peers.recv(r, kCheckpoint, text.data(), text.size()); }));
    ranks.push_back(nlohmann::json::parse(text, nullptr, false));
    if (ranks.back().is_discarded()) throw Failure{failure(ErrorKind::internal, "rank " + std::to_string(r) + " reported a corrupt checkpoint answer")};
  }
  nlohmann::json about = c.about;  // the caller's, the model and the plan
  about["world"] = peers.world();
  auto committed = checkpoint::commit(c.dir, next, about, ranks, c.keep);
  if (!committed) throw Failure{committed.errors().front()};
  return *committed;
}

// Every rank's memory peak on rank 0 (by rank); elsewhere `out` is the rank's own.
// Every rank's `mine`; all get back the common value when they all gave the same one, else -1.
Result<int> agree(transport::Peers& peers, int mine, std::uint32_t tag) {
  try {
    std::int32_t value = std::int32_t(mine);
    if (peers.rank() != 0) {
      peers.send(0, tag, &value, sizeof value);
      check(peers.flush());
      check(peers.recv(0, tag, &value, sizeof value));
      return int(value);
    }
    for (int r = 1; r < peers.world(); ++r) {
      std::int32_t theirs = 0;
      check(peers.recv(r, tag, &theirs, sizeof theirs));
      if (theirs != value) value = -1;
    }
    for (int r = 1; r < peers.world(); ++r) peers.send(r, tag, &value, sizeof value);
    check(peers.flush());
    return int(value);
  } catch (const Failure& f) {
    return f.why;
  }
}

// Every rank's `mine`, by rank, on rank 0; the others get their own only.
template <std::size_t N>
std::vector<std::array<double, N>> gather_to_root(transport::Peers& peers, const std::array<double, N>& mine, std::uint32_t tag) {
  if (peers.rank() != 0) {
    peers.send(0, tag, mine.data(), sizeof mine);
    check(peers.flush());
    return {mine};
  }
  std::vector<std::array<double, N>> all(std::size_t(peers.world()));
  all[0] = mine;
  for (int r = 1; r < peers.world(); ++r) check(peers.recv(r, tag, all[std::size_t(r)].data(), sizeof mine));
  return all;
}

void gather_memory(transport::Peers& peers, const MemoryPeak& mine, std::vector<MemoryPeak>& out) {
  const MemoryUse& a = mine.accounted;
  out.clear();
  for (const auto& v : gather_to_root<7>(peers, {a.parameters, a.gradients, a.optimizer, a.sync_buffers, a.activations, mine.heap, mine.device}, kMemory))
    out.push_back({{v[0], v[1], v[2], v[3], v[4]}, v[5], v[6]});
}

// ---- Emulating the plan's cluster on this machine ------------------------------------------

// Shapes every connection to the link class the plan's cluster gives the two ranks, dilated
// `dilation` times (bandwidth over it, latency times it), each on the link it loads in the cost
// model (predict/stage_cost.cpp), shared with the other connections that load it:
//   to another subcluster   the node's share of the link between the two (per node and
//                           subcluster it goes to; docs/inputs.md), shared by the node's ranks;
//   to another node         the node's NIC (inter_node), shared by the node's ranks;
//   within the node         the device's intra-node link, shared by the rank's connections.
// Ranks are processes: a node's links are in shared memory named after a token rank 0 sends
// every rank (tag kLinks), so that two jobs on one machine do not share them; the connections
// keep their links, whose names go with the last of them.
void shape_links(const Plan& plan, const program::Topology& topo, transport::Peers& peers, double dilation) {
  const int me = peers.rank();
  std::array<char, 32> token{};
  if (me == 0) {
    std::snprintf(token.data(), token.size(), "%d-%08x", int(::getpid()), unsigned(std::random_device{}()));
    for (int r = 1; r < peers.world(); ++r) peers.send(r, kLinks, token.data(), token.size());
  } else {
    check(peers.recv(0, kLinks, token.data(), token.size()));
  }
  const Stage& mine = topo.stage_of(me);
  const SubclusterSpec* sub = plan.cluster.find(mine.subcluster);
  const int my_node = topo.device_of(me).node;
  const std::string node = mine.subcluster + "/" + std::to_string(my_node);
  std::map<std::string, std::shared_ptr<transport::SharedLink>> links;  // by what the link is
  auto link_named = [&](const std::string& what) {
    auto& l = links[what];
    if (!l) {
      char name[64];
      std::snprintf(name, sizeof name, "/het-%s-%016zx", token.data(), std::hash<std::string>{}(what));
      auto opened = transport::SharedLink::open(name);
      if (!opened) throw Failure{opened.errors().front()};
      l = *opened;
    }
    return l;
  };
  std::shared_ptr<transport::SharedLink> device = transport::SharedLink::local();
  for (int r = 0; r < peers.world(); ++r) {
    if (r == me) continue;
    const Stage& other = topo.stage_of(r);
    const bool across = mine.subcluster != other.subcluster, same_node = !across && topo.device_of(r).node == my_node;
    const LinkSpec link = across      ? plan.cluster.link_between(mine.subcluster, other.subcluster)
                          : same_node ? sub->intra_node
                                      : sub->inter_node.value_or(sub->intra_node);
    auto shared = across ? link_named(node + " to " + other.subcluster) : same_node ? device : link_named(node + " nic");
    peers.shape(r, link.bandwidth / dilation, link.latency * dilation, std::move(shared));
  }
}

// How much slower than this machine the rank computes: the fastest device's peak over its own.
double device_slowdown(const Plan& plan, const Stage& stage) {
  double fastest = 0;
  for (const auto& sc : plan.cluster.subclusters) fastest = std::max(fastest, sc.device.peak);
  return fastest / plan.cluster.find(stage.subcluster)->device.peak;
}

// The rank's track in traces: the simulator's "p0 s1 compute" for the first shard of the
// first replica, with the replica, member and shard otherwise.
std::string track_of(const program::Place& at, const Stage& st) {
  std::string t = "p" + std::to_string(at.pipeline) + " s" + std::to_string(at.stage);
  if (at.replica || at.context || at.shard)
    t += " d" + std::to_string(at.replica) + (st.cp > 1 ? " c" + std::to_string(at.context) : "") + " t" + std::to_string(at.shard);
  return t + " compute";
}

}  // namespace

std::uint32_t tag_of(Traffic t) {
  switch (t) {
    case Traffic::activations: return kActivation;
    case Traffic::gradients: return kGradient;
    case Traffic::tensor_parallel: return kTensorParallel;
    case Traffic::gradient_sync: return kSync;
    case Traffic::loss: return kLoss;
    case Traffic::context: return kContext;
  }
  return 0;
}

nlohmann::json traffic_report(const Plan& plan, const transport::Peers& peers, int steps, const Options::DeviceReport* device) {
  nlohmann::json measured = nlohmann::json::object();
  const std::pair<const char*, Traffic> kinds[] = {{"activations", Traffic::activations},   {"gradients", Traffic::gradients},
                                                   {"tensor_parallel", Traffic::tensor_parallel}, {"gradient_sync", Traffic::gradient_sync},
                                                   {"context", Traffic::context},           {"loss", Traffic::loss}};
  for (const auto& [name, kind] : kinds) {
    const auto c = peers.count(tag_of(kind));
    measured[name] = {{"sent", c.sent}, {"received", c.received}};
  }
  const program::Topology topo(plan);
  const program::StepTraffic t = program::step_traffic(plan, topo, peers.rank());
  const std::size_t f = sizeof(float) * std::size_t(steps);
  nlohmann::json report = {{"rank", peers.rank()},
                            {"measured", measured},
                            {"program",
                             {{"activations", {{"sent", f * t.activations.sent}, {"received", f * t.activations.received}}},
                              {"gradients", {{"sent", f * t.gradients.sent}, {"received", f * t.gradients.received}}}}}};
  if (device) {
    const backend::DeviceCounters& c = device->counters;
    report["device"] = {{"to_device_bytes", c.to_device_bytes},
                        {"to_host_bytes", c.to_host_bytes},
                        {"syncs", c.syncs},
                        {"compute_syncs", c.compute_syncs},
                        {"compute_syncs_other", c.compute_syncs_other},
                        {"activations", {{"sent", device->activations_sent}, {"received", device->activations_received}}},
                        {"gradients", {{"sent", device->gradients_sent}, {"received", device->gradients_received}}},
                        {"steps", device->steps}};
  }
  return report;
}

Plan with_derived_fields(const Plan& plan) {
  bool missing = false;
  for (const auto& p : plan.pipelines)
    for (std::size_t s = 0; s < p.stages.size(); ++s)
      missing |= !p.stages[s].warmup || (s + 1 < p.stages.size() && !p.stages[s].resharding);
  if (!missing) return plan;
  const cost::ComputeModel analytic(plan.model, {});
  auto predicted = predict::predict(plan, analytic, {});
  if (!predicted) return plan;  // the runtime's own defaults (1f1b warm-ups, all-pairs)
  Plan out = plan;
  for (std::size_t p = 0; p < out.pipelines.size(); ++p)
    for (std::size_t s = 0; s < out.pipelines[p].stages.size(); ++s) {
      Stage& st = out.pipelines[p].stages[s];
      const Stage& derived = predicted->plan.pipelines[p].stages[s];
      if (!st.warmup) st.warmup = derived.warmup;
      if (!st.resharding) st.resharding = derived.resharding;
    }
  return out;
}

std::string unsupported(const Plan& plan) {
  if (plan.granularity != Granularity::layer) return "the CPU runtime runs layer-granular plans only";
  if (!plan.model.seq_lengths.empty())
    return "the runtime trains sequences of one length; this plan's model has a sequence-length distribution "
           "(model.seq_lengths), which hetplan predicts but hetexec does not run yet";
  if (plan.model.training.zero_stage >= 3)
    return "ZeRO stage 3 (parameter partitioning) is not supported by the runtime; use zero_stage 0, 1 or 2";
  // Units held with different TP are synced in chunks of the finest sharding: its degree (the
  // lcm of the TP degrees) must split the heads, kv heads and MLP channels.
  std::map<int, int> finest;
  for (const auto& p : plan.pipelines)
    for (const auto& s : p.stages)
      for (int u = s.first; u <= s.last; ++u) finest[u] = std::lcm(finest.count(u) ? finest[u] : 1, s.tp);
  const ModelSpec& m = plan.model;
  for (auto [u, f] : finest)
    if (m.num_attention_heads % f || m.num_kv_heads % f || m.ffn_hidden_size % f)
      return "unit " + std::to_string(u) + " is held with TP degrees whose lcm " + std::to_string(f) +
             " does not divide the heads, kv heads and MLP channels; the gradient sync cannot chunk it";
  return "";
}

Result<std::vector<StepReport>> run_rank(const Plan& plan, transport::Peers& peers, backend::Backend& backend,
                                         const data::Batches& batches, const Options& opt,
                                         const std::function<void(const StepReport&)>& on_step) {
  // Where this rank is: stage st of pipeline pipe, block [row0, row0 + b) × [t0, t0 + Tl) of
  // each micro-batch.
  const program::Topology topo(plan);
  const int me = peers.rank();
  const program::Place here = topo.place(me);
  const Pipeline& pipe = plan.pipelines[std::size_t(here.pipeline)];
  const Stage& st = topo.stage_of(me);
  const int Tn = plan.model.seq_length, G = plan.model.training.global_batch_size;
  const int m = pipe.num_microbatches, mbs = pipe.micro_batch_size;
  int offset = 0;  // first sequence of this pipeline in the global batch
  for (int q = 0; q < here.pipeline; ++q)
    offset += plan.pipelines[std::size_t(q)].micro_batch_size * plan.pipelines[std::size_t(q)].num_microbatches;
  const program::Block mine =
      program::block_of(program::shape_of(st), {mbs, Tn, plan.model.hidden_size}, me - topo.rank(here.pipeline, here.stage, 0));
  const int b = mine.r1 - mine.r0, Tl = mine.t1 - mine.t0, row0 = mine.r0, t0 = mine.t0;

  // The stage's model, its TP all-reduce and CP exchanges on the stage's groups.
  std::unique_ptr<collective::Fabric> own_fabric;
  collective::Fabric* fabric = opt.fabric;
  if (fabric == nullptr) fabric = (own_fabric = std::make_unique<collective::Fabric>(peers)).get();
  auto tp_comm = fabric->group(topo.tp_group(me), kTensorParallel);
  if (!tp_comm) return tp_comm.errors();
  const std::vector<int> cp_ring = topo.cp_ring(me);
  backend::StageSpec spec{plan.model, st.first, st.last, here.shard, st.tp, opt.seed, st.recompute, {}, {}};
  // Emulation of the plan's cluster on this machine: the rank's compute stretched to its
  // device's speed (and the time dilation), its connections shaped to the cluster's links.
  const double factor = std::max(1.0, opt.slowdown) * opt.time_dilation * (opt.emulate_devices ? device_slowdown(plan, st) : 1.0);
  Pace pace(factor, opt.compute_on_this_thread);
  const std::string track = track_of(here, st);
  // An event from `start` to now; a compute event also with the compute the pace settled in it
  // (`computed`: pace.computed_s() at its start).
  auto record = [&](const std::string& name, double start, double computed = -1) {
    if (opt.trace) opt.trace->push_back({track, name, start, now_s() - start, computed < 0 ? -1 : pace.computed_s() - computed});
  };
  // The TP and CP collectives inside a forward or backward: the compute before one stretched,
  // then the collective, recorded as an event within F or B (at tp 1 the block's all-reduce
  // stays a no-op: no pause, no event).
  int step = -1;
  // Where the rank is, for its supervisor's watchdog.
  auto at = [&](progress::Activity activity, std::string_view what, int peer = -1) {
    if (opt.progress) opt.progress->at(step, activity, what, peer);
  };
  auto collective = [&](const char* name, auto&& blocking) {
    at(progress::Activity::collective, name);
    pace.settle();
    const double start = now_s();
    check(blocking());
    record(name, start);
    pace.restart();  // the compute after it from here: recording it is not the device's
    at(progress::Activity::computing, name);
  };
  if (st.tp > 1) spec.comm.tp_all_reduce = [&, tp = *tp_comm](float* data, std::size_t n) {
    collective("tp all-reduce", [&] { return tp->all_reduce_sum(data, n); });
  };
  if (st.tp > 1 && (*tp_comm)->device_memory())
    spec.tp_all_reduce_device = [&, tp = *tp_comm](float* data, std::size_t n) {
      collective("tp all-reduce", [&] { return tp->on_device(collective::Group::Op::all_reduce_sum, data, n); });
    };
  spec.comm.cp_rank = here.context, spec.comm.cp = st.cp;
  spec.comm.cp_all_gather = [&](const float* part, float* all, std::size_t n) {
    std::copy_n(part, n, all + std::size_t(here.context) * n);
    collective("cp all-gather", [&] { return transport::all_gather(peers, cp_ring, all, n * std::size_t(st.cp), kContext); });
  };
  spec.comm.cp_reduce_scatter = [&](const float* all, float* part, std::size_t n) {
    std::vector<float> buf(all, all + n * std::size_t(st.cp));
    collective("cp reduce-scatter", [&] { return transport::reduce_scatter_sum(peers, cp_ring, buf.data(), buf.size(), kContext); });
    std::copy_n(buf.data() + std::size_t(here.context) * n, n, part);
  };
  MemoryMeter meter;  // the heap's baseline: before the stage's parameters exist
  const std::unique_ptr<backend::Stage> model = backend.make_stage(spec);

  // The program: the schedule's operations, the hops around the stage, the sync's chunks.
  const int warmup = st.warmup.value_or(int(pipe.stages.size()) - here.stage);  // the plan's, else 1f1b's
  const auto ops = schedule::stage_ops(warmup, m);
  const program::StageHops hops = program::hops_of(plan, topo, me);
  // The device links of the rank's hops (above): activations on one NCCL group per boundary,
  // gradients on another, so that a send enqueued on one never waits behind a receive on the
  // other. Made by every rank alike after the TP groups and before the sync's, boundary by
  // boundary (collective.hpp: one global order).
  const bool device_tensors = model->device_activations();
  DeviceLink activations_in, activations_out, gradients_in, gradients_out;
  if (device_tensors)
    for (std::uint32_t tag : {kActivation, kGradient})
      for (int s : {here.stage - 1, here.stage}) {
        if (s < 0 || s + 1 >= int(pipe.stages.size())) continue;
        DeviceLink link{nullptr, boundary_ranks(topo, pipe, here.pipeline, s)};
        if (!fabric->nccl(link.ranks)) continue;
        auto g = fabric->group(link.ranks, tag);
        if (!g) return g.errors();
        link.group = *g;
        const bool before = s < here.stage;  // the boundary with the stage before
        (tag == kActivation ? (before ? activations_in : activations_out) : (before ? gradients_out : gradients_in)) = std::move(link);
      }
  InTransit in_transit;
  Options::DeviceReport hops_moved;  // its hop byte counts
  std::vector<Bucket> sync = buckets_of(plan, topo, me, model->params());
  const bool zero = plan.model.training.zero_stage >= 1;
  if (auto connected = connect(sync, *fabric, kSync, zero); !connected) return connected.errors();
  if (auto moved = on_device(sync, *model); !moved) return moved.errors();
  std::size_t optimizer_state = 0;
  for (const auto& bucket : sync) optimizer_state += 2 * (bucket.hi - bucket.lo);
  // Resuming: the parameters and moments from the checkpoint (or the survivors' state every rank
  // found at the same step), then its steps onwards.
  const checkpoint::Checkpoint* from = opt.resume;
  if (!opt.rescue.holder.empty()) {
    const bool newer = opt.rescue.from && (!opt.resume || opt.rescue.from->step() > opt.resume->step());
    auto agreed = agree(peers, newer ? opt.rescue.from->step() : -1, kSwitch);
    if (!agreed) return agreed.errors();
    if (*agreed >= 0) from = opt.rescue.from;
  }
  if (opt.rescue.taken) *opt.rescue.taken = from;
  int first_step = 0;
  if (from) {
    if (auto why = resume_problem(*from, plan.model); !why.empty()) return failure(ErrorKind::invalid_input, why);
    pull_state(sync);  // the host buffers load_checkpoint() fills
    if (auto loaded = load_checkpoint(*from, model->params(), sync); !loaded) return loaded.errors();
    push_state(sync);
    first_step = from->step();
    if (from == opt.rescue.from) {
      // The bytes read from each holder (open_rescue's "holders", one per file), by route; rank 0
      // sums every rank's.
      const auto& holders = from->manifest()["holders"];
      std::array<double, 4> read{};  // by replan::Route, the checkpoint's left out
      for (std::size_t f = 0; f < from->elements_read().size(); ++f)
        read[std::size_t(route_between(holders[f].get<std::string>(), opt.rescue.holder))] += double(from->elements_read()[f]) * sizeof(float);
      try {
        const auto all = gather_to_root(peers, read, kSwitch);
        if (me == 0 && opt.switched) {
          *opt.switched = {};
          for (const auto& theirs : all)
            for (std::size_t k = 0; k < 4; ++k) (*opt.switched)[k] += theirs[k];
        }
      } catch (const Failure& f) {
        return f.why;
      }
    }
    if (first_step >= opt.steps)
      return failure(ErrorKind::invalid_input, "the checkpoint " + from->dir() + " is at step " + std::to_string(first_step) +
                                                   ": training to step " + std::to_string(opt.steps) + " leaves nothing to run");
  }
  // What the rank holds besides activations, constant over the run; the meter samples it with
  // the activations in flight after every forward, backward and optimizer step.
  MemoryUse state;
  for (const auto* p : model->params())
    state.parameters += double(p->value.size() * sizeof(float)), state.gradients += double(p->grad.size() * sizeof(float));
  for (const auto& bucket : sync)
    state.optimizer += double(2 * (bucket.hi - bucket.lo) * sizeof(float)), state.sync_buffers += double(2 * bucket.size * sizeof(float));
  auto sample_memory = [&] {
    if (!opt.memory) return;
    MemoryUse now = state;
    now.activations = double(model->activation_bytes_peak());
    const auto device = model->device_memory();
    meter.sample(now, device ? double(device->peak) : 0.0);
  };

  if (opt.emulate_links) shape_links(plan, topo, peers, opt.time_dilation);
  // Runs a compute step, stretched to the emulated device's speed, and records it.
  auto emulate = [&](const std::string& name, auto&& compute) {
    at(progress::Activity::computing, name);
    pace.begin(name);
    const double start = now_s(), computed = pace.computed_s();
    compute();
    pace.end();
    record(name, start, computed);
  };
  // A hop: what this rank sends of `y` (its block) and receives; its block when it receives.
  // The time it waits for the data is recorded as "wait F<j>" / "wait B<j>".
  auto receive = [&](const program::HopPart& hop, std::uint32_t tag, const std::string& name) {
    std::vector<Piece> held;
    at(progress::Activity::receiving, name, first_sender(hop));
    const double start = now_s();
    pace.wait([&] { run_hop(peers, tag, hop, held); });
    record(name, start);
    return assemble(held, mine);
  };
  auto send = [&](const program::HopPart& hop, std::uint32_t tag, std::vector<float> y) {
    std::vector<Piece> held{{mine, std::move(y)}};
    run_hop(peers, tag, hop, held);
  };
  // The same with the stage's tensors on the device: over the hop's device link, else through the host.
  auto receive_device = [&](const program::HopPart& hop, const DeviceLink& link, std::uint32_t tag, const std::string& name) {
    if (!link.group) {
      const std::vector<float> x = receive(hop, tag, name);
      return model->upload(x.data(), x.size());
    }
    std::vector<DevicePiece> held;
    at(progress::Activity::receiving, name, first_sender(hop));
    const double start = now_s();
    const bool act = tag == kActivation;
    pace.wait([&] { run_hop_device(*model, link, hop, held, in_transit, act ? hops_moved.activations_sent : hops_moved.gradients_sent,
                                   act ? hops_moved.activations_received : hops_moved.gradients_received); });
    record(name, start);
    return assemble_device(*model, held, mine);
  };
  auto send_device = [&](const program::HopPart& hop, const DeviceLink& link, std::uint32_t tag, backend::DeviceTensor y) {
    if (!link.group) return send(hop, tag, model->download(y));
    std::vector<DevicePiece> held{{mine, std::move(y)}};
    const bool act = tag == kActivation;
    run_hop_device(*model, link, hop, held, in_transit, act ? hops_moved.activations_sent : hops_moved.gradients_sent,
                   act ? hops_moved.activations_received : hops_moved.gradients_received);
    std::erase_if(in_transit, [](const auto& t) { return t.first->idle(); });
  };
  // Waits for the sends in transit (a dead receiver: an error after the group's timeout).
  auto drain_sends = [&] {
    for (const auto& [group, tensor] : in_transit) check(pace.wait([&, g = group] { return g->drain(); }));
    in_transit.clear();
  };

  // Checkpoints record the model and the plan besides what the caller gives.
  Options::Checkpointing checkpointing = opt.checkpointing;
  if (!checkpointing.dir.empty()) checkpointing.about["model"] = to_json(plan.model), checkpointing.about["plan"] = to_json(plan);

  const bool first = here.stage == 0, last = here.stage + 1 == int(pipe.stages.size());
  std::vector<StepReport> reports;
  const backend::DeviceCounters before_steps = model->device_counters().value_or(backend::DeviceCounters{});
  int completed = first_step;  // optimizer steps applied: the step a rescue resumes at
  try {
    std::vector<int> in(std::size_t(b) * Tl), tg(in.size()), seq_in(static_cast<std::size_t>(Tn)), seq_tg(seq_in.size());
    for (step = first_step; step < opt.steps; ++step) {
      at(progress::Activity::computing, "zero_grad");
      pace.begin("zero_grad");
      const double step_start = now_s(), computed = pace.computed_s();
      model->zero_grad();
      pace.end();
      record("zero_grad", step_start, computed);
      double loss_sum = 0;
      const double scale = 1.0 / (double(G) * Tn);
      for (const auto& op : ops) {
        const int j = op.microbatch;
        if (op.kind == schedule::OpKind::forward) {
          for (int k = 0; k < b; ++k) {  // tokens [b, Tl] and targets of my block of micro-batch j
            batches.sequence(step, G, offset + j * mbs + row0 + k, seq_in.data(), seq_tg.data());
            std::copy_n(seq_in.data() + t0, Tl, &in[std::size_t(k) * Tl]);
            std::copy_n(seq_tg.data() + t0, Tl, &tg[std::size_t(k) * Tl]);
          }
          const std::string wait = "wait F" + std::to_string(j), name = "F" + std::to_string(j);
          double loss = 0;
          if (device_tensors) {  // x, y: [b, Tl, C] bf16 on the device
            backend::DeviceTensor x = first ? backend::DeviceTensor{} : receive_device(hops.activations_in, activations_in, kActivation, wait);
            backend::DeviceTensor y;
            emulate(name, [&] { y = model->forward_device(j, b, in.data(), std::move(x), tg.data(), &loss); });
            sample_memory();
            if (!last) send_device(hops.activations_out, activations_out, kActivation, std::move(y));
          } else {  // x, y: [b, Tl, C] fp32 on the host
            const std::vector<float> x = first ? std::vector<float>{} : receive(hops.activations_in, kActivation, wait);
            std::vector<float> y;
            emulate(name, [&] { y = model->forward(j, b, in.data(), x.data(), tg.data(), &loss); });
            sample_memory();
            if (!last) send(hops.activations_out, kActivation, std::move(y));
          }
          loss_sum += loss;
        } else {
          const std::string wait = "wait B" + std::to_string(j), name = "B" + std::to_string(j);
          if (device_tensors) {  // dy, dx: [b, Tl, C] bf16 on the device
            backend::DeviceTensor dy = last ? backend::DeviceTensor{} : receive_device(hops.gradients_in, gradients_in, kGradient, wait);
            backend::DeviceTensor dx;
            emulate(name, [&] { dx = model->backward_device(j, std::move(dy), scale); });
            sample_memory();
            if (!first) send_device(hops.gradients_out, gradients_out, kGradient, std::move(dx));
          } else {  // dy, dx: [b, Tl, C] fp32 on the host
            const std::vector<float> dy = last ? std::vector<float>{} : receive(hops.gradients_in, kGradient, wait);
            std::vector<float> dx;
            emulate(name, [&] { dx = model->backward(j, dy.data(), scale); });
            sample_memory();
            if (!first) send(hops.gradients_out, kGradient, std::move(dx));
          }
        }
      }
      drain_sends();
      // The gradients made whole (the device's: the profile's optimizer step has it, and packing
      // them, which sync_and_update ends).
      pace.begin("sync");
      model->finish_backward();
      sync_and_update(sync, zero, opt.optimizer, step, pace, record, at);
      completed = step + 1;
      at(progress::Activity::collective, "loss");
      sample_memory();
      const double start = now_s();
      StepReport report;
      report.step = step, report.optimizer_state = optimizer_state;
      report.loss = pace.wait([&] { return gather_loss(peers, topo, loss_sum, kLoss); }) * scale;
      check(pace.wait([&] { return peers.flush(); }));
      record("loss", start);
      record("step", step_start);
      report.seconds = now_s() - step_start;
      const int next = step + 1;
      if (const auto& c = checkpointing; !c.dir.empty() && c.every > 0 && (next % c.every == 0 || next == opt.steps)) {
        const double saving = now_s();
        pull_state(sync);  // a device's masters and moments, to the host the checkpoint is written from
        if (auto saved = save_checkpoint(peers, sync, zero, c, next, pace, at)) {
          report.checkpoint = saved->dir, report.checkpoint_bytes = saved->bytes;
          report.checkpoint_s = now_s() - saving;
        }
        record("checkpoint", saving);
      }
      reports.push_back(report);
      if (on_step) on_step(report);
    }
    if (opt.memory) gather_memory(peers, meter.peak(), *opt.memory);
    if (opt.device)
      if (const auto counters = model->device_counters()) {  // the steps' own, not the set-up's
        *opt.device = hops_moved;
        opt.device->counters = *counters - before_steps;
        opt.device->steps = opt.steps - first_step;
      }
    at(progress::Activity::finished, "done");
  } catch (const Failure& f) {
    Diagnostic why = f.why;
    why.path = "rank " + std::to_string(me);
    // A peer is gone: what this rank holds may spare the job the steps since its checkpoint.
    if (why.kind == ErrorKind::peer_lost && !opt.rescue.dir.empty() && !zero) {
      // The agent stops a failed job's other workers with SIGTERM, SIGKILL 2 s later: the state
      // is worth those seconds (this process ends right after, whatever it was sent).
      struct sigaction ignore {}, before{};
      ignore.sa_handler = SIG_IGN;
      sigaction(SIGTERM, &ignore, &before);
      try {
        pull_state(sync);
        auto kept = checkpoint::write_rescue(opt.rescue.dir, completed, me, opt.rescue.holder, checkpointing.about,
                                             checkpoint_pieces(sync, me, zero, true));
        if (!kept) why.message += " (and its state could not be kept for the job's recovery: " + kept.errors().front().message + ")";
      } catch (const std::exception& e) {  // a device that failed with its peer
        why.message += std::string(" (and its state could not be read from the device for the job's recovery: ") + e.what() + ")";
      }
      sigaction(SIGTERM, &before, nullptr);
    }
    return why;
  }
  return reports;
}

}  // namespace het::runtime
