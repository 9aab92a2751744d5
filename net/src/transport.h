// The encrypted transport behind the NCCL plugin: contexts, listen / connect / accept
// with a non-blocking handshake, and unidirectional data connections of several TCP
// sockets, one worker thread each. Status/Result inside; plugin.cc converts to
// ncclResult_t at the ABI edge.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"
#include "wire.h"

namespace enclave::net {

// Logging: the plugin routes these to NCCL's logger. kSecurity is an authentication,
// replay or protocol failure of a peer: always also printed to stderr.
enum class LogLevel { kInfo, kWarn, kSecurity };
using LogHook = void (*)(LogLevel level, const char* message);
void SetLogHook(LogHook hook);
void Log(LogLevel level, const std::string& message);

struct Device {
  std::string name;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  int speed_mbps = 10000;
};
// ENCLAVE_NET_IFNAME names the interface (not a secret); otherwise the first UP
// non-loopback interface with an IPv4 address, else loopback.
Result<Device> SelectDevice();

// How a record's payload is protected on one socket. The plugin only ever uses
// AeadProtection(); a plaintext variant for the benchmark baseline lives in
// net/testing/ and is not linked into the plugin.
class RecordSender {
 public:
  virtual ~RecordSender() = default;
  // Writes header || protected payload (blocking).
  virtual Status Send(int fd, const RecordHeaderBytes& header, uint64_t seq, const uint8_t* data, uint32_t len) = 0;
};
class RecordReceiver {
 public:
  virtual ~RecordReceiver() = default;
  // Reads the payload of a record whose header was read and checked; writes only
  // authenticated plaintext to dest[0, len).
  virtual Status Receive(int fd, const RecordHeaderBytes& header, uint64_t seq, uint8_t* dest, uint32_t len) = 0;
};
class RecordProtection {
 public:
  virtual ~RecordProtection() = default;
  virtual Result<std::unique_ptr<RecordSender>> MakeSender(const crypto::SecretBytes& data_key) const = 0;
  virtual Result<std::unique_ptr<RecordReceiver>> MakeReceiver(const crypto::SecretBytes& data_key) const = 0;
};
const RecordProtection& AeadProtection();

// Blocking socket helpers shared with the record layers.
Status SendAll(int fd, const uint8_t* data, size_t len);
Status SendAll2(int fd, const uint8_t* a, size_t alen, const uint8_t* b, size_t blen);
Status RecvAll(int fd, uint8_t* data, size_t len);

inline constexpr int kMaxStallTimeoutSeconds = 86400;

struct Options {
  int nsocks = 4;  // sockets (and worker threads) per connection, 1..16
  // Device buffers sealed and opened on the GPU (net/src/gpu_records.h); the plugin
  // then advertises NCCL_PTR_CUDA. Off unless ENCLAVE_NET_GPU=1.
  bool gpu_records = false;
  // A data connection with a request outstanding that moves no byte for this long is
  // failed (see DataComm::Test); 0 = never (NCCL's own semantics). 0..86400.
  int stall_timeout_s = 0;
};
// The plugin's options (tuning knobs, not secrets): nsocks = half the hardware threads,
// 1..4, unless ENCLAVE_NET_NSOCKS says otherwise; stall_timeout_s from
// ENCLAVE_NET_STALL_TIMEOUT_S (whole seconds 1..86400, or 0 / unset / empty = off);
// gpu_records from ENCLAVE_NET_GPU (1 = on; 0 / unset / empty = off).
// A malformed value is an InvalidInput naming the variable and the accepted range.
Result<Options> OptionsFromEnv();

class DataComm;

// One posted isend or irecv. Owned by its DataComm (a ring of kMaxRequests slots).
struct Request {
  DataComm* owner = nullptr;
  std::atomic<int> state{0};  // 0 free, 1 posted
  uint64_t msg_index = 0;
  uint8_t* data = nullptr;
  bool on_device = false;             // data is GPU memory: the connection's device record layers
  uint64_t capacity = 0;              // send: the size; recv: the posted size
  std::atomic<uint64_t> size{0};      // the message size (recv: from the first record)
  // The workers that carry a chunk of the message, min(nsocks, chunk count): known at
  // Post on a send connection; on a receive connection kNeededUnknown until socket 0's
  // worker has authenticated chunk 0. Only those workers touch the request.
  static constexpr int kNeededUnknown = kMaxSockets + 1;
  std::atomic<int> needed{0};
  std::atomic<int> passed{0};         // workers done with this message (up to needed)
  std::chrono::steady_clock::time_point posted_at{};  // NCCL's thread only; read only with a stall timeout
};

class DataComm {
 public:
  static constexpr int kMaxRequests = 32;  // NCCL_NET_MAX_REQUESTS
  enum class Role { kSend, kRecv };

  // One socket's record layers per kind of buffer: host memory, and (optional) GPU memory.
  struct Layers {
    std::vector<std::unique_ptr<RecordSender>> senders, device_senders;
    std::vector<std::unique_ptr<RecordReceiver>> receivers, device_receivers;
  };
  // Takes the sockets (blocking mode, handshake done) and their record layers (send:
  // senders, receive: receivers; the device ones empty or one per socket).
  // stall_timeout_s > 0 turns on the stall timeout (Options::stall_timeout_s).
  DataComm(Role role, std::vector<int> fds, Layers layers, std::string peer, int stall_timeout_s = 0);
  ~DataComm();
  DataComm(const DataComm&) = delete;
  DataComm& operator=(const DataComm&) = delete;

  // send: size bytes at data; recv: up to size bytes into data; on_device: data is GPU
  // memory (InvalidInput on a connection without device record layers). nullptr when all
  // request slots are in use (NCCL calls again later). The connection's error once it
  // has failed.
  Result<Request*> Post(uint8_t* data, uint64_t size, bool on_device = false);
  bool has_device_layers() const;
  // done and the message size; requests complete in posting order (done means every
  // earlier request of the connection is complete too). An error once the connection has
  // failed, unless r completed before. With a stall timeout, test() also fails the
  // connection (Code::kUnavailable) when a request is outstanding and no byte moved on
  // any socket for the timeout, counted from the later of the last byte moved and the
  // posting of the oldest outstanding request.
  Status Test(Request* r, bool* done, uint64_t* size);
  Role role() const { return role_; }
  int nsocks() const { return static_cast<int>(fds_.size()); }

  // For tests: how often worker j woke from waiting for work, and how many messages it
  // carried a chunk of. Each is written by worker j alone (relaxed).
  struct WorkerStats {
    uint64_t wakeups = 0;
    uint64_t messages = 0;
  };
  WorkerStats WorkerStatsForTest(int j) const;

 private:
  // Worker j's work: the indices of the messages it carries a chunk of, in order, pushed
  // under mu_ by whoever learns the message's chunk count (send: Post; receive: Post for
  // worker 0, worker 0 after chunk 0 verified for the others). A message stays in a
  // queue only while it is incomplete, and an incomplete message holds its slot, so at
  // most kMaxRequests are queued. Each worker waits on its own condition variable;
  // only a failure or the destructor wakes them all.
  struct alignas(64) Lane {
    std::condition_variable cv;
    uint64_t queue[kMaxRequests];
    uint64_t pushed = 0, popped = 0;  // guarded by mu_
    std::atomic<uint64_t> wakeups{0}, messages{0};
  };
  void SendWorker(int j);
  void RecvWorker(int j);
  // Queues message m for workers [first, last); mu_ held. The caller then notifies them.
  void PushLocked(uint64_t m, int first, int last);
  // Worker j's next message, in order; nullptr once stopping or failed.
  Request* WaitNext(int j);
  void WakeAll();
  static bool Passed(const Request& r);
  // NCCL's thread: moves complete_ past every message that completed.
  void AdvanceComplete();
  Status ReadHeader(int j, uint64_t seq, uint64_t m, RecordHeaderBytes* raw, RecordHeader* h);
  void Fail(const Status& st);
  // Keeps `error` as the connection's failure and logs `line`, unless it failed
  // already; shuts the sockets down (blocked workers return) and wakes waiting workers.
  void FailWith(Status error, LogLevel level, const std::string& line);
  void InstallProgressCounter();
  Status CheckStall();

  Role role_;
  std::vector<int> fds_;
  Layers layers_;
  std::string peer_;
  Request slots_[kMaxRequests];
  uint64_t next_post_ = 0;  // NCCL's thread only
  std::mutex mu_;
  std::unique_ptr<Lane[]> lanes_;  // one per worker
  bool stopping_ = false;
  std::atomic<bool> failed_{false};
  Status error_;  // guarded by mu_, set once
  // Stall timeout (zero: off). Workers add every byte their send()/recv() calls move to
  // moved_ (relaxed, one add per system call); the rest is NCCL's thread only.
  const std::chrono::steady_clock::duration stall_timeout_;
  alignas(64) std::atomic<uint64_t> moved_{0};
  alignas(64) uint64_t moved_seen_ = 0;
  std::chrono::steady_clock::time_point last_moved_{};  // when test() first saw moved_ change
  // Test() reports requests done in posting order: messages before complete_ have
  // completed (all their workers passed them); message complete_ has not, if posted.
  uint64_t complete_ = 0;  // NCCL's thread only
  std::vector<std::thread> workers_;
};

struct PendingConnect;
class ListenComm;

class Context {
 public:
  // device_protection: the record layers of GPU buffers (null: host buffers only).
  static Result<std::unique_ptr<Context>> Create(crypto::SecretBytes job_key, uint64_t comm_id, Device device,
                                                 Options options, const RecordProtection& protection,
                                                 const RecordProtection* device_protection = nullptr);
  ~Context();

  Result<std::unique_ptr<ListenComm>> Listen(std::span<uint8_t, kHandleBytes> handle);
  // Non-blocking: nullptr while the handshake is under way; NCCL calls again with the
  // same handle, whose scratch bytes hold this context's token for the attempt.
  Result<std::unique_ptr<DataComm>> Connect(std::span<uint8_t, kHandleBytes> handle);

  const Device& device() const { return device_; }
  const crypto::SecretBytes& job_key() const { return job_key_; }
  uint64_t comm_id() const { return comm_id_; }
  const Options& options() const { return options_; }
  const Id& endpoint_id() const { return endpoint_id_; }
  const RecordProtection& protection() const { return protection_; }
  const RecordProtection* device_protection() const { return device_protection_; }

 private:
  Context(crypto::SecretBytes key, uint64_t comm_id, Device device, Options options, const RecordProtection& p,
          const RecordProtection* device_p);
  Status Progress(PendingConnect& pc, bool* done);

  crypto::SecretBytes job_key_;
  uint64_t comm_id_;
  Device device_;
  Options options_;
  const RecordProtection& protection_;
  const RecordProtection* device_protection_;
  Id endpoint_id_{};
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<PendingConnect>> pending_;
};

struct ServerSock;

// The listener's unauthenticated connections: at most kMaxPendingHandshakes at a time in
// their handshake (more wait in the kernel's listen backlog), and each is closed if its
// handshake does not finish within kHandshakeTimeout after accept (and again after its
// ServerHello was sent), so idle connections cannot hold the slots.
inline constexpr size_t kMaxPendingHandshakes = 4 * kMaxSockets;
inline constexpr std::chrono::seconds kHandshakeTimeout{5};
// A connection some of whose sockets finished their handshake is closed when no further
// socket of it finished for this long: twice the handshake deadline, because a socket of
// it may wait in the listen backlog behind the pending-handshake limit for up to one
// deadline before its own handshake starts.
inline constexpr std::chrono::seconds kGroupTimeout{2 * kHandshakeTimeout};

class ListenComm {
 public:
  ListenComm(Context* ctx, int fd, Id listen_id);
  ~ListenComm();
  ListenComm(const ListenComm&) = delete;
  ListenComm& operator=(const ListenComm&) = delete;
  // Non-blocking: nullptr until every socket of one connection has completed its
  // handshake. A socket whose handshake fails (a stray, a wrong key, a bad Finished MAC,
  // a malformed message, a socket index that repeats) is closed and logged, and accept()
  // goes on waiting: the listen id is no secret, so anyone who can reach the port could
  // otherwise end the job. Only local failures (accept4, locked memory) are errors.
  Result<std::unique_ptr<DataComm>> Accept();

 private:
  struct Group;
  // Why a socket's handshake failed: a stray (not our listen id) or a refused peer is
  // closed and accept() goes on; a local failure fails accept().
  enum class Failure { kStray, kRefused, kLocal };
  Status Progress(ServerSock& s, Failure* failure);
  // A refused socket's security line: the first per kLimitLogInterval in full, the others
  // counted and summed up in the next line (FlushRefused: when the interval has passed,
  // or when the listener closes).
  void Refused(const std::string& line);
  void FlushRefused();
  Context* ctx_;
  int fd_;
  Id listen_id_;
  std::vector<std::unique_ptr<ServerSock>> pending_;
  std::map<Random, std::unique_ptr<Group>> groups_;
  // The "pending-handshake limit reached" line: at most once per kLimitLogInterval.
  static constexpr std::chrono::seconds kLimitLogInterval{5};
  std::chrono::steady_clock::time_point next_limit_log_{};
  std::chrono::steady_clock::time_point next_refused_log_{};
  size_t refused_unlogged_ = 0;
  std::string last_refused_;
};

}  // namespace enclave::net
