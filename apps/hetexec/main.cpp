// hetexec: the executor's command line. Argument parsing and output formatting only; the
// work is done in libexec. Exit status: 0 success, 2 usage error.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "het/version.hpp"
#include <fstream>
#include <sstream>

#include "data/data.hpp"
#include "node/node.hpp"

namespace {

std::string list_or_none(const std::vector<std::string>& items, const char* none) {
  if (items.empty()) return none;
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string version_text() {
  auto b = het::node::build_info(het::kVersion);
  std::string out = "hetexec " + b.version + "\n";
  out += "  cuda:       " + (b.cuda ? "yes (runtime " + b.cuda_runtime + ", driver " +
                                        (b.cuda_driver.empty() ? std::string("none found") : b.cuda_driver) + ")"
                                  : std::string("no (built without CUDA)")) + "\n";
  out += "  nccl:       " + (b.nccl ? "yes (" + b.nccl_version + ")" : std::string("no")) + "\n";
  out += std::string("  ibverbs:    ") + (b.ibverbs ? "yes (libibverbs)" : "no") + "\n";
  out += "  backends:   " + list_or_none(b.backends, "none yet: this build cannot run plans") + "\n";
  out += "  transports: " + list_or_none(b.transports, "none yet");
  return out;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

int run_devices(const std::string& format) {
  auto n = het::node::describe_node();
  if (format == "json") {
    std::cout << het::node::to_json(n).dump(2) << "\n";
    return 0;
  }
  std::cout << "node " << n.hostname << "\n";
  std::cout << "  cpu   " << n.cpu.cores << " cores, " << gib(n.cpu.memory_bytes) << ", " << n.cpu.model << "\n";
  for (const auto& g : n.gpus)
    std::cout << "  cuda:" << g.index << "  " << g.name << ", " << gib(g.memory_bytes) << ", sm_"
              << g.compute_capability << ", " << g.pci_bus_id << "\n";
  for (const auto& r : n.rdma) std::cout << "  rdma  " << r.name << ", " << r.ports << " ports, guid " << r.guid << "\n";
  for (const auto& note : n.notes) std::cout << "  note: " << note << "\n";
  return 0;
}

int run_prepare_data(const std::string& text_file, const std::string& output) {
  std::ifstream in(text_file, std::ios::binary);
  if (!in) {
    std::cerr << "error: " << text_file << ": cannot open the file\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  const auto tokens = het::data::byte_tokens(text.str());
  if (tokens.size() < 2) {
    std::cerr << "error: " << text_file << ": needs at least two bytes of text\n";
    return 2;
  }
  if (auto err = het::data::write_tokens(output, tokens); !err.empty()) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  std::cout << "wrote " << output << ": " << tokens.size() << " byte-level tokens (vocabulary 256, llm.c format)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hetexec: runs hetplan plans on CPUs and NVIDIA GPUs"};
  app.set_version_flag("--version", version_text);
  app.require_subcommand(1);
  std::string format = "text";
  auto* devices = app.add_subcommand("devices", "List this node's CPU, CUDA GPUs and RDMA devices");
  devices->add_option("--format", format, "output: text or json")->check(CLI::IsMember({"text", "json"}));
  std::string text_file, output;
  auto* prepare = app.add_subcommand("prepare-data", "Byte-tokenize a text file into an llm.c token file");
  prepare->add_option("text", text_file, "the text file")->required();
  prepare->add_option("-o,--output", output, "the token file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (devices->parsed()) return run_devices(format);
  if (prepare->parsed()) return run_prepare_data(text_file, output);
  return 2;
}
