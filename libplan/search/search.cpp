#include "search/search.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cost/memory.hpp"
#include "plan/validate.hpp"
#include "search/algorithms.hpp"

namespace het::search {

const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> names = {"auto", "uniform", "exhaustive", "hapt", "heteroauto", "mcts", "hexiscale"};
  return names;
}

double default_time_budget(const ClusterSpec& cluster) {
  return std::clamp(cluster.num_devices() / 200.0, 8.0, 45.0);
}

namespace {

using Clock = std::chrono::steady_clock;

// Runs `f` on this thread behind the refinement: the thread at the lowest scheduling priority
// (nice 19, Linux; raising a thread's nice needs no privilege) and its parallel loops in an
// arena of low priority, whose tasks oneTBB's workers take only when the refinement's arena
// has none. auto's slower members find the plans the refinement starts from, but the
// refinement finds the best plans, and beside the members on equal terms it had a third of
// the cores (issue 20: on 10,000 devices 11% of the CPU went to the refinement).
template <class F>
void behind(F&& f) {
#if defined(__linux__)
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
#endif
  tbb::task_arena low(tbb::task_arena::automatic, 1, tbb::task_arena::priority::low);
  low.execute(f);
}

// Starts oneTBB's worker threads from this thread (a barrier that every thread of the arena
// must reach, or 50 ms). A thread inherits its creator's nice value, and oneTBB starts its
// workers lazily, from the first thread that has work for them: on 10,000 devices that was a
// member running behind() (uniform and heteroauto find nothing there, so the first refinement
// call has no work), and the refinement's parallel loops then had one core and a nice-19 worker
// (issue 20).
void start_workers() {
  const int n = tbb::this_task_arena::max_concurrency();
  std::atomic<int> arrived{0};
  const auto until = Clock::now() + std::chrono::milliseconds(50);
  tbb::parallel_for(
      0, n,
      [&](int) {
        ++arrived;
        while (arrived < n && Clock::now() < until) std::this_thread::yield();
      },
      tbb::simple_partitioner());
}

// A layout as a key: pipelines, micro-batch, schedule and every stage's shape.
std::vector<int> layout_key(const Layout& l) {
  std::vector<int> key = {l.pipelines, l.micro_batch_size, static_cast<int>(l.schedule)};
  for (const auto& st : l.stages) key.insert(key.end(), {st.sub, st.dp, st.cp, st.tp});
  return key;
}

// Best estimate first; ties by layout, so that an order of candidates is the same in every run.
bool by_estimate(const Candidate& a, const Candidate& b) {
  return a.estimate_s != b.estimate_s ? a.estimate_s < b.estimate_s : layout_key(a.layout) < layout_key(b.layout);
}

// The layouts of plans made for a neighbouring problem (Options::warm_start), as candidates of
// this one: each plan whose pipelines have one shape, on subclusters this cluster has, and
// whose layout is admissible here, under its own schedule — with its own unit split when this
// model has as many units, and with the best split.
std::vector<Candidate> warm_candidates(const Evaluator& eval, const std::vector<Plan>& plans) {
  std::vector<Candidate> out;
  for (const Plan& plan : plans) {
    if (plan.pipelines.empty() || plan.granularity != eval.granularity()) continue;
    const Pipeline& first = plan.pipelines.front();
    Layout l;
    l.pipelines = static_cast<int>(plan.pipelines.size());
    l.micro_batch_size = first.micro_batch_size;
    l.schedule = plan.schedule;
    std::vector<int> split;
    bool ok = true;
    for (const Stage& s : first.stages) {
      const int sub = eval.cluster().index_of(s.subcluster);
      ok = ok && sub >= 0;
      l.stages.push_back({sub, s.dp, s.cp, s.tp});
      split.push_back(s.first);
    }
    for (const Pipeline& p : plan.pipelines) {
      ok = ok && p.micro_batch_size == first.micro_batch_size && p.stages.size() == first.stages.size();
      for (std::size_t i = 0; ok && i < p.stages.size(); ++i)
        ok = p.stages[i].subcluster == first.stages[i].subcluster && p.stages[i].dp == first.stages[i].dp &&
             p.stages[i].cp == first.stages[i].cp && p.stages[i].tp == first.stages[i].tp;
    }
    if (!ok || !eval.admissible(l)) continue;
    if (num_units(plan.model, plan.granularity) == eval.num_units())
      for (Candidate& c : eval.evaluate(l, {l.schedule}, &split)) out.push_back(std::move(c));
    for (Candidate& c : eval.evaluate(l, {l.schedule})) out.push_back(std::move(c));
  }
  return out;
}

// Instances small enough for the exhaustive oracle.
bool small_instance(const Evaluator& eval) {
  return eval.cluster().num_devices() <= 16 && eval.num_units() <= 18 && eval.cluster().subclusters.size() <= 3;
}

// Why nothing was found: memory when even the leanest one-layer stage does not fit anywhere,
// else the algorithm's own space.
std::string binding_constraint(const Evaluator& eval, const std::string& algorithm) {
  const ModelSpec& m = eval.model();
  std::string roomiest;  // the subcluster where the leanest stage comes closest to fitting
  double roomiest_ratio = 0;  // its need / capacity
  for (std::size_t j = 0; j < eval.cluster().subclusters.size(); ++j) {
    const SubclusterSpec& s = eval.cluster().subclusters[j];
    cost::StageShape st;
    st.parameters = static_cast<double>(layer_parameter_count(m));
    st.layers = 1;
    st.tp = 1;
    for (int tp = s.devices_per_node; tp >= 1; tp /= 2)
      if (m.num_attention_heads % tp == 0 && m.num_kv_heads % tp == 0) {
        st.tp = tp;
        break;
      }
    st.zero_dp = s.num_devices() / st.tp;
    st.sequences = 1;
    st.in_flight = 1;
    st.recompute = Recompute::full;
    const double need = cost::stage_memory(m, st).total();
    const double limit = s.device.usable_memory() * (1 - eval.headroom());
    if (roomiest.empty() || need / limit < roomiest_ratio) {
      roomiest_ratio = need / limit;
      char buf[256];
      std::snprintf(buf, sizeof buf, "%.1f GiB on %s (%.1f GiB usable)", need / (1 << 30), s.name.c_str(), limit / (1 << 30));
      roomiest = buf;
    }
  }
  if (roomiest_ratio <= 1)
    return "'" + algorithm + "' found no plan that fits within its search space (and time budget); try --algo auto, "
           "more micro-batch sizes or recomputation options";
  return "no plan fits memory: even one layer per stage with the widest tp, full recomputation and ZeRO over the "
         "subcluster needs at least " + roomiest + " per device, on the roomiest subcluster; add devices, enable recomputation or ZeRO (zero_stage), "
         "use a smaller micro-batch, or check the schedule options";
}

}  // namespace

std::vector<Candidate> portfolio_seeds(const std::vector<std::vector<Candidate>>& members) {
  // The feed gave this list too until 2026-12-07 (eleventh session), and each member's best
  // alone before the tenth: a member's plans reached the feed only while they were among what
  // it gave, and which of them the refinement saw depended on when the feed was polled.
  // Issue 20, midsize-27 (HET_TRACE prints, not kept): hapt's plan of 19.9674 s leads in three
  // steps to the best plan (15.0458 s), but it was among hapt's four best only until hapt
  // found four better ones (17.5-19.6 s); in the runs whose polls missed that while (hapt found
  // them in the 0.13 s before the first poll), it was never given, and they ended at
  // 16.0764 s. The feed now gives every plan that entered a member's four best when it was
  // offered (Work::entered), whenever the poll comes (refine.cpp `add` has the other half:
  // a seed overtaken before it was expanded). Every plan within kExplore of the member's
  // best instead: wall +18%, not kept (docs/search.md, tenth session). This list is what the
  // settling refinement starts from: the members' final plans. The four best of all are
  // among the members' four best (a plan among the four best of all has at most three of its
  // member's ahead of it); that refinement records them twice, and dropping them is a change
  // of what it keeps, to be measured (bench-lottery), not a tidy-up.
  constexpr std::size_t kOverall = 4;
  std::vector<Candidate> all, out;
  for (const auto& own : members) {
    out.insert(out.end(), own.begin(), own.begin() + std::min(kSeedsPerMember, own.size()));
    all.insert(all.end(), own.begin(), own.end());
  }
  std::sort(all.begin(), all.end(), by_estimate);
  if (all.size() > kOverall) all.resize(kOverall);
  out.insert(out.end(), all.begin(), all.end());
  return out;
}

Result<SearchOutput> run(const std::string& algorithm, const ModelSpec& model, const ClusterSpec& cluster,
                         const cost::ComputeModel& compute, const Options& opt) {
  const auto& names = algorithm_names();
  if (std::find(names.begin(), names.end(), algorithm) == names.end())
    return Diagnostic{"", 0, 0, "--algo", "unknown algorithm '" + algorithm + "' (auto, uniform, exhaustive, hapt, heteroauto, mcts, hexiscale)"};
  const auto start = Clock::now();
  const double budget = opt.time_budget_s > 0 ? opt.time_budget_s : default_time_budget(cluster);
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget));
  std::unique_ptr<tbb::global_control> threads;
  if (opt.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, opt.threads);

  const std::vector<Recompute> recompute = opt.recompute.empty() ? model.training.recompute : opt.recompute;
  Evaluator eval(model, cluster, compute, recompute, opt.granularity, opt.predict);

  std::vector<std::string> chosen;
  if (algorithm != "auto") {
    chosen = {algorithm};
  } else if (!opt.auto_algorithms.empty()) {
    chosen = opt.auto_algorithms;
  } else {
    chosen = {"uniform", "hapt", "heteroauto", "mcts", "hexiscale"};
    if (small_instance(eval)) chosen.push_back("exhaustive");
  }
  SearchOutput out;
  std::vector<std::unique_ptr<Work>> works;
  // auto keeps a fifth of the budget for refining the portfolio's best plans.
  const auto algorithms_deadline =
      algorithm == "auto" ? start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(0.8 * budget))
                          : deadline;
  for (const auto& name : chosen) works.push_back(std::make_unique<Work>(eval, opt, algorithms_deadline, name));
  if (algorithm == "auto") works.push_back(std::make_unique<Work>(eval, opt, deadline, "refine"));
  std::vector<double> seconds(works.size(), 0);
  auto run_one = [&](std::size_t i) {
    Work& w = *works[i];
    const auto t0 = Clock::now();
    if (w.name == "uniform") run_uniform(w);
    else if (w.name == "exhaustive") run_exhaustive(w);
    else if (w.name == "hapt") run_hapt(w);
    else if (w.name == "heteroauto") run_heteroauto(w);
    else if (w.name == "mcts") run_mcts(w);
    else if (w.name == "hexiscale") run_hexiscale(w);
    seconds[i] += std::chrono::duration<double>(Clock::now() - t0).count();
  };
  auto is_quick = [](const std::string& name) { return name == "uniform" || name == "heteroauto"; };
  // The refinement (auto only): from every candidate that entered a member's four best when
  // it was offered (Work::entered, portfolio_seeds says why), each given once; its state
  // (refine.cpp) carries over from one call to the next, and its row counts its seeds too, so
  // it never reports worse than what it started from.
  Refinement refinement;
  // The settling refinement (below) and its state, where it ran.
  std::unique_ptr<Work> settling;
  Refinement settled;
  std::mutex seeds_mutex;
  std::vector<Candidate> seeds;   // every candidate given to the refinement
  std::set<std::vector<int>> fed;  // their layouts, micro-batches and schedules
  auto portfolio = [&] {
    std::vector<std::vector<Candidate>> kept;
    for (auto& w : works)
      if (w->name != "refine") kept.push_back(w->peek());
    return portfolio_seeds(kept);
  };
  std::vector<std::size_t> gathered(works.size(), 0);  // of each member's entered(), given so far
  auto gather = [&] {
    std::vector<Candidate> given;
    std::lock_guard<std::mutex> lock(seeds_mutex);
    for (std::size_t i = 0; i < works.size(); ++i) {
      if (works[i]->name == "refine") continue;
      std::vector<Candidate> fresh = works[i]->entered(gathered[i]);
      gathered[i] += fresh.size();
      std::stable_sort(fresh.begin(), fresh.end(), by_estimate);  // each member's best first
      for (const Candidate& c : fresh)
        if (fed.insert(layout_key(c.layout)).second) given.push_back(c), seeds.push_back(c);
    }
    return given;
  };
  auto refine = [&](const std::vector<Candidate>& given, const Feed& more) {
    const auto t0 = Clock::now();
    run_refine(*works.back(), refinement, given, more);
    seconds.back() += std::chrono::duration<double>(Clock::now() - t0).count();
  };
  if (algorithm != "auto") {
    run_one(0);
  } else {
    // The quick members first (uniform, heteroauto), then the refinement of what they found
    // on every core, until it converges or for a quarter of the budget: on large clusters it
    // finds the best plans long before the slower members would (issue 20). Then the slower
    // members side by side, each on a thread of its own so that the system shares the cores
    // among them (tasks of one task group would queue behind the long ones), all of them
    // behind the refinement, which runs on one more thread, fed each member's best plans as
    // they are found, and takes the cores whenever it has work. Each member ends by itself
    // when its space is done (mcts when its subtrees converge), at 80% of the budget, or —
    // Options::converge — once the refinement has converged on everything they found and the
    // portfolio's best estimate has not improved by 0.1% for half the members' time it took to
    // reach it (the time in which they had the cores: the refinement was waiting; at least
    // 0.5 s; exhaustive, the oracle of small instances, is never stopped). Then the refinement
    // of everything they found, in what is left of the budget.
    start_workers();
    Incumbent incumbent;
    for (auto& w : works) w->incumbent = &incumbent;
    std::vector<std::thread> quick;
    for (std::size_t i = 0; i < works.size(); ++i)
      if (is_quick(works[i]->name)) quick.emplace_back(run_one, i);
    for (auto& t : quick) t.join();
    works.back()->set_deadline(std::min(algorithms_deadline, start + std::chrono::duration_cast<Clock::duration>(
                                                                          std::chrono::duration<double>(0.25 * budget))));
    refine(gather(), nullptr);
    std::vector<std::thread> slow;
    std::atomic<int> running{0};
    for (std::size_t i = 0; i < works.size(); ++i)
      if (works[i]->name != "refine" && !is_quick(works[i]->name)) {
        ++running;
        slow.emplace_back([&, i] { behind([&] { run_one(i); }), --running; });
      }
    // Where the quick members found nothing to refine (memory-tight clusters, and large ones
    // their shapes do not divide) the slower members are the only explorers, and the search
    // has not converged while one of them is still closing in: it improved its own best to
    // within kQuietWindow of the portfolio's best in the last kQuiet s of the members' clock
    // (at most a quarter of the budget). Issue 20, midsize-25: mcts's plans came 49%, 44%,
    // 22% and 16.5% behind the best at clock 0.11, 0.28, 0.85 and 1.23 s, and the last
    // descends to a plan 12% better than any other; midsize-28: mcts's plans lead to one 11%
    // better than hapt's. Until 2026-12-07 such searches waited for 2 s of the members'
    // clock instead (kTight), where members far behind or long stalled gain nothing:
    // 10,000 devices waited 2 s after its last improvement (hapt's at clock 0.05; mcts's
    // best 2.3x behind). Elsewhere (exp3) the quick members' plans have seeded the search.
    constexpr double kQuiet = 1, kQuietWindow = 1;
    bool tight = true;
    for (const auto& w : works)
      if (is_quick(w->name) && w->found()) tight = false;
    const double quiet = std::min(kQuiet, 0.25 * budget);
    works.back()->set_deadline(algorithms_deadline);
    std::thread refiner([&] {
      refine(gather(), [&]() -> std::optional<std::vector<Candidate>> {
        if (running == 0) return std::nullopt;
        return gather();
      });
    });
    for (auto tick = Clock::now(); running > 0;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const auto now = Clock::now();
      if (refinement.waiting) incumbent.tick(std::chrono::duration<double>(now - tick).count());
      tick = now;
      if (opt.converge && refinement.waiting && incumbent.stalled(0.5) &&
          (!tight || incumbent.members_quiet(kQuietWindow, quiet))) {
        for (auto& w : works)
          if (w->name != "exhaustive") w->set_deadline(std::min(w->deadline(), Clock::now()));
        break;
      }
    }
    for (auto& t : slow) t.join();
    refiner.join();
    works.back()->set_deadline(deadline);
    // From what the slower members found last (mcts offers its plans when it ends): the
    // refinement had converged on everything before (the convergence test waits for it, and
    // without the test it ends when the feed does), so only new seeds it would follow or
    // descend from are worth another call (kRefineSlack, kExplore; on 10,000 devices a call
    // is 8 or more expansions of 2,000-9,000 evaluations: 1.7 s). Midsize-25's best descends
    // from mcts's last plan, offered when it ended 16% behind the best.
    auto last = gather();
    last.erase(std::remove_if(last.begin(), last.end(),
                              [&](const Candidate& c) { return c.estimate_s > refinement.best * (1 + kExplore); }),
               last.end());
    if (!last.empty()) refine(last, nullptr);
    // Where every member ended by itself (its space done, mcts's subtrees converged; none
    // stopped by the convergence test or the budget), their plans are the same in every run,
    // but the refinement's are not: it took them as the feed gave them, and where each entered
    // its expansions decided the basin it reached. Issue 20, midsize-31: hapt and mcts gave the
    // same plans in every run (1,023 and 1,698 layouts), and 10 runs reached 1.8199 s (4),
    // 1.8689 (5) or 2.0119 (1). A second refinement, from a fresh state, of their final plans
    // (`portfolio`: each member's four best and the four best of all, given best first)
    // reaches the same plans in every run, and the simulator ranks them beside the first's:
    // midsize-31 1.8689 at worst, midsize-2 and -6 3.5% and 5% better than main's every run.
    // It costs 0.01-2.0 s (mean 0.36 s on the 50 mid-size instances); where the members were
    // stopped (exp3 and 10,000 devices: 0.6 and 1.2 s there, and no better plan) it does not run.
    bool ended = true;
    for (const auto& w : works)
      if (w->name != "refine" && w->timed_out()) ended = false;
    if (ended) {
      const auto t0 = Clock::now();
      std::vector<Candidate> from = portfolio();
      std::stable_sort(from.begin(), from.end(), by_estimate);
      settling = std::make_unique<Work>(eval, opt, deadline, "refine again");  // its name for --progress
      run_refine(*settling, settled, from, nullptr);
      seconds.back() += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    // A neighbouring problem's plans (a sweep's point before): a call of their own after all
    // that, so that everything above runs as it would without them. Given earlier they sped
    // the portfolio's convergence, stopping the slower members before they found what they
    // find alone (measured: a sweep point 4% worse).
    std::vector<Candidate> warm;
    {
      std::lock_guard<std::mutex> lock(seeds_mutex);
      // Every one is ranked (seeds; the ranking tells candidates apart by split and recompute
      // too); the refinement takes each layout it was not given yet.
      for (Candidate& c : warm_candidates(eval, opt.warm_start)) {
        seeds.push_back(c);
        if (fed.insert(layout_key(c.layout)).second) warm.push_back(std::move(c));
      }
    }
    if (!warm.empty()) {
      // What the refinement keeps is its best estimates: the candidates it kept before this call
      // are ranked too, or better estimates from the warm plans could push out the plan the
      // simulator would have ranked first (measured: a sweep point 1% worse).
      for (Candidate& c : works.back()->peek()) seeds.push_back(std::move(c));
      refine(warm, nullptr);
    }
  }

  // Re-rank each algorithm's best candidates with the simulator: each distinct candidate once
  // (the refinement starts from the others' best), all in parallel.
  std::vector<Plan> plans;
  std::vector<std::vector<std::size_t>> of_work(works.size());
  std::map<std::vector<int>, std::size_t> index;
  std::vector<std::vector<Candidate>> taken(works.size());
  for (std::size_t i = 0; i < works.size(); ++i) {
    std::vector<Candidate>& candidates = taken[i] = works[i]->take();
    if (works[i]->name == "refine") {
      candidates.insert(candidates.end(), seeds.begin(), seeds.end());
      const auto routes = refinement.close_routes(kRefineSlack);  // refine.cpp keep_route says why
      candidates.insert(candidates.end(), routes.begin(), routes.end());
      if (settling) {
        for (Candidate& c : settling->take()) candidates.push_back(std::move(c));
        const auto more = settled.close_routes(kRefineSlack);
        candidates.insert(candidates.end(), more.begin(), more.end());
      }
    }
  }
  // The simulator ranks each algorithm's candidates whose estimate is within kRankWindow of
  // its own best estimate: its row of the report is the best of them, as when it runs alone.
  // The estimate errs near the best by the gradient sync and optimizer steps (per stage there,
  // per group in the simulator) and where eq. 13 stretches stages the warm-ups hide; the most
  // it overestimated any candidate of four seed setups (exp3, HAPT GPT-15B, H2 A, HexiScale
  // setting 1) under eq. 12 was 14% (a HexiScale plan estimated 2.2x the best), so a
  // candidate estimated 25% worse than the best cannot simulate better than it. On 10,000
  // devices simulating every kept candidate took 2 of 11 s (issue 20).
  constexpr double kRankWindow = 0.25;
  for (std::size_t i = 0; i < works.size(); ++i) {
    const std::vector<Candidate>& candidates = taken[i];
    double own_best = 1e300;
    for (const Candidate& c : candidates) own_best = std::min(own_best, c.estimate_s);
    for (const Candidate& c : candidates) {
      if (c.estimate_s > own_best * (1 + kRankWindow)) continue;
      std::vector<int> key = layout_key(c.layout);
      key.insert(key.end(), c.first_unit.begin(), c.first_unit.end());
      for (Recompute r : c.recompute) key.push_back(static_cast<int>(r));
      auto [it, fresh] = index.emplace(std::move(key), plans.size());
      if (fresh) plans.push_back(eval.to_plan(c));
      of_work[i].push_back(it->second);
    }
    for (Plan& p : works[i]->take_plans()) of_work[i].push_back(plans.size()), plans.push_back(std::move(p));
  }
  std::vector<std::optional<predict::Outcome>> outcomes(plans.size());
  tbb::parallel_for(std::size_t(0), plans.size(), [&](std::size_t j) {
    if (!validate_plan(plans[j], "search").empty()) return;  // never expected
    auto outcome = predict::predict(plans[j], compute, opt.predict);
    if (outcome && outcome->fits_memory()) outcomes[j] = std::move(*outcome);
  });
  std::vector<std::pair<double, predict::Outcome>> ranked;
  // A plan's decisions (schedule, pipelines, stages and their devices): two algorithms may
  // reach the same plan by different candidates (the refinement's own plans), and the ranking
  // lists each plan once (`--write-top` writes distinct plans to run).
  auto decisions = [](const Plan& p) {
    std::vector<int> key{static_cast<int>(p.schedule), static_cast<int>(p.granularity)};
    for (const Pipeline& q : p.pipelines) {
      key.insert(key.end(), {q.micro_batch_size, q.num_microbatches, static_cast<int>(q.stages.size())});
      key.insert(key.end(), q.bucket_microbatches.begin(), q.bucket_microbatches.end());
      for (const Stage& st : q.stages) {
        key.insert(key.end(), {p.cluster.index_of(st.subcluster), st.first, st.last, st.tp, st.cp, st.dp,
                               static_cast<int>(st.recompute), st.warmup.value_or(-1),
                               st.resharding ? static_cast<int>(*st.resharding) : -1});
        for (const DeviceRef& d : st.devices) key.insert(key.end(), {d.node, d.device});
      }
    }
    return key;
  };
  std::set<std::vector<int>> listed;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < works.size(); ++i) {
    Work& w = *works[i];
    // A member stopped before the budget because the search had converged is not "out of time".
    const bool stopped = w.timed_out() && w.deadline() < algorithms_deadline;
    const std::int64_t layouts = w.layouts() + (&w == works.back().get() && settling ? settling->layouts() : 0);
    AlgorithmReport report{w.name, seconds[i], layouts, std::nullopt, w.timed_out() && !stopped,
                           stopped ? "stopped when the search had converged" : ""};
    total += layouts;
    for (std::size_t j : of_work[i]) {
      if (!outcomes[j]) continue;
      const double t = outcomes[j]->plan.predicted->iteration_s;
      if (!report.iteration_s || t < *report.iteration_s) report.iteration_s = t;
      if (listed.insert(decisions(outcomes[j]->plan)).second) ranked.emplace_back(t, *outcomes[j]);
    }
    if (!report.iteration_s)
      report.note = !w.skipped.empty() ? w.skipped
                    : stopped ? "stopped when the search had converged, before finding a plan"
                    : w.timed_out() ? "ran out of time before finding a plan" : "found no plan that fits";
    out.algorithms.push_back(std::move(report));
  }
  if (ranked.empty()) return Diagnostic{"", 0, 0, "", binding_constraint(eval, algorithm)};
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const Plan& best = ranked.front().second.plan;
  out.lower_bound_s = lower_bound(eval, opt.micro_batch_sizes.empty() ? model.training.micro_batch_sizes : opt.micro_batch_sizes,
                                  ranked.front().first, {int(best.pipelines.size()), best.pipelines.front().micro_batch_size});
  for (auto& [t, outcome] : ranked) {
    AlgorithmInfo info;
    info.name = algorithm;
    info.seconds = out.seconds;
    info.candidates_evaluated = total;
    info.lower_bound_s = out.lower_bound_s;
    info.gap = out.lower_bound_s > 0 ? t / out.lower_bound_s - 1 : 0;
    for (const auto& r : out.algorithms)
      info.results.push_back({r.name, r.iteration_s.value_or(0), r.seconds, r.candidates});
    outcome.plan.algorithm = std::move(info);
    out.plans.push_back(std::move(outcome));
  }
  return out;
}

}  // namespace het::search
