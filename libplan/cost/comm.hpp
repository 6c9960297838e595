#pragma once
// Communication times with the alpha-beta model (DESIGN.md §6): a message of n bytes over
// a link takes latency + n / bandwidth. Ring collectives over p members:
//   all-reduce       2(p-1)/p · n / bw + 2(p-1) · α
//   all-gather       (p-1)/p · n / bw + (p-1) · α     (n = the gathered size)
//   reduce-scatter   (p-1)/p · n / bw + (p-1) · α     (n = the input size)
// The bandwidth is the slowest hop of the ring, shared by the rings that cross it at once.
#include "spec/catalog.hpp"

namespace het::cost {

double p2p_s(double bytes, const LinkSpec& link);
double allreduce_s(double bytes, int members, const LinkSpec& link);
double allgather_s(double bytes, int members, const LinkSpec& link);
double reducescatter_s(double bytes, int members, const LinkSpec& link);

// A link whose bandwidth is shared by `sharers` concurrent transfers (>= 1).
LinkSpec shared(const LinkSpec& link, double sharers);

}  // namespace het::cost
