#pragma once
// A job's rendezvous: how the processes of one job find each other. A process publishes what
// others need (its TCP endpoint, an NCCL unique id, RDMA queue-pair info) under a key, and
// waits for the keys of the others. Two implementations: a directory the processes share
// (rendezvous/directory.hpp, for one machine) and a gRPC Rendezvous service
// (rendezvous/client.hpp, across machines).
//
// Keys: 1 to 128 characters of [A-Za-z0-9._-], not starting with '.' (valid_key), so that
// every implementation can store them as they are. Values: any bytes, at most 1 MiB.
// Publishing a key again replaces its value. Implementations are safe to use from several
// threads.
#include <string>

#include "diag/diag.hpp"

namespace het::rendezvous {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Makes `value` visible under `key` to every process of the job.
  virtual Result<Done> publish(const std::string& key, const std::string& value) = 0;
  // The value under `key`, once some process has published it; an error after timeout_s
  // seconds without it (never blocks longer).
  virtual Result<std::string> wait(const std::string& key, double timeout_s) = 0;
};

// Whether `name` is a valid key (or job id): see above.
inline bool valid_key(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

}  // namespace het::rendezvous
