#include "submit/elastic.hpp"

#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "cost/compute.hpp"
#include "plan/plan_io.hpp"
#include "plan/profiles.hpp"
#include "plan/validate.hpp"
#include "replan/replan.hpp"
#include "runtime/runtime.hpp"
#include "search/search.hpp"

namespace het::submit {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The best plan for `cluster` that the runtime can run, searched as `hetplan search` does with
// the old plan's profiles (plan/profiles.hpp).
Result<Plan> search_for(const Plan& old, const ClusterSpec& cluster, const ElasticOptions& e) {
  Plan shell;
  shell.model = old.model, shell.cluster = cluster, shell.profiles = old.profiles, shell.predicted = old.predicted;
  auto profiles = choose_profiles(shell, {}, "the plan's model");
  if (!profiles) return profiles.errors();
  cost::ComputeModel compute(old.model, profiles->specs());
  search::Options so;
  so.time_budget_s = e.search_budget_s;
  auto out = search::run(e.algorithm, old.model, cluster, compute, so);
  if (!out) return out.errors();
  std::string why = "the search found no plan";
  for (auto& candidate : out->plans) {
    Plan p = std::move(candidate.plan);
    p.profiles = profiles->used;
    if (auto problems = validate_plan(p, "the new plan"); !problems.empty()) {
      why = "a searched plan does not validate: " + problems.front().message;
      continue;
    }
    if (auto no = runtime::unsupported(p); !no.empty()) {
      why = "the runtime cannot run the searched plans: " + no;
      continue;
    }
    return p;
  }
  return failure(ErrorKind::unsupported, why);
}

// Waits until no agent in `agents` holds `job_id` as prepared or running (its workers have
// ended and its devices are free), at most `limit_s`.
void wait_ended(const std::vector<AgentAddress>& agents, const control::ClientSecurity& security, const std::string& job_id, double limit_s) {
  const auto start = Clock::now();
  while (since(start) < limit_s) {
    auto rows = status(agents, security, 2);
    bool busy = false;
    if (rows)
      for (const auto& r : *rows)
        if (r.job_id == job_id && (r.state == "prepared" || r.state == "running" || r.state == "stalled")) busy = true;
    if (rows && !busy) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

std::string lost_text(const Recovery& r) {
  return (r.lost_device ? "device " + std::to_string(*r.lost_device) + " of node " : std::string("node ")) + r.lost.to_string();
}

ElasticOutcome submit_elastic(const Options& o, const ElasticOptions& e, const std::function<void(const std::string&)>& on_line,
                              const std::function<void(const std::string&)>& on_status,
                              const std::function<void(const Recovery&)>& on_recovery) {
  ElasticOutcome result;
  auto say = [&](const std::string& s) {
    if (on_status) on_status(s);
  };
  Options run = o;
  run.settings.elastic = true;  // the workers keep their state when they lose a peer
  // The agent running each node of the running plan, by the plan's name for the node.
  std::map<job::NodeId, AgentAddress> agent_of;
  for (const auto& a : o.agents) agent_of[a.node] = a;
  bool checkpointed = false;           // a checkpoint completed in checkpoint_dir during this job
  std::optional<Recovery> pending;     // the recovery the running submission is, until it steps
  Clock::time_point failed_at;
  for (;;) {
    // What rank 0 says: the steps done, the checkpoints completed, where it resumed.
    std::mutex mu;
    int last_step = -1;
    bool stepped = false;
    auto lines = [&](const std::string& line) {
      if (on_line) on_line(line);
      std::lock_guard lock(mu);
      static const std::string resumed = "resumed from ", at = " at step ";
      if (line.rfind(resumed, 0) == 0 && line.rfind(at) != std::string::npos) {
        if (pending) {
          pending->resumed_step = std::atoi(line.c_str() + line.rfind(at) + at.size());
          pending->from_survivors = line.find("/.rescue/") != std::string::npos;
        }
        return;
      }
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object()) return;
      if (auto s = j.find("switched"); s != j.end() && s->is_object() && pending) {
        std::array<double, 4> moved{};
        int k = 0;
        for (const char* route : {"in_place", "intra_node", "inter_node", "inter_subcluster"}) moved[std::size_t(k++)] = s->value(route, 0.0);
        pending->moved = moved;
      }
      if (auto s = j.find("step"); s != j.end() && s->is_number_integer()) {
        last_step = s->get<int>();
        if (!stepped && pending) {
          pending->recovery_s = since(failed_at);
          pending->steps_lost = std::max(0, pending->failed_step + 1 - pending->resumed_step);
          if (on_recovery) on_recovery(*pending);
        }
        stepped = true;
      }
      if (j.contains("checkpoint") && j.contains("next_step")) checkpointed = true;
    };
    result.last = submit(run, lines, on_status);
    if (pending) result.recoveries.push_back(std::move(*pending)), pending.reset();
    const Outcome& out = result.last;
    if (out.ok || out.refused) return result;
    const bool lost = out.failure_kind == ErrorKind::killed || out.failure_kind == ErrorKind::hung;
    if (!out.failed_node || !lost) return result;  // not a lost node: the job's own failure
    if (int(result.recoveries.size()) >= e.max_recoveries) {
      say("elastic: " + std::to_string(e.max_recoveries) + " recoveries already; giving up");
      return result;
    }
    failed_at = out.failed_at;
    Recovery r;
    r.lost = *out.failed_node, r.why = out.failure, r.failed_step = last_step;
    std::string removal = r.lost.to_string();  // replan::without's "SUB/NODE[:DEVICE]"
    if (out.failed_rank)  // one worker killed or hung: its device only
      for (const auto& rank : job::ranks_on(run.plan, r.lost))
        if (rank.rank == *out.failed_rank) r.lost_device = rank.device, removal += ":" + std::to_string(rank.device);
    say("elastic: " + lost_text(r) + " is lost; re-planning for the rest");
    auto give_up = [&](const std::string& why) {
      result.last.failure += "; elastic: " + why;
      say("elastic: " + why);
      return result;
    };
    // The survivors' workers of the failed job must have ended before their devices are free.
    std::vector<AgentAddress> survivors;
    for (const auto& [node, a] : agent_of)
      if (node != r.lost || r.lost_device) survivors.push_back({a.agent_node(), a.address, std::nullopt});
    wait_ended(survivors, o.security, out.job_id, 15);
    // What the new plan may not use: what failed, and the cluster's nodes no agent serves.
    std::vector<std::string> removals{removal};
    for (const auto& s : run.plan.cluster.subclusters)
      for (int n = 0; n < s.nodes; ++n)
        if (!agent_of.count(job::NodeId{s.name, n}))
          removals.push_back(s.name + "/" + std::to_string(n));
    auto reduced = replan::without(run.plan.cluster, removals);
    if (!reduced) return give_up("cannot re-plan: " + reduced.errors().front().message);
    const auto searching = Clock::now();
    auto next = search_for(run.plan, reduced->cluster, e);
    r.replan_s = since(searching);
    if (!next) return give_up("cannot re-plan: " + next.errors().front().message);
    if (auto sw = replan::switch_between(run.plan, *next, *reduced)) {
      r.switch_table = replan::table(*sw);
      r.predicted = std::array<std::int64_t, 5>{};
      std::copy(std::begin(sw->bytes_by_route), std::end(sw->bytes_by_route), r.predicted->begin());
    } else {
      r.switch_table = "no switch plan: " + sw.errors().front().message;
    }
    // Each device of the new cluster is a surviving device of the old one (replan::Reduced::
    // old_of): its node's agent runs it, as the agent's device it was.
    std::map<job::NodeId, AgentAddress> next_agents;
    for (const auto& [device, old] : reduced->old_of) {
      if (!old) continue;
      auto it = agent_of.find(job::NodeId{old->subcluster, old->node});
      if (it == agent_of.end()) continue;  // the old plan's cluster had no agent for it
      const job::NodeId now{device.subcluster, device.node}, own = it->second.agent_node();
      AgentAddress& a = next_agents[now];
      if (a.address.empty()) a = AgentAddress{now, it->second.address, own == now ? std::nullopt : std::optional<job::NodeId>(own)};
      if (int(a.devices.size()) <= device.device) a.devices.resize(std::size_t(device.device) + 1, -1);
      a.devices[std::size_t(device.device)] = it->second.devices.empty() ? old->device : it->second.devices[std::size_t(old->device)];
    }
    for (auto& [node, a] : next_agents) {  // an identity map is no map
      bool same = true;
      for (std::size_t d = 0; d < a.devices.size(); ++d) same = same && a.devices[d] == int(d);
      if (same) a.devices.clear();
    }
    agent_of = std::move(next_agents);
    run.agents.clear();
    for (const auto& [node, a] : agent_of) run.agents.push_back(a);
    run.plan = *next, run.plan_json = write_plan(*next);
    run.settings.resume = checkpointed ? o.settings.checkpoint_dir : o.settings.resume;
    run.settings.rescue_from = o.settings.checkpoint_dir + "/.rescue/" + out.job_id;  // used when whole and newer
    r.plan = std::move(*next);
    say("elastic: re-planned in " + std::to_string(r.replan_s).substr(0, 5) + " s; resuming from the survivors' state if it is whole, else " +
        (run.settings.resume.empty() ? std::string("step 0 (no checkpoint yet)") : "the newest checkpoint in " + run.settings.resume));
    pending = std::move(r);
  }
}

}  // namespace het::submit
