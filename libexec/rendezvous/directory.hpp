#pragma once
// The rendezvous through a directory every process of the job can read and write (one
// machine: `hetexec run-local` makes a fresh one per job). Key K is the file DIR/K, written
// to a hidden temporary file and renamed, so readers see all of a value or nothing; waiting
// polls for the file.
#include <string>
#include <utility>

#include "rendezvous/rendezvous.hpp"

namespace het::rendezvous {

class DirectoryRendezvous final : public Rendezvous {
 public:
  explicit DirectoryRendezvous(std::string dir) : dir_(std::move(dir)) {}
  Result<Done> publish(const std::string& key, const std::string& value) override;
  Result<std::string> wait(const std::string& key, double timeout_s) override;

 private:
  std::string dir_;
};

}  // namespace het::rendezvous
