#pragma once
// `hetexec submit --elastic` (issue 19 item 4; Hetu v2 §7.2): a job that survives losing a node.
//
// The job runs as submit() runs it, checkpointing under the agents' shared checkpoint root. When
// it fails because a node is gone or stuck (its agent lost, a worker killed or hung there: the
// root cause's kind is killed or hung), the job has already been stopped everywhere; then:
//  1. the cluster without what failed (replan::without): the node when its agent is lost, the
//     device when one worker was killed or hung (the node's other devices stay, as a subcluster
//     "SUB-nNODE" of their own); the other nodes of a subcluster are renumbered, a subcluster
//     left empty is dropped;
//  2. the best plan for it, searched as `hetplan search` does with the plan's own profiles,
//     the first of the search's plans that the runtime can run;
//  3. the job submitted again on the surviving agents (each running its node's new name, see
//     AgentAddress::serves, and its devices renumbered, AgentAddress::devices), resuming from the
//     freshest state: what the failed job's surviving ranks held when they lost their peer
//     (each writes it, runtime::Options::rescue; plans without ZeRO) when it holds every part
//     of the model at one step (Hetu v2 §7.2: every part still has a holder), else the newest
//     complete checkpoint in the checkpoint directory (or where the job started: the original
//     --resume, else step 0). Each new rank reads the parts it needs from the nearest holder
//     (its own device, its node, its subcluster, another), and the bytes moved by route are
//     reported beside replan's prediction for the same switch.
// Any other failure (bad input, a worker's error, an internal one) ends the job as submit()
// does.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "submit/submit.hpp"

namespace het::submit {

struct ElasticOptions {
  std::string algorithm = "auto";  // search::run's
  double search_budget_s = 2;      // per re-plan
  int max_recoveries = 8;          // then the failure ends the job
};

struct Recovery {
  job::NodeId lost;             // in the plan that was running
  std::optional<int> lost_device;  // of `lost`, when only a device was lost (its worker killed or hung)
  std::string why;              // the failure, as Outcome::failure
  int failed_step = -1;         // the last step rank 0 reported before the failure (-1: none)
  int resumed_step = 0;         // the step the new plan started from (its checkpoint's)
  int steps_lost = 0;           // failed_step + 1 - resumed_step (>= 0)
  double replan_s = 0;          // the search
  double recovery_s = 0;        // failure noticed -> the new plan's first step reported (0: it never stepped)
  Plan plan;                    // the new plan
  std::string switch_table;     // replan::table of the switch from the old plan, or why there is none
  std::optional<std::array<std::int64_t, 5>> predicted;  // replan's bytes by replan::Route
  bool from_survivors = false;  // resumed from the survivors' state (else a checkpoint or step 0)
  std::optional<std::array<double, 4>> moved;  // then: the bytes the new ranks read by route (in place .. between subclusters)
};

// "node a100/1" or "device 1 of node a100/1"
std::string lost_text(const Recovery& r);

struct ElasticOutcome {
  Outcome last;                 // the last submission's
  std::vector<Recovery> recoveries;
};

// Options::settings.checkpoint_dir must be set (with checkpoint_every); `o.agents` are the
// agents of the plan's nodes (by their own names). on_recovery sees each recovery once, when its
// new plan's first step is reported (a recovery whose job never stepped is only in the outcome).
ElasticOutcome submit_elastic(const Options& o, const ElasticOptions& elastic,
                              const std::function<void(const std::string&)>& on_line,
                              const std::function<void(const std::string&)>& on_status,
                              const std::function<void(const Recovery&)>& on_recovery);

}  // namespace het::submit
