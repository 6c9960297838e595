#include "submit/submit.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "control/admission.hpp"
#include "control/error_kind.hpp"
#include "control/status.hpp"
#include "hetexec.grpc.pb.h"
#include "input/address.hpp"
#include "input/input.hpp"
#include "launch/cause.hpp"
#include "runtime/runtime.hpp"
#include "rendezvous/server.hpp"
#include "spec/limits.hpp"

namespace het::submit {

namespace pb = het::v1;
using Clock = std::chrono::steady_clock;

Result<std::vector<AgentAddress>> parse_agents(const std::string& list) {
  std::vector<AgentAddress> out;
  Diagnostics errors;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      errors.push_back({"", 0, 0, "agents", "expected SUB/IDX=HOST:PORT, got '" + item + "'"});
      continue;
    }
    auto node = job::parse_node_id(item.substr(0, eq));
    if (!node) {
      errors.push_back({"", 0, 0, "agents", node.errors().front().message});
      continue;
    }
    if (auto address = input::parse_host_port(item.substr(eq + 1), "agents"); !address) {
      errors.push_back(address.errors().front());
      continue;
    }
    out.push_back({*node, item.substr(eq + 1), std::nullopt});
  }
  if (out.empty() && errors.empty()) errors.push_back({"", 0, 0, "agents", "no agents given"});
  std::set<job::NodeId> seen;
  for (const auto& a : out)
    if (!seen.insert(a.node).second) errors.push_back({"", 0, 0, "agents", "node " + a.node.to_string() + " is given twice"});
  if (!errors.empty()) return errors;
  return out;
}

Result<std::vector<AgentAddress>> read_inventory(const std::string& file) {
  auto doc = input::load(file);
  if (!doc) return doc.errors();
  Diagnostics errors;
  input::Context ctx{doc->file, &errors};
  input::Fields top(ctx, doc->root, "", {"agents"});
  std::vector<AgentAddress> out;
  std::set<job::NodeId> seen;
  if (auto list = top.list("agents", input::Need::required, limits::kNodes)) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      input::Fields f(ctx, (*list)[i], input::index("agents", i), {"node", "address"});
      auto node = f.string("node", input::Need::required);
      auto address = f.string("address", input::Need::required);
      if (!node || !address) continue;
      auto id = job::parse_node_id(*node);
      auto where = input::parse_host_port(*address, "");
      if (!id) f.error("node", id.errors().front().message);
      else if (!where) f.error("address", where.errors().front().message);
      else if (!seen.insert(*id).second) f.error("node", "node " + *node + " is listed twice");
      else out.push_back({*id, *address, std::nullopt});
    }
    if (list->size() == 0) top.error("agents", "no agents listed");
  }
  if (!errors.empty()) return errors;
  return out;
}

namespace {

struct Agent {
  AgentAddress where;
  std::unique_ptr<pb::Agent::Stub> stub;
  std::string name() const {
    return "node " + where.node.to_string() + " (" + (where.serves ? "agent of " + where.serves->to_string() + " at " : "") + where.address + ")";
  }
};

Result<std::vector<Agent>> connect(const std::vector<AgentAddress>& addresses, const control::ClientSecurity& security) {
  std::vector<Agent> out;
  for (const auto& a : addresses) {
    auto channel = control::open_channel(a.address, security);
    if (!channel) return channel.errors();
    out.push_back({a, pb::Agent::NewStub(*channel)});
  }
  return out;
}

std::unique_ptr<grpc::ClientContext> context(const control::ClientSecurity& security, double timeout_s) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  control::attach_token(*ctx, security.token);
  if (timeout_s > 0)
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                             std::chrono::duration<double>(timeout_s)));
  return ctx;
}

// Runs f(i) for every agent on its own thread and waits for all.
template <class F>
void each(std::size_t n, F&& f) {
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { f(i); });
  for (auto& t : threads) t.join();
}

std::string random_job_id() {
  std::random_device rd;
  std::mt19937_64 rng((std::uint64_t(rd()) << 32) ^ rd() ^ std::uint64_t(Clock::now().time_since_epoch().count()));
  char buf[32];
  std::snprintf(buf, sizeof buf, "job-%012llx", static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
  return buf;
}

// The kind of an agent's failure to answer a call: gone (killed) or silent (hung); else ours.
ErrorKind unreachable(const grpc::Status& st) {
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) return ErrorKind::killed;
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return ErrorKind::hung;
  return ErrorKind::internal;
}

job::Offer offer_of(const pb::DescribeResponse& d) {
  job::Offer o;
  for (const auto& dev : d.devices()) {
    o.kind = dev.kind() == pb::DEVICE_KIND_CUDA ? "cuda" : "cpu";
    for (std::uint32_t i = 0; i < dev.count() && o.devices.size() < 4096; ++i) o.devices.push_back({dev.name(), double(dev.memory_bytes())});
  }
  if (o.kind.empty()) o.kind = "cpu";
  return o;
}

}  // namespace

Outcome submit(const Options& o, const std::function<void(const std::string&)>& on_line,
               const std::function<void(const std::string&)>& on_status) {
  Outcome out;
  auto refuse = [&](const std::string& why) {
    out.ok = false, out.refused = true, out.failure = why;
    return out;
  };
  // 1. Every node of the plan has an agent.
  std::vector<AgentAddress> used;
  for (const auto& node : job::nodes_of(o.plan)) {
    auto it = std::find_if(o.agents.begin(), o.agents.end(), [&](const AgentAddress& a) { return a.node == node; });
    if (it == o.agents.end()) return refuse("the plan runs ranks on node " + node.to_string() + ", which has no agent in the list");
    used.push_back(*it);
  }
  auto agents = connect(used, o.security);
  if (!agents) return refuse(to_string(agents.errors()));
  const std::size_t n = agents->size();
  // 2. What every agent has, against the plan.
  std::vector<std::string> problems(n);
  each(n, [&](std::size_t i) {
    Agent& a = (*agents)[i];
    pb::DescribeRequest req;
    req.set_api_version(control::api_version());
    pb::DescribeResponse resp;
    // The first call on a new channel. A connection attempt that fails (on a busy machine one
    // can fail with a live agent behind it) puts the channel into gRPC's reconnect backoff, 1 s
    // ±20% at first, then x1.6 (grpc/doc/connection-backoff.md), in which every fail-fast call
    // fails at once; so the call is made again waiting for the channel to be ready, for up to
    // kConnectWindowS, which spans two more connection attempts. An agent still unreachable is
    // reported with the first failure, which says why (e.g. "Connection refused").
    constexpr double kConnectWindowS = 5;
    auto ctx = context(o.security, o.call_timeout_s);
    grpc::Status st = a.stub->Describe(ctx.get(), req, &resp);
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
      auto again = context(o.security, o.call_timeout_s > 0 ? std::min(o.call_timeout_s, kConnectWindowS) : kConnectWindowS);
      again->set_wait_for_ready(true);
      grpc::Status retried = a.stub->Describe(again.get(), req, &resp);
      if (retried.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) st = retried;
    }
    if (!st.ok()) problems[i] = a.name() + ": " + control::describe(st);
    else if (resp.node() != a.where.agent_node().to_string())
      problems[i] = a.name() + ": that agent serves node " + resp.node() + ", not " + a.where.agent_node().to_string();
    else if (auto p = job::check_offer(o.plan, a.where.node, offer_of(resp)); !p.empty())
      problems[i] = a.name() + ": " + p.front();
  });
  for (const auto& p : problems)
    if (!p.empty()) return refuse(p);
  // 3. The rendezvous, then every agent prepares its ranks.
  rendezvous::ServerOptions ro;
  ro.listen = o.rendezvous_listen;
  ro.security.token = o.security.token;
  std::string ca_pem;
  if (!o.rendezvous_tls_cert.empty()) {
    ro.security.tls = control::ServerTls{o.rendezvous_tls_cert, o.rendezvous_tls_key, ""};
    const std::string ca = o.rendezvous_tls_ca.empty() ? o.rendezvous_tls_cert : o.rendezvous_tls_ca;
    auto pem = input::read_file(ca, control::kMaxCredentialBytes);
    if (!pem || pem->empty()) return refuse("cannot read the rendezvous CA " + (pem ? ca + ": the file is empty" : pem.errors().front().to_string()));
    ca_pem = std::move(*pem);
  }
  auto rdv = rendezvous::RendezvousServer::start(ro);
  if (!rdv) return refuse("cannot start the rendezvous: " + to_string(rdv.errors()));
  const std::string advertised =
      (o.rendezvous_advertise.empty() ? o.rendezvous_listen.substr(0, o.rendezvous_listen.rfind(':')) : o.rendezvous_advertise) + ":" +
      std::to_string((*rdv)->port());
  out.job_id = random_job_id();
  if (on_status) on_status("job " + out.job_id + ": " + std::to_string(n) + " nodes, rendezvous at " + advertised);
  const double lease = o.detach ? 0 : o.lease_s;
  auto abort_all = [&](const std::string& reason) {
    each(n, [&](std::size_t i) {
      pb::AbortRequest req;
      req.set_api_version(control::api_version()), req.set_job_id(out.job_id), req.set_reason(reason);
      pb::AbortResponse resp;
      auto ctx = context(o.security, 3);
      (*agents)[i].stub->Abort(ctx.get(), req, &resp);
    });
  };
  each(n, [&](std::size_t i) {
    Agent& a = (*agents)[i];
    pb::PrepareRequest req;
    req.set_api_version(control::api_version());
    req.set_job_id(out.job_id);
    req.set_plan_json(o.plan_json);
    for (const auto& r : job::ranks_on(o.plan, a.where.node)) req.add_ranks(std::uint32_t(r.rank));
    auto* s = req.mutable_settings();
    s->set_steps(std::uint32_t(o.settings.steps)), s->set_seed(o.settings.seed), s->set_learning_rate(o.settings.lr);
    s->set_data_path(o.settings.data_path), s->set_emulate_links(o.settings.emulate_links);
    s->set_emulate_devices(o.settings.emulate_devices), s->set_threads(std::uint32_t(std::max(0, o.settings.threads)));
    s->set_time_dilation(o.settings.time_dilation);
    s->set_hang_timeout_s(o.settings.hang_timeout_s);
    s->set_checkpoint_dir(o.settings.checkpoint_dir), s->set_resume(o.settings.resume), s->set_rescue_from(o.settings.rescue_from);
    s->set_elastic(o.settings.elastic);
    s->set_checkpoint_every(std::uint32_t(o.settings.checkpoint_every)), s->set_checkpoint_keep(std::uint32_t(o.settings.checkpoint_keep));
    req.set_rendezvous_address(advertised);
    req.set_lease_seconds(std::uint32_t(std::ceil(lease)));
    req.set_rendezvous_ca_pem(ca_pem);
    if (a.where.serves) req.set_plan_node(a.where.node.to_string());
    for (int d : a.where.devices) req.add_device_map(std::uint32_t(d));
    pb::PrepareResponse resp;
    auto ctx = context(o.security, o.call_timeout_s);
    auto st = a.stub->Prepare(ctx.get(), req, &resp);
    if (!st.ok()) problems[i] = a.name() + ": " + control::describe(st);
    else if (!resp.ok()) problems[i] = a.name() + " refused the job: " + resp.error();
  });
  for (const auto& p : problems)
    if (!p.empty()) {
      abort_all("another node refused the job");
      return refuse(p);
    }

  // 4. Start, follow every node's events, renew the lease.
  struct Failure {
    std::string why;
    ErrorKind kind;
    std::optional<job::NodeId> node;
    std::optional<int> rank;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Failure> failures;
  Clock::time_point first_failure;
  std::size_t finished_ok = 0;
  bool stepped = false, done = false;
  std::vector<std::unique_ptr<grpc::ClientContext>> streams(n);
  auto fail = [&](const std::string& why, ErrorKind kind, std::optional<std::size_t> agent, std::optional<int> rank = std::nullopt) {
    if (done) return;  // callers hold mu
    if (failures.empty()) first_failure = Clock::now();
    failures.push_back({why, kind, agent ? std::optional<job::NodeId>((*agents)[*agent].where.node) : std::nullopt, rank});
    cv.notify_all();
  };
  for (std::size_t i = 0; i < n; ++i) streams[i] = context(o.security, 0);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      Agent& a = (*agents)[i];
      pb::EventsRequest req;
      req.set_api_version(control::api_version()), req.set_job_id(out.job_id);
      auto reader = a.stub->Events(streams[i].get(), req);
      pb::Event e;
      bool finished = false;
      while (reader->Read(&e)) {
        std::lock_guard lock(mu);
        if (e.has_line() && e.line().rank() == 0 && !e.line().from_stderr()) {
          if (on_line) on_line(e.line().text());
          if (e.line().text().find("\"step\"") != std::string::npos) stepped = true, cv.notify_all();
        } else if (e.has_error()) {
          fail(a.name() + ": " + e.error().message(), control::from_proto(e.error().kind()), i,
               e.error().has_rank() ? std::optional<int>(int(e.error().rank())) : std::nullopt);
        } else if (e.has_finished()) {
          finished = true;
          if (e.finished().ok()) ++finished_ok;
          else fail(a.name() + ": the job failed there", ErrorKind::aborted, i);
          cv.notify_all();
        }
      }
      auto st = reader->Finish();
      std::lock_guard lock(mu);
      if (!finished && !done) fail(a.name() + ": lost the agent (" + control::describe(st) + ")", ErrorKind::killed, i);
    });
  each(n, [&](std::size_t i) {
    pb::StartRequest req;
    req.set_api_version(control::api_version()), req.set_job_id(out.job_id);
    pb::StartResponse resp;
    auto ctx = context(o.security, o.call_timeout_s);
    auto st = (*agents)[i].stub->Start(ctx.get(), req, &resp);
    std::lock_guard lock(mu);
    if (!st.ok()) fail((*agents)[i].name() + ": cannot start: " + control::describe(st), unreachable(st), i);
  });
  if (on_status) on_status("started " + std::to_string(program::Topology(o.plan).ranks()) + " ranks");
  if (!o.detach)
    for (std::size_t i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        auto last_ok = Clock::now();
        std::unique_lock lock(mu);
        while (!done) {
          cv.wait_for(lock, std::chrono::duration<double>(o.heartbeat_interval_s));
          if (done) break;
          lock.unlock();
          pb::HeartbeatRequest req;
          req.set_api_version(control::api_version()), req.set_job_id(out.job_id);
          pb::HeartbeatResponse resp;
          auto ctx = context(o.security, o.heartbeat_timeout_s);
          auto st = (*agents)[i].stub->Heartbeat(ctx.get(), req, &resp);
          lock.lock();
          if (st.ok() || st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) last_ok = Clock::now();
          else if (std::chrono::duration<double>(Clock::now() - last_ok).count() > o.heartbeat_timeout_s)
            fail((*agents)[i].name() + ": stopped answering for " + std::to_string(int(o.heartbeat_timeout_s)) + " s (" +
                     control::describe(st) + ")",
                 ErrorKind::hung, i);
        }
      });
  {
    std::unique_lock lock(mu);
    for (;;) {
      if (finished_ok == n || (o.detach && stepped)) break;
      // After the first failure, a moment for the others to arrive, then the root cause.
      if (!failures.empty() && Clock::now() - first_failure > std::chrono::milliseconds(500)) break;
      cv.wait_for(lock, std::chrono::milliseconds(100));
    }
    done = true;
    cv.notify_all();
    if (!failures.empty()) {  // the root cause, by kind (launch/cause.hpp)
      std::vector<ErrorKind> kinds;
      for (const auto& f : failures) kinds.push_back(f.kind);
      const Failure& root = failures[launch::root_cause(kinds)];
      out.failure = root.why, out.failure_kind = root.kind, out.failed_node = root.node, out.failed_rank = root.rank;
      out.failed_at = first_failure;
    }
    out.ok = failures.empty();
  }
  if (!out.ok) {
    if (on_status) on_status("failed: " + out.failure + "; aborting the job on every node");
    abort_all("the job failed: " + out.failure);
  }
  for (auto& s : streams) s->TryCancel();
  for (auto& t : threads) t.join();
  (*rdv)->stop();
  return out;
}

Result<std::vector<JobRow>> status(const std::vector<AgentAddress>& addresses, const control::ClientSecurity& security,
                                   double call_timeout_s) {
  auto agents = connect(addresses, security);
  if (!agents) return agents.errors();
  std::vector<JobRow> rows;
  Diagnostics errors;
  for (auto& a : *agents) {
    pb::DescribeRequest req;
    req.set_api_version(control::api_version());
    pb::DescribeResponse resp;
    auto ctx = context(security, call_timeout_s);
    auto st = a.stub->Describe(ctx.get(), req, &resp);
    if (!st.ok()) {
      errors.push_back({"", 0, 0, "", a.name() + ": " + control::describe(st)});
      continue;
    }
    for (const auto& j : resp.jobs()) {
      JobRow r{a.where.node.to_string(), j.job_id(), j.state(), j.detail(), {}, int(j.lease_seconds_left())};
      for (auto rank : j.ranks()) r.ranks.push_back(int(rank));
      rows.push_back(std::move(r));
    }
  }
  if (!errors.empty()) return errors;
  return rows;
}

Result<int> abort(const std::vector<AgentAddress>& addresses, const control::ClientSecurity& security, const std::string& job_id,
                  const std::string& reason, double call_timeout_s) {
  auto agents = connect(addresses, security);
  if (!agents) return agents.errors();
  int aborted = 0;
  Diagnostics errors;
  for (auto& a : *agents) {
    pb::AbortRequest req;
    req.set_api_version(control::api_version()), req.set_job_id(job_id), req.set_reason(reason);
    pb::AbortResponse resp;
    auto ctx = context(security, call_timeout_s);
    auto st = a.stub->Abort(ctx.get(), req, &resp);
    if (st.ok()) ++aborted;
    else if (st.error_code() != grpc::StatusCode::NOT_FOUND) errors.push_back({"", 0, 0, "", a.name() + ": " + control::describe(st)});
  }
  if (!errors.empty()) return errors;
  return aborted;
}

}  // namespace het::submit
