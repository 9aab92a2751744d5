// A ring all-reduce over the encrypted NCCL network plugin, driven through its ABI
// (ncclNetPlugin_v11) exactly as NCCL's proxy drives it: the CPU backend's gradient
// exchange, so every distributed CPU run exercises the whole encrypted transport.
//
// Rank r sends to rank r+1 and receives from rank r-1 (mod world size). AllReduceSum is
// a reduce-scatter then an all-gather over world-size chunks: each chunk is summed in one
// fixed order (starting at the rank that owns it) and then copied, so every rank ends
// with the same bits and a run repeats bit for bit. docs/training.md "Distributed
// training" describes the schedule and the static rendezvous.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::net {

inline constexpr size_t kRingHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE
using RingHandle = std::array<uint8_t, kRingHandleBytes>;

// How ranks learn each other's listen handles. A handle is routing data (address, port,
// listen id), neither secret nor trusted: a forged one ends in a refused handshake.
class HandleExchange {
 public:
  virtual ~HandleExchange() = default;
  virtual Status Publish(int rank, const RingHandle& handle) = 0;
  // Waits until `rank` has published, at most until the deadline.
  virtual Result<RingHandle> Fetch(int rank, std::chrono::steady_clock::time_point deadline) = 0;
  // After the ring is connected (every rank read what it needed): remove what Publish left.
  virtual void Withdraw(int rank) = 0;
};

// The static rendezvous (tests, and clusters without a broker): a directory every rank
// can read and write (shared or local); rank R's handle is the file `<tag>.rank-R.handle`
// (256 hex digits and a newline), written atomically. `tag` names the run (the job id).
Result<std::unique_ptr<HandleExchange>> DirectoryExchange(const std::string& dir, const std::string& tag);

struct RingOptions {
  int world_size = 1;
  int rank = 0;
  uint64_t comm_id = 0;  // the same on every rank: binds the connections to this run
  // Connecting, and every all-reduce: a peer silent this long fails the run.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
};

class Ring {
 public:
  // Hands the job key to the plugin (enclave_net_set_job_key), initialises it, listens,
  // publishes the handle, connects to rank+1 and accepts rank-1 (both authenticated with
  // the job key). world_size 1 makes a ring that reduces nothing.
  static Result<std::unique_ptr<Ring>> Connect(const crypto::SecretBytes& job_key, const RingOptions& options,
                                               HandleExchange& exchange);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  // In place: data[i] = the sum of data[i] over every rank. On an error (a peer that
  // failed or timed out, ranks that disagree on the size) the ring closes its connections
  // before returning, so nothing is written into data after the call returned, and every
  // later call fails at once with that first error.
  Status AllReduceSum(float* data, size_t n);
  Status AllReduceSum(double* data, size_t n);
  // The bytes this ring sent (payload, before encryption): for the report and tests.
  uint64_t bytes_sent() const { return bytes_sent_; }
  // Where this rank listens ("10.0.0.5:40123"; "" for a ring of one).
  const std::string& listen_address() const { return listen_address_; }

 private:
  struct Comms;
  explicit Ring(RingOptions options);
  template <typename T>
  Status AllReduce(T* data, size_t n);
  template <typename T>
  Status AllReduceSteps(T* data, size_t n);
  Status SendRecv(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, const char* phase);

  RingOptions options_;
  std::unique_ptr<Comms> comms_;
  uint64_t bytes_sent_ = 0;
  Status failed_;  // the first failed all-reduce's error; the comms are closed then
  std::string listen_address_;
  // Receives the previous rank's partial sums (plaintext gradients): locked memory, kept
  // between calls and grown as needed.
  crypto::SecretBytes staging_;
};

}  // namespace enclave::net
