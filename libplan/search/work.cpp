#include <algorithm>
#include <cstdio>
#include <numeric>

#include "search/algorithms.hpp"

namespace het::search {

Work::Work(const Evaluator& e, const Options& o, std::chrono::steady_clock::time_point deadline, std::string n)
    : eval(e), opt(o), name(std::move(n)), deadline_(deadline) {
  micro_batch_sizes = o.micro_batch_sizes.empty() ? e.model().training.micro_batch_sizes : o.micro_batch_sizes;
  schedules = o.schedules.empty() ? std::vector<ScheduleKind>{ScheduleKind::one_f_one_b, ScheduleKind::h_1f1b} : o.schedules;
}

void Incumbent::offer(double estimate_s, bool own) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (estimate_s < best_ * (1 - 1e-3) || (own && estimate_s <= best_ * (1 + kMemberWindow))) improved_s_ = clock_s_;
  best_ = std::min(best_, estimate_s);
  if (own) own_.emplace_back(clock_s_, estimate_s);
}

bool Incumbent::members_quiet(double window, double seconds) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [at, estimate_s] : own_)
    if (clock_s_ - at < seconds && estimate_s <= best_ * (1 + window)) return false;
  return true;
}

void Incumbent::tick(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  clock_s_ += seconds;
}

bool Incumbent::stalled(double at_least_s) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (best_ >= 1e300) return false;  // nothing found yet: not converged
  return clock_s_ - improved_s_ >= std::max(at_least_s, improved_s_ / 2);
}

double Incumbent::clock_s() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return clock_s_;
}

void Work::note(double estimate_s) const {
  if (!incumbent) return;
  double own = own_best_.load();
  while (estimate_s < own && !own_best_.compare_exchange_weak(own, estimate_s)) {
  }
  incumbent->offer(estimate_s, estimate_s < own * (1 - 1e-3));
}

void Work::set_deadline(std::chrono::steady_clock::time_point d) {
  if (d > deadline_.load()) timed_out_ = false;
  deadline_ = d;
}

bool Work::expired() const {
  if (std::chrono::steady_clock::now() < deadline_.load()) return false;
  timed_out_ = true;
  return true;
}

void Work::offer(const Candidate& c) {
  note(c.estimate_s);
  std::lock_guard<std::mutex> lock(mutex_);
  // The same candidate twice (found on two ways) would take two of the k places.
  for (const Candidate& t : top_)
    if (t.estimate_s == c.estimate_s && t.first_unit == c.first_unit && t.recompute == c.recompute &&
        t.layout.pipelines == c.layout.pipelines && t.layout.stages == c.layout.stages &&
        t.layout.micro_batch_size == c.layout.micro_batch_size && t.layout.schedule == c.layout.schedule)
      return;
  // Among the kSeedsPerMember best (of at most the k kept: `--top 1` keeps one) as it enters.
  const auto ahead = static_cast<std::size_t>(
      std::count_if(top_.begin(), top_.end(), [&](const Candidate& t) { return t.estimate_s < c.estimate_s; }));
  const std::size_t k = static_cast<std::size_t>(std::max(1, opt.top_k));
  if (ahead < std::min(kSeedsPerMember, k)) entered_.push_back(c);
  top_.push_back(c);
  std::sort(top_.begin(), top_.end(), [](const Candidate& a, const Candidate& b) { return a.estimate_s < b.estimate_s; });
  if (top_.size() > k) top_.resize(k);
}

std::vector<Candidate> Work::entered(std::size_t from) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (from >= entered_.size()) return {};
  return {entered_.begin() + static_cast<long>(from), entered_.end()};
}

double Work::best() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // A candidate must beat the worst kept one to enter the top k.
  if (static_cast<int>(top_.size()) < std::max(1, opt.top_k)) return 1e300;
  return top_.back().estimate_s;
}

std::vector<Candidate> Work::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(top_);
}

std::vector<Candidate> Work::peek() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return top_;
}

void Work::offer_plan(Plan plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  plans_.push_back(std::move(plan));
}

std::vector<Plan> Work::take_plans() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(plans_);
}

namespace {
// The pipeline micro-batch for `b` sequences per data-parallel replica of every stage.
int pipeline_microbatch(const Layout& l, int b) {
  int d = 1;
  for (const auto& s : l.stages) d = std::lcm(d, s.dp);
  return b * d;
}
}  // namespace

void Work::consider(Layout layout) { consider_split(std::move(layout), {}, true); }

void Work::consider_split(Layout layout, const std::vector<int>& first_unit, bool prune) {
  for (int b : micro_batch_sizes) {
    if (expired()) return;
    layout.micro_batch_size = pipeline_microbatch(layout, b);
    if (!eval.admissible(layout)) continue;
    const bool fixed = !first_unit.empty();
    const auto found = eval.evaluate(layout, schedules, fixed ? &first_unit : nullptr, prune ? best() : Evaluator::kNoCutoff);
    layouts_ += static_cast<std::int64_t>(schedules.size());
    for (const auto& c : found) offer(c);
  }
}

void Work::note_progress(const std::string& what) const {
  if (!opt.progress) return;
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (now - last_progress_ < std::chrono::milliseconds(500)) return;
    last_progress_ = now;
  }
  double b = 1e300;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!top_.empty()) b = top_.front().estimate_s;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s: %lld layouts, %s", name.c_str(), static_cast<long long>(layouts()),
                b < 1e300 ? ("best estimate " + std::to_string(b).substr(0, 8) + " s").c_str() : "none fits yet");
  opt.progress(std::string(buf) + (what.empty() ? "" : ", " + what));
}

std::vector<Shape3> factorisations(const Evaluator& eval, int sub, int devices) {
  const ModelSpec& m = eval.model();
  const SubclusterSpec& s = eval.cluster().subclusters[sub];
  std::vector<Shape3> out;
  for (int tp = 1; tp <= devices && tp <= s.devices_per_node; tp *= 2) {
    if (devices % tp || m.num_attention_heads % tp || m.num_kv_heads % tp || s.devices_per_node % tp) continue;
    for (int cp = 1; cp * tp <= devices; cp *= 2) {
      if ((devices / tp) % cp || m.seq_length % cp) continue;
      if (cp > 1 && m.seq_length < 8192) break;  // context parallelism pays off only for long sequences
      out.push_back({devices / (tp * cp), cp, tp});
    }
  }
  return out;
}

}  // namespace het::search
