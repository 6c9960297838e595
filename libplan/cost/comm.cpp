#include "cost/comm.hpp"

#include <algorithm>

namespace het::cost {

double p2p_s(double bytes, const LinkSpec& l) { return bytes <= 0 ? 0 : l.latency + bytes / l.bandwidth; }

double allreduce_s(double bytes, int p, const LinkSpec& l) {
  if (p <= 1 || bytes <= 0) return 0;
  return 2.0 * (p - 1) / p * bytes / l.bandwidth + 2.0 * (p - 1) * l.latency;
}

double allgather_s(double bytes, int p, const LinkSpec& l) {
  if (p <= 1 || bytes <= 0) return 0;
  return double(p - 1) / p * bytes / l.bandwidth + (p - 1) * l.latency;
}

double reducescatter_s(double bytes, int p, const LinkSpec& l) { return allgather_s(bytes, p, l); }

LinkSpec shared(const LinkSpec& l, double sharers) { return {l.bandwidth / std::max(1.0, sharers), l.latency}; }

}  // namespace het::cost
