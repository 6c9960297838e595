// Local refinement of the portfolio's best plans: best-first search over neighbouring layouts,
// each evaluated like any other (best split, every micro-batch size and schedule). It
// crosses the boundaries between the seed algorithms' spaces: it trades stage data
// parallelism for identical pipelines and back, refactors a stage's (dp, cp, tp), splits,
// merges, drops and adds stages, and swaps the order of subclusters.
#include <algorithm>
#include <numeric>
#include <set>

#include <tbb/parallel_for.h>

#include "search/algorithms.hpp"

namespace het::search {

namespace {

using Key = std::vector<int>;

Key key_of(const Layout& l) {
  Key k = {l.pipelines};
  for (const auto& s : l.stages) k.insert(k.end(), {s.sub, s.dp, s.cp, s.tp});
  return k;
}

std::vector<Layout> neighbours(const Evaluator& eval, const Layout& l) {
  std::vector<Layout> out;
  const int S = static_cast<int>(l.stages.size());
  const ClusterSpec& c = eval.cluster();
  // Identical pipelines <-> stage data parallelism.
  if (std::all_of(l.stages.begin(), l.stages.end(), [](const StageShape& s) { return s.dp % 2 == 0; })) {
    Layout n = l;
    n.pipelines *= 2;
    for (auto& s : n.stages) s.dp /= 2;
    out.push_back(n);
  }
  if (l.pipelines % 2 == 0) {
    Layout n = l;
    n.pipelines /= 2;
    for (auto& s : n.stages) s.dp *= 2;
    out.push_back(n);
  }
  for (int i = 0; i < S; ++i) {
    const StageShape& s = l.stages[i];
    // Another (dp, cp, tp) for the same devices.
    for (const Shape3& f : factorisations(eval, s.sub, s.devices())) {
      if (f.dp == s.dp && f.cp == s.cp && f.tp == s.tp) continue;
      Layout n = l;
      n.stages[i] = {s.sub, f.dp, f.cp, f.tp};
      out.push_back(n);
    }
    // Split into two stages of half the devices each.
    if (s.devices() % 2 == 0)
      for (const Shape3& f : factorisations(eval, s.sub, s.devices() / 2)) {
        Layout n = l;
        n.stages[i] = {s.sub, f.dp, f.cp, f.tp};
        n.stages.insert(n.stages.begin() + i, n.stages[i]);
        out.push_back(n);
      }
    // Merge with the next stage of the same subcluster.
    if (i + 1 < S && l.stages[i + 1].sub == s.sub)
      for (const Shape3& f : factorisations(eval, s.sub, s.devices() + l.stages[i + 1].devices())) {
        Layout n = l;
        n.stages[i] = {s.sub, f.dp, f.cp, f.tp};
        n.stages.erase(n.stages.begin() + i + 1);
        out.push_back(n);
      }
    // Drop the stage.
    if (S > 1) {
      Layout n = l;
      n.stages.erase(n.stages.begin() + i);
      out.push_back(n);
    }
  }
  // Add a stage of the free devices of a subcluster, after its last stage (or at either end).
  std::vector<int> used(c.subclusters.size(), 0);
  for (const auto& s : l.stages) used[s.sub] += l.pipelines * s.devices();
  for (std::size_t j = 0; j < c.subclusters.size(); ++j) {
    const int free = (c.subclusters[j].num_devices() - used[j]) / l.pipelines;
    if (free < 1) continue;
    for (int g = free; g >= 1; g /= 2) {
      const auto fs = factorisations(eval, int(j), g);
      if (fs.empty()) continue;
      const StageShape add{int(j), fs.front().dp, fs.front().cp, fs.front().tp};
      int last = -1;
      for (int i = 0; i < S; ++i)
        if (l.stages[i].sub == int(j)) last = i;
      for (int at : {last + 1, 0, S}) {
        if (at < 0) continue;
        Layout n = l;
        n.stages.insert(n.stages.begin() + at, add);
        out.push_back(n);
      }
      break;
    }
  }
  // Swap two neighbouring runs of subclusters.
  for (int i = 0; i + 1 < S; ++i) {
    if (l.stages[i].sub == l.stages[i + 1].sub) continue;
    int a = i, b = i + 1;
    while (a > 0 && l.stages[a - 1].sub == l.stages[i].sub) --a;
    int e = b;
    while (e + 1 < S && l.stages[e + 1].sub == l.stages[b].sub) ++e;
    Layout n = l;
    std::rotate(n.stages.begin() + a, n.stages.begin() + b, n.stages.begin() + e + 1);
    out.push_back(n);
  }
  return out;
}

}  // namespace

void run_refine(Work& w, const std::vector<Candidate>& seeds, std::set<Key>& seen) {
  // Best-first over layouts: expand the best unexpanded one (all its neighbours), up to a
  // number of expansions, so that a step that is no better by itself (adding a stage before
  // splitting it) can still lead somewhere better.
  // It stops after kExpansions, or once kPatience expansions in a row found nothing better.
  // A neighbour is followed only when it estimates within kSlack of the best so far (and
  // enters the k best kept): a step through a worse layout may lead somewhere better, a step
  // through a much worse one rarely does, and pruning by it makes an expansion several times
  // cheaper (issue 20: exp3, 50 mid-size instances).
  constexpr int kExpansions = 128, kPatience = 8;
  constexpr double kSlack = 0.01;
  std::vector<Candidate> frontier;
  for (const auto& s : seeds) {
    w.offer(s);
    if (seen.insert(key_of(s.layout)).second) frontier.push_back(s);
  }
  double best = 1e300;
  for (const auto& s : seeds) best = std::min(best, s.estimate_s);
  for (int step = 0, stale = 0; step < kExpansions && stale < kPatience && !frontier.empty() && !w.expired(); ++step) {
    auto it = std::min_element(frontier.begin(), frontier.end(),
                               [](const Candidate& a, const Candidate& b) { return a.estimate_s < b.estimate_s; });
    const Layout at = it->layout;
    frontier.erase(it);
    // Every new neighbour at every micro-batch size, evaluated in parallel against the k best
    // kept when the expansion began (so the result does not depend on the thread count); a
    // neighbour that cannot enter them is not followed.
    std::vector<Layout> fresh;
    for (const Layout& n : neighbours(w.eval, at))
      if (seen.insert(key_of(n)).second) fresh.push_back(n);
    std::vector<Layout> tries;
    std::vector<std::size_t> of;  // the neighbour of each try
    for (std::size_t i = 0; i < fresh.size(); ++i)
      for (int b : w.micro_batch_sizes) {
        Layout l = fresh[i];
        int d = 1;
        for (const auto& st : l.stages) d = std::lcm(d, st.dp);
        l.micro_batch_size = b * d;
        if (w.eval.admissible(l)) tries.push_back(std::move(l)), of.push_back(i);
      }
    const double cutoff = std::min(w.best(), best * (1 + kSlack));
    std::vector<std::vector<Candidate>> results(tries.size());
    tbb::parallel_for(std::size_t(0), tries.size(), [&](std::size_t j) {
      if (w.expired()) return;
      results[j] = w.eval.evaluate(tries[j], w.schedules, nullptr, cutoff);
      for (const auto& c : results[j]) w.note(c.estimate_s);  // auto's convergence test sees progress at once
    });
    w.count(static_cast<std::int64_t>(tries.size() * w.schedules.size()));
    for (std::size_t i = 0, j = 0; i < fresh.size(); ++i) {
      std::vector<Candidate> found;
      for (; j < tries.size() && of[j] == i; ++j)
        for (auto& c : results[j])
          if (c.estimate_s < cutoff) found.push_back(std::move(c));
      if (found.empty()) continue;
      std::sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) { return a.estimate_s < b.estimate_s; });
      for (const auto& c : found) w.offer(c);
      if (found.front().estimate_s < best) best = found.front().estimate_s, stale = -1;
      frontier.push_back(found.front());  // the layout's best micro-batch size and schedule
    }
    if (w.expired()) return;
    ++stale;
    w.note_progress("refining");
  }
}

}  // namespace het::search
