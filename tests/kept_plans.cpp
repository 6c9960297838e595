#include "kept_plans.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace het::test {

void keep_plan(const std::string& plan_json) {
  const char* dir = std::getenv("HET_TEST_PLANS_DIR");
  if (dir == nullptr || *dir == '\0' || plan_json.empty()) return;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: the same text gets the same name in every run
  for (unsigned char c : plan_json) h = (h ^ c) * 1099511628211ull;
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(h));
  std::error_code ignored;  // a test that cannot keep its plan still tests; the check then misses it
  std::filesystem::create_directories(dir, ignored);
  std::ofstream out(std::string(dir) + "/" + name + ".plan.json", std::ios::binary);
  out << plan_json;
}

void keep_plan_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::stringstream text;
  text << in.rdbuf();
  keep_plan(text.str());
}

}  // namespace het::test
