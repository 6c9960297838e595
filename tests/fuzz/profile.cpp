// Feeds: any bytes as a profile (profile.yaml, hetplan.profile/v1: input::parse, then
// read_profile).
// Checks: no crash, hang or unbounded memory; a refusal names the file; write_profile() of an
// accepted profile reads back to the same profile (profile.hpp: "write_profile() writes text
// that read_profile() reads back to the same values").
#include "fuzz.hpp"
#include "spec/profile.hpp"

using namespace het;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = input::parse(fuzz::text(data, size), "profile.yaml");
  if (!doc) return 0;
  auto profile = read_profile(*doc);
  if (!profile) {
    fuzz::require_explained(profile.errors(), "profile.yaml");
    return 0;
  }
  fuzz::require_round_trip(
      write_profile(*profile, ""), [](const input::Document& d) { return read_profile(d); },
      [](const ProfileSpec& p) { return write_profile(p, ""); }, "write_profile's text reads back to the same profile");
  return 0;
}
