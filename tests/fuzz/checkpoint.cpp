// Feeds: a checkpoint (checkpoint/checkpoint.hpp) of which one file — the first byte picks the
// manifest, rank 0's or rank 1's safetensors file — is the rest of the input; the others are
// those of a valid checkpoint (checkpoint_base.hpp). `--resume` and `hetexec checkpoint` read
// such directories, which a crash, a full disk or a hostile user may have left in any state.
// Checks: no crash, hang or unbounded memory; a refusal says why; an accepted checkpoint's every
// tensor reads whole (values and both moments), or the read says why.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "checkpoint_base.hpp"
#include "fuzz.hpp"

using namespace het;
namespace fs = std::filesystem;

namespace {

struct Dirs {
  std::string base, work;
};

const Dirs& dirs() {
  static const Dirs d = [] {
    std::string root = (fs::temp_directory_path() / "fuzz-checkpoint-XXXXXX").string();
    fuzz::require(mkdtemp(root.data()) != nullptr, "a temporary directory");
    Dirs out{fuzz::write_base_checkpoint(root + "/base"), root + "/case"};
    fuzz::require(!out.base.empty(), "the base checkpoint is written");
    return out;
  }();
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Dirs& d = dirs();
  const std::string& replaced = fuzz::kCheckpointFiles[data[0] % fuzz::kCheckpointFiles.size()];
  fs::remove_all(d.work);
  fs::create_directories(d.work);
  for (const auto& f : fuzz::kCheckpointFiles)
    if (f != replaced) {  // streams, not fs::copy_file: its copy gave up on EINTR (libFuzzer's signals)
      std::ifstream in(d.base + "/" + f, std::ios::binary);
      std::ofstream(d.work + "/" + f, std::ios::binary) << in.rdbuf();
    }
  std::ofstream(d.work + "/" + replaced, std::ios::binary).write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));

  auto c = checkpoint::Checkpoint::open(d.work);
  if (!c) {
    for (const auto& e : c.errors()) fuzz::require(!e.message.empty(), "every diagnostic says what is wrong", e.to_string());
    return 0;
  }
  for (const auto& [name, shape] : c->shapes()) {
    const std::int64_t n = checkpoint::elements_of(shape);
    fuzz::require(n <= (std::int64_t{1} << 40), "an accepted tensor's size is bounded");
    // The pieces were checked to tile the tensor and to be in their files: bounded by the files.
    if (n > (std::int64_t{1} << 24)) continue;
    std::vector<float> out(static_cast<std::size_t>(n));
    for (auto field : {checkpoint::Field::value, checkpoint::Field::m, checkpoint::Field::v}) {
      auto got = c->read(name, shape, field, {{0, n, n, 1}}, out.data());
      if (!got) fuzz::require(!got.errors().front().message.empty(), "a failed read says why");
    }
  }
  return 0;
}
