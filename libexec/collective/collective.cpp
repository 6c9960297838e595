#include "collective/collective.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#ifdef HET_HAVE_NCCL
#include "collective/nccl_group.hpp"
#endif

namespace het::collective {

namespace {

// The ring collectives of transport/tcp.hpp: member i owns chunk (i+1) mod p of n·c/p cuts.
class TcpGroup final : public Group {
 public:
  TcpGroup(transport::Peers& peers, std::vector<int> ranks, std::uint32_t tag) : peers_(peers), ranks_(std::move(ranks)), tag_(tag) {}
  std::string transport() const override { return "tcp"; }
  Result<Done> all_reduce_sum(float* data, std::size_t n) override { return transport::all_reduce_sum(peers_, ranks_, data, n, tag_); }
  Result<Done> reduce_scatter_sum(float* data, std::size_t n) override {
    return transport::reduce_scatter_sum(peers_, ranks_, data, n, tag_);
  }
  Result<Done> all_gather(float* data, std::size_t n) override { return transport::all_gather(peers_, ranks_, data, n, tag_); }
  Range owned(std::size_t n) const override {
    const std::size_t p = ranks_.size();
    if (p <= 1) return {0, n};
    const std::size_t c = std::size_t(transport::owned_chunk(ranks_, peers_.rank()));
    return {n * c / p, n * (c + 1) / p};
  }

 private:
  transport::Peers& peers_;
  std::vector<int> ranks_;
  std::uint32_t tag_;
};

std::string list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

#ifdef HET_HAVE_NCCL
// A name unique within the job for NCCL's rendezvous key: the tag and a hash of the members.
std::string group_name(std::uint32_t tag, const std::vector<int>& ranks) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int r : ranks)
    for (int b = 0; b < 4; ++b) h = (h ^ ((std::uint32_t(r) >> (8 * b)) & 0xff)) * 1099511628211ull;
  static const char* hex = "0123456789abcdef";
  std::string out = "t" + std::to_string(tag) + "-n" + std::to_string(ranks.size()) + "-";
  for (int i = 15; i >= 0; --i) out += hex[(h >> (4 * i)) & 0xf];
  return out;
}
#endif

}  // namespace

bool nccl_built() {
#ifdef HET_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Seat seat_here(int cuda_ordinal, const std::string& subcluster) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  std::string device = "cpu";
  if (cuda_ordinal >= 0) {
    device = "cuda:" + std::to_string(cuda_ordinal);
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr && *visible != '\0') device += "@" + std::string(visible);
  }
  return {host, device, subcluster};
}

Result<std::vector<Seat>> exchange_seats(rendezvous::Rendezvous& rendezvous, int rank, int world, const Seat& mine,
                                         double timeout_s) {
  // host \n device \n subcluster: none of them holds a newline.
  if (auto p = rendezvous.publish("seat-" + std::to_string(rank), mine.host + "\n" + mine.device + "\n" + mine.subcluster); !p)
    return p.errors();
  std::vector<Seat> seats(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    if (r == rank) {
      seats[std::size_t(r)] = mine;
      continue;
    }
    auto value = rendezvous.wait("seat-" + std::to_string(r), timeout_s);
    if (!value) return value.errors();
    const auto a = value->find('\n'), b = a == std::string::npos ? a : value->find('\n', a + 1);
    if (b == std::string::npos)
      return failure(ErrorKind::internal, "rank " + std::to_string(r) + " published a malformed seat", "seat-" + std::to_string(r));
    seats[std::size_t(r)] = {value->substr(0, a), value->substr(a + 1, b - a - 1), value->substr(b + 1)};
  }
  return seats;
}

Choice choose(const std::vector<int>& ranks, const std::vector<Seat>& seats, bool built) {
  if (ranks.size() <= 1) return {false, "a group of one needs no transport"};
  if (!built) return {false, "this build has no NCCL"};
  std::set<std::pair<std::string, std::string>> used;
  for (int r : ranks) {
    const Seat& s = seats.at(std::size_t(r));
    if (s.device.rfind("cuda:", 0) != 0) return {false, "rank " + std::to_string(r) + " computes on the " + s.device};
    if (s.subcluster != seats.at(std::size_t(ranks.front())).subcluster) return {false, "members in different subclusters"};
    if (!used.insert({s.host, s.device}).second)
      return {false, "two members share " + s.device + " on " + s.host + " (NCCL refuses two ranks on one GPU)"};
  }
  return {true, "every member on a GPU of its own in subcluster " + seats.at(std::size_t(ranks.front())).subcluster};
}

Fabric::Fabric(transport::Peers& peers) : peers_(peers) {}

Fabric::Fabric(transport::Peers& peers, std::vector<Seat> seats, rendezvous::Rendezvous& rendezvous, int cuda_ordinal,
               double timeout_s)
    : peers_(peers), seats_(std::move(seats)), rendezvous_(&rendezvous), cuda_ordinal_(cuda_ordinal), timeout_s_(timeout_s) {}

Fabric::~Fabric() = default;

Result<Group*> Fabric::group(const std::vector<int>& ranks, std::uint32_t tag) {
  const auto key = std::make_pair(tag, ranks);
  if (auto it = groups_.find(key); it != groups_.end()) return it->second.get();
  if (std::find(ranks.begin(), ranks.end(), peers_.rank()) == ranks.end())
    return failure(ErrorKind::internal, "rank " + std::to_string(peers_.rank()) + " is not a member of group " + list(ranks), "group");
  std::unique_ptr<Group> made;
  const Choice choice = seats_.empty() ? Choice{false, "no seats were exchanged"} : choose(ranks, seats_, nccl_built());
#ifdef HET_HAVE_NCCL
  if (choice.nccl) {
    auto g = make_nccl_group(group_name(tag, ranks), ranks, peers_.rank(), cuda_ordinal_, *rendezvous_, timeout_s_);
    if (!g) return g.errors();
    made = std::move(*g);
  }
#endif
  if (!made) {
    made = std::make_unique<TcpGroup>(peers_, ranks, tag);
    if (ranks.size() > 1) ++tcp_reasons_[choice.reason];
  }
  return (groups_[key] = std::move(made)).get();
}

bool Fabric::nccl(const std::vector<int>& ranks) const {
  return !seats_.empty() && choose(ranks, seats_, nccl_built()).nccl;
}

std::string Fabric::summary() const {
  int nccl = 0, tcp = 0;
  for (const auto& [key, g] : groups_) {
    if (key.second.size() <= 1) continue;
    (g->transport() == "nccl" ? nccl : tcp) += 1;
  }
  if (nccl + tcp == 0) return "no groups";
  auto count = [](int n) { return std::to_string(n) + (n == 1 ? " group" : " groups"); };
  std::string out;
  if (nccl) out = "nccl: " + count(nccl);
  if (tcp) {
    std::string why;
    for (const auto& [reason, n] : tcp_reasons_) why += (why.empty() ? "" : "; ") + reason;
    out += (out.empty() ? "" : "; ") + std::string("tcp: ") + count(tcp) + " (" + why + ")";
  }
  return out;
}

}  // namespace het::collective
