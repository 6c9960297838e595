// RDMA through libibverbs, the parts that run without RDMA hardware: discovery on this
// machine, the fallback decision, peer-memory detection on fake /sys and /proc trees, and the
// queue-pair info through a directory rendezvous. (Queue pairs and send/recv need a device.)
#include <catch2/catch.hpp>

#include <filesystem>
#include <future>

#include "process.hpp"
#include "rendezvous/directory.hpp"
#include "transport/hex.hpp"
#include "transport/ibverbs.hpp"

namespace ib = het::transport::ibverbs;

TEST_CASE("ibverbs: discovery reports devices as data, or none with a reason, and the choice follows it") {
  const ib::Discovery found = ib::discover();
  const ib::Choice choice = ib::choose(found);
  INFO("note: " << found.note << "; choice: " << choice.reason);
  if (found.devices.empty()) {  // this machine without RDMA hardware
    CHECK(found.note.find("no RDMA devices") != std::string::npos);
    CHECK_FALSE(choice.rdma);
    CHECK(choice.reason.find("falling back to TCP") != std::string::npos);
  } else {
    for (const ib::Device& device : found.devices) CHECK_FALSE(device.name.empty());
    CHECK_FALSE(choice.reason.empty());
  }
  ib::Choice none = choice;
  none.rdma = false;
  het::test::TempDir dir;
  het::rendezvous::DirectoryRendezvous rendezvous(dir.path());
  auto connection = ib::Connection::connect(none, 0, 1, rendezvous, 1);
  REQUIRE_FALSE(connection.ok());
  CHECK(het::to_string(connection.errors()).find("no RDMA device was chosen") != std::string::npos);
}

TEST_CASE("ibverbs: the fallback decision picks the first active port, else TCP and says why") {
  ib::Discovery none;
  none.note = "no RDMA devices: libibverbs found none";
  CHECK_FALSE(ib::choose(none).rdma);
  CHECK(ib::choose(none).reason == "no RDMA devices: libibverbs found none; falling back to TCP");

  ib::Discovery down;
  down.devices.push_back({"mlx5_0", "0", {{1, "down", "InfiniBand", 0, -1, "", 4096}}});
  CHECK_FALSE(ib::choose(down).rdma);
  CHECK(ib::choose(down).reason == "no active RDMA port on mlx5_0; falling back to TCP");

  ib::Discovery roce = down;
  roce.devices.push_back({"rxe0", "1", {{1, "down", "Ethernet", 0, -1, "", 1024}, {2, "active", "Ethernet", 0, 3, "00", 1024}}});
  const ib::Choice c = ib::choose(roce);
  CHECK(c.rdma);
  CHECK(c.device == "rxe0");
  CHECK(c.port == 2);
  CHECK(c.gid_index == 3);
  CHECK(c.reason == "RDMA on rxe0 port 2 (Ethernet, GID index 3)");
}

TEST_CASE("ibverbs: GPU memory registration needs nvidia_peermem or the kernel's peer-memory interface") {
  namespace fs = std::filesystem;
  het::test::TempDir root;
  fs::create_directories(root.path() + "/proc");
  root.write("proc/modules", "ib_core 1 0 - Live 0x0\nnvidia 2 0 - Live 0x0\n");
  ib::PeerMemory none = ib::detect_peer_memory(root.path());
  CHECK_FALSE(none.gpu);
  CHECK(none.reason.find("GPU buffers go through host memory") != std::string::npos);

  root.write("proc/modules", "ib_core 1 0 - Live 0x0\nnvidia_peermem 16384 0 - Live 0x0\n");
  ib::PeerMemory peermem = ib::detect_peer_memory(root.path());
  CHECK(peermem.gpu);
  CHECK(peermem.reason.find("nvidia_peermem") != std::string::npos);

  root.write("proc/modules", "");
  fs::create_directories(root.path() + "/sys/kernel/mm/memory_peer_target");
  ib::PeerMemory sys = ib::detect_peer_memory(root.path());
  CHECK(sys.gpu);
  CHECK(sys.reason.find("/sys/kernel/mm/memory_peer_target") != std::string::npos);
}

TEST_CASE("ibverbs: queue-pair info is encoded as text, decoded back, and bad text is named") {
  ib::QpInfo info;
  info.lid = 0x1234;
  info.gid = std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x0a\x00\x00\x07", 16);
  info.qpn = 0xabcdef;
  info.psn = 42;
  const std::string text = ib::encode(info);
  CHECK(text == "lid=4660 gid=00000000000000000000ffff0a000007 qpn=11259375 psn=42");
  auto back = ib::decode(text);
  REQUIRE(back.ok());
  CHECK(*back == info);

  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"lid=1 gid=00 qpn=1 psn=1", "bad gid"},
           {"lid=70000 gid=00000000000000000000000000000000 qpn=1 psn=1", "bad lid"},
           {"lid=1 gid=00000000000000000000000000000000 qpn=1", "lacks psn"},
           {"lid=1 gid=00000000000000000000000000000000 qpn=x psn=1", "bad qpn"},
           {"lid=1 mtu=5 gid=00000000000000000000000000000000 qpn=1 psn=1", "unknown field 'mtu'"}}) {
    auto result = ib::decode(bad);
    INFO(bad);
    REQUIRE_FALSE(result.ok());
    CHECK(result.errors().front().message.find(why) != std::string::npos);
  }
  CHECK(het::transport::from_hex("0aFf") == std::string("\x0a\xff", 2));
  CHECK_FALSE(het::transport::from_hex("abc").has_value());
  CHECK_FALSE(het::transport::from_hex("zz").has_value());
}

TEST_CASE("ibverbs: two ranks exchange queue-pair info through a directory rendezvous") {
  het::test::TempDir dir;
  auto side = [&](int rank, int peer) {
    het::rendezvous::DirectoryRendezvous rendezvous(dir.path());  // each rank its own handle, as processes would
    ib::QpInfo mine;
    mine.lid = static_cast<std::uint16_t>(rank + 1);
    mine.gid = std::string(16, static_cast<char>(rank));
    mine.qpn = 100u + static_cast<unsigned>(rank);
    mine.psn = 7u * static_cast<unsigned>(rank);
    REQUIRE(ib::publish_qp(rendezvous, rank, peer, mine).ok());
    return ib::wait_qp(rendezvous, peer, rank, 10);
  };
  auto zero = std::async(std::launch::async, side, 0, 1);
  auto one = side(1, 0);
  auto from_one = zero.get();
  REQUIRE(one.ok());
  REQUIRE(from_one.ok());
  CHECK(one->qpn == 100);
  CHECK(one->gid == std::string(16, '\0'));
  CHECK(from_one->qpn == 101);
  CHECK(from_one->lid == 2);
  CHECK(from_one->psn == 7);
  CHECK(std::filesystem::exists(dir.path() + "/" + ib::qp_key(0, 1)));

  het::rendezvous::DirectoryRendezvous rendezvous(dir.path());
  auto missing = ib::wait_qp(rendezvous, 2, 0, 0.05);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.errors().front().message.find("'ibv-2-0.qp' was not published") != std::string::npos);
  REQUIRE(rendezvous.publish(ib::qp_key(3, 0), "lid=1").ok());
  auto garbled = ib::wait_qp(rendezvous, 3, 0, 1);
  REQUIRE_FALSE(garbled.ok());
  CHECK(garbled.errors().front().message.find("rank 3's queue-pair info lacks gid") != std::string::npos);
}
