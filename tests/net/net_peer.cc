// enclave_net_peer: the other process of the two-process tests. It loads the plugin,
// reads the job key (hex) and, where it needs one, the listener's handle (hex) from
// stdin, and runs one side of a message schedule through the ABI (plugin_driver.h).
//   enclave_net_peer PLUGIN send SEED COUNT MAX_SIZE   connect, send the schedule
//   enclave_net_peer PLUGIN both SEED COUNT MAX_SIZE   listen (prints HANDLE hex),
//                                                      connect, send and receive
//   enclave_net_peer PLUGIN recv SEED COUNT MAX_SIZE   listen (prints HANDLE hex),
//                                                      accept, receive the schedule
// COMM_ID (optional, decimal) is the communicator id init() gets; default 0x5eed.
// Prints "PEER OK ..." and exits 0, or "PEER FAIL ..." and exits 1 (2: connect refused).
#include <iostream>
#include <string>

#include "plugin_driver.h"

using namespace enclave::net::test;

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::cerr << "usage: enclave_net_peer PLUGIN send|both|recv SEED COUNT MAX_SIZE [COMM_ID]\n";
    return 64;
  }
  const std::string mode = argv[2];
  if (mode != "send" && mode != "both" && mode != "recv") {
    std::cerr << "enclave_net_peer: unknown mode '" << mode << "'\n";
    return 64;
  }
  const uint64_t seed = std::stoull(argv[3]);
  const int count = std::stoi(argv[4]);
  const size_t max_size = std::stoull(argv[5]);
  const uint64_t comm_id = argc == 7 ? std::stoull(argv[6]) : 0x5eed;
  Plugin p;
  if (!p.Load(argv[1])) {
    std::cout << "PEER FAIL " << p.error << std::endl;
    return 1;
  }
  std::string key_hex, handle_hex;
  uint8_t key[32];
  if (!std::getline(std::cin, key_hex) || !Unhex(key_hex, key, sizeof(key)) || p.set_key(key, sizeof(key)) != 0) {
    std::cout << "PEER FAIL bad key line" << std::endl;
    return 1;
  }
  void* ctx = nullptr;
  if (p.net->init(&ctx, comm_id, nullptr, CaptureLog, nullptr) != ncclSuccess) {
    std::cout << "PEER FAIL init" << std::endl;
    return 1;
  }
  uint8_t my_handle[128] = {0}, peer_handle[128] = {0};
  void* listen_comm = nullptr;
  const bool listens = mode == "both" || mode == "recv";
  const bool connects = mode == "both" || mode == "send";
  if (listens) {
    if (p.net->listen(ctx, 0, my_handle, &listen_comm) != ncclSuccess) {
      std::cout << "PEER FAIL listen" << std::endl;
      return 1;
    }
    std::cout << "HANDLE " << Hex(my_handle, sizeof(my_handle)) << std::endl;
  }
  if (connects && (!std::getline(std::cin, handle_hex) || !Unhex(handle_hex, peer_handle, sizeof(peer_handle)))) {
    std::cout << "PEER FAIL bad handle line" << std::endl;
    return 1;
  }
  void *send_comm = nullptr, *recv_comm = nullptr;
  ncclResult_t rc = ConnectAccept(p.net, ctx, connects ? peer_handle : nullptr, listen_comm, &send_comm, &recv_comm);
  if (rc != ncclSuccess) {
    std::cout << "PEER FAIL connect rc=" << rc << "\n" << LogText() << std::endl;
    if (send_comm) p.net->closeSend(send_comm);
    if (recv_comm) p.net->closeRecv(recv_comm);
    if (listen_comm) p.net->closeListen(listen_comm);
    p.net->finalize(ctx);
    return 2;
  }
  const auto schedule = Schedule(seed, count, max_size);
  // The listener side sends with seed, we with seed + 1 (so the bytes differ per direction).
  ExchangeResult r = Exchange(p.net, send_comm, recv_comm, schedule, schedule, seed + 1, seed);
  // Close as NCCL does, then finalize the context.
  if (send_comm) p.net->closeSend(send_comm);
  if (recv_comm) p.net->closeRecv(recv_comm);
  if (listen_comm) p.net->closeListen(listen_comm);
  p.net->finalize(ctx);
  if (r.rc != ncclSuccess) {
    std::cout << "PEER FAIL rc=" << r.rc << " " << r.what << "\n" << LogText() << std::endl;
    return 1;
  }
  std::cout << "PEER OK sent=" << r.sent << " received=" << r.received << std::endl;
  return 0;
}
