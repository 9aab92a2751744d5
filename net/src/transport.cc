#include "transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace enclave::net {
namespace {

std::atomic<LogHook> g_log_hook{nullptr};

// A data connection's byte counter for its stall timeout, set by each worker thread of a
// DataComm with a timeout (nullptr otherwise). SendAll, SendAll2 and RecvAll add what
// every system call moved; their sockets then have SO_SNDTIMEO / SO_RCVTIMEO, so a call
// blocked on a slow socket returns what it moved (or EAGAIN) at least that often.
thread_local std::atomic<uint64_t>* t_moved = nullptr;

inline void CountMoved(ssize_t n) {
  if (t_moved != nullptr) t_moved->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
}
// EAGAIN from a blocking socket is its SO_*TIMEO expiring: try again. Without a counter
// no timeout is set, and EAGAIN stays the error it always was.
inline bool TimeoutExpired(int err) { return t_moved != nullptr && (err == EAGAIN || err == EWOULDBLOCK); }

std::string AddrString(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
    return std::string(buf) + ":" + std::to_string(port);
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
  port = ntohs(a->sin6_port);
  return "[" + std::string(buf) + "]:" + std::to_string(port);
}

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  return AddrString(ss);
}

Status SetBlocking(int fd, bool blocking) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return ErrnoStatus("fcntl(F_GETFL)", errno);
  flags = blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) != 0) return ErrnoStatus("fcntl(F_SETFL)", errno);
  return OkStatus();
}

void SetNoDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Non-blocking I/O for the handshake: advance *done; true once the whole buffer moved.
Result<bool> WriteSome(int fd, const uint8_t* buf, size_t len, size_t* done) {
  while (*done < len) {
    ssize_t n = send(fd, buf + *done, len - *done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      return Status(Code::kUnavailable, "send to " + PeerName(fd) + ": " + std::strerror(errno));
    }
    *done += static_cast<size_t>(n);
  }
  return true;
}

Result<bool> ReadSome(int fd, uint8_t* buf, size_t len, size_t* done) {
  while (*done < len) {
    ssize_t n = recv(fd, buf + *done, len - *done, 0);
    if (n == 0) return Status(Code::kUnavailable, "connection closed by peer during the handshake");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      return Status(Code::kUnavailable, std::string("recv during the handshake: ") + std::strerror(errno));
    }
    *done += static_cast<size_t>(n);
  }
  return true;
}

template <size_t N>
bool ArrayEq(const std::array<uint8_t, N>& a, const std::array<uint8_t, N>& b) {
  return std::memcmp(a.data(), b.data(), N) == 0;
}

// AES-256-GCM records: encrypt into staging and send; receive into staging, open in
// place, and only then copy the authenticated plaintext out.
class AeadSender final : public RecordSender {
 public:
  explicit AeadSender(std::unique_ptr<crypto::Aead> aead)
      : aead_(std::move(aead)), staging_(kRecordHeaderBytes + kMaxRecordPayload + kRecordTagBytes) {}
  ~AeadSender() override { OPENSSL_cleanse(staging_.data(), staging_.size()); }
  Status Send(int fd, const RecordHeaderBytes& header, uint64_t seq, const uint8_t* data, uint32_t len) override {
    std::memcpy(staging_.data(), header.data(), header.size());
    RETURN_IF_ERROR(SealRecord(*aead_, header, seq, ByteSpan(data, len),
                               std::span<uint8_t>(staging_.data() + kRecordHeaderBytes, len + kRecordTagBytes)));
    return SendAll(fd, staging_.data(), kRecordHeaderBytes + len + kRecordTagBytes);
  }

 private:
  std::unique_ptr<crypto::Aead> aead_;
  std::vector<uint8_t> staging_;
};

// The receiver's staging holds decrypted records (gradients): locked memory, zeroized
// when the connection closes.
class AeadReceiver final : public RecordReceiver {
 public:
  AeadReceiver(std::unique_ptr<crypto::Aead> aead, crypto::SecretBytes staging)
      : aead_(std::move(aead)), staging_(std::move(staging)) {}
  Status Receive(int fd, const RecordHeaderBytes& header, uint64_t seq, uint8_t* dest, uint32_t len) override {
    uint8_t* staging = staging_.ExposeSecretMutable().data();
    RETURN_IF_ERROR(RecvAll(fd, staging, len + kRecordTagBytes));
    RETURN_IF_ERROR(OpenRecordInPlace(*aead_, header, seq, std::span<uint8_t>(staging, len + kRecordTagBytes)));
    if (len > 0) std::memcpy(dest, staging, len);
    return OkStatus();
  }

 private:
  std::unique_ptr<crypto::Aead> aead_;
  crypto::SecretBytes staging_;  // kMaxRecordPayload + kRecordTagBytes
};

class AeadRecords final : public RecordProtection {
 public:
  Result<std::unique_ptr<RecordSender>> MakeSender(const crypto::SecretBytes& key) const override {
    ASSIGN_OR_RETURN(auto aead, crypto::Aead::Create(crypto::Suite::kAes256Gcm, key));
    return std::unique_ptr<RecordSender>(new AeadSender(std::move(aead)));
  }
  Result<std::unique_ptr<RecordReceiver>> MakeReceiver(const crypto::SecretBytes& key) const override {
    ASSIGN_OR_RETURN(auto aead, crypto::Aead::Create(crypto::Suite::kAes256Gcm, key));
    ASSIGN_OR_RETURN(crypto::SecretBytes staging, crypto::SecretBytes::Create(kMaxRecordPayload + kRecordTagBytes));
    return std::unique_ptr<RecordReceiver>(new AeadReceiver(std::move(aead), std::move(staging)));
  }
};

}  // namespace

void SetLogHook(LogHook hook) { g_log_hook.store(hook); }

void Log(LogLevel level, const std::string& message) {
  LogHook hook = g_log_hook.load();
  if (hook != nullptr) hook(level, message.c_str());
  if (hook == nullptr || level == LogLevel::kSecurity) {
    if (level != LogLevel::kInfo) std::fprintf(stderr, "enclave-net: %s\n", message.c_str());
  }
}

const RecordProtection& AeadProtection() {
  static const AeadRecords records;
  return records;
}

Status SendAll(int fd, const uint8_t* data, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || TimeoutExpired(errno)) continue;
      return Status(Code::kUnavailable, std::string("send: ") + std::strerror(errno));
    }
    CountMoved(n);
    data += n;
    len -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status SendAll2(int fd, const uint8_t* a, size_t alen, const uint8_t* b, size_t blen) {
  iovec iov[2] = {{const_cast<uint8_t*>(a), alen}, {const_cast<uint8_t*>(b), blen}};
  int idx = 0;
  while (idx < 2) {
    if (iov[idx].iov_len == 0) {
      ++idx;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = iov + idx;
    msg.msg_iovlen = static_cast<size_t>(2 - idx);
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || TimeoutExpired(errno)) continue;
      return Status(Code::kUnavailable, std::string("sendmsg: ") + std::strerror(errno));
    }
    CountMoved(n);
    size_t left = static_cast<size_t>(n);
    while (idx < 2 && left >= iov[idx].iov_len) {
      left -= iov[idx].iov_len;
      iov[idx].iov_len = 0;
      ++idx;
    }
    if (idx < 2) {
      iov[idx].iov_base = static_cast<uint8_t*>(iov[idx].iov_base) + left;
      iov[idx].iov_len -= left;
    }
  }
  return OkStatus();
}

Status RecvAll(int fd, uint8_t* data, size_t len) {
  while (len > 0) {
    ssize_t n = recv(fd, data, len, MSG_WAITALL);
    if (n == 0) return Status(Code::kUnavailable, "connection closed by peer");
    if (n < 0) {
      if (errno == EINTR || TimeoutExpired(errno)) continue;
      return Status(Code::kUnavailable, std::string("recv: ") + std::strerror(errno));
    }
    CountMoved(n);
    data += n;
    len -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Result<Options> OptionsFromEnv() {
  Options o;
  // Each socket has one worker thread per side doing the AES-GCM work, and a host both
  // sends and receives: beyond half the cores, sockets add thread wake-ups, not throughput
  // (measured on 2 cores: 1 socket trains 2 ranks 1.22x faster than 1 process, 4 sockets
  // 0.95x; README "Distributed training on the CPU").
  const unsigned cores = std::thread::hardware_concurrency();
  o.nsocks = static_cast<int>(std::clamp<unsigned>(cores / 2, 1, 4));
  if (const char* v = std::getenv("ENCLAVE_NET_NSOCKS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > kMaxSockets) {
      return InvalidInput("ENCLAVE_NET_NSOCKS='" + std::string(v) + "': expected 1.." + std::to_string(kMaxSockets));
    }
    o.nsocks = static_cast<int>(n);
  }
  if (const char* v = std::getenv("ENCLAVE_NET_STALL_TIMEOUT_S"); v != nullptr && *v != '\0') {
    // Digits only (no sign, space, fraction or unit); at most 6 of them, so no overflow.
    const size_t len = std::strlen(v);
    long n = -1;
    if (len <= 6 && std::all_of(v, v + len, [](char c) { return c >= '0' && c <= '9'; })) n = std::atol(v);
    if (n < 0 || n > kMaxStallTimeoutSeconds) {
      return InvalidInput("ENCLAVE_NET_STALL_TIMEOUT_S='" + std::string(v) + "': expected whole seconds 1.." +
                          std::to_string(kMaxStallTimeoutSeconds) + ", or 0 for no stall timeout");
    }
    o.stall_timeout_s = static_cast<int>(n);
  }
  if (const char* v = std::getenv("ENCLAVE_NET_GPU"); v != nullptr && *v != '\0') {
    if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0) {
      return InvalidInput("ENCLAVE_NET_GPU='" + std::string(v) + "': expected 1 (GPU records) or 0");
    }
    o.gpu_records = *v == '1';
  }
  return o;
}

Result<Device> SelectDevice() {
  const char* want = std::getenv("ENCLAVE_NET_IFNAME");
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return ErrnoStatus("getifaddrs", errno);
  Device best, loop;
  bool have_best = false, have_loop = false;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    Device d;
    d.name = i->ifa_name;
    d.addr_len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&d.addr, i->ifa_addr, d.addr_len);
    if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(&d.addr)->sin6_addr)) continue;
    if (want != nullptr && *want != '\0') {
      if (d.name == want && (!have_best || fam == AF_INET)) {
        if (!have_best || best.addr.ss_family != AF_INET) best = d;
        have_best = true;
      }
      continue;
    }
    if (i->ifa_flags & IFF_LOOPBACK) {
      if (!have_loop && fam == AF_INET) { loop = d; have_loop = true; }
      continue;
    }
    if (!have_best && fam == AF_INET) { best = d; have_best = true; }
  }
  freeifaddrs(ifs);
  if (want != nullptr && *want != '\0' && !have_best) {
    return NotFound("ENCLAVE_NET_IFNAME='" + std::string(want) + "': no such interface with an address, or it is down");
  }
  if (!have_best && !have_loop) return NotFound("no usable network interface");
  Device d = have_best ? best : loop;
  reinterpret_cast<sockaddr_in*>(&d.addr)->sin_port = 0;  // same offset for v4 and v6
  std::ifstream speed("/sys/class/net/" + d.name + "/speed");
  int mbps = 0;
  if (speed >> mbps && mbps > 0) d.speed_mbps = mbps;
  return d;
}

// ---------------------------------------------------------------- data connections

namespace {
// How often a worker blocked in send()/recv() on a socket with a stall timeout returns
// to count what moved: a quarter of the timeout, at most once a second.
timeval StallPollInterval(std::chrono::steady_clock::duration timeout) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout / 4).count();
  us = std::clamp<long long>(us, 1000, 1000000);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1000000);
  return tv;
}
}  // namespace

DataComm::DataComm(Role role, std::vector<int> fds, Layers layers, std::string peer, int stall_timeout_s)
    : role_(role), fds_(std::move(fds)), layers_(std::move(layers)), peer_(std::move(peer)), lanes_(new Lane[fds_.size()]),
      stall_timeout_(std::chrono::seconds(std::max(stall_timeout_s, 0))) {
  for (auto& s : slots_) s.owner = this;
  if (stall_timeout_.count() > 0) {
    const timeval tv = StallPollInterval(stall_timeout_);
    for (int fd : fds_) {
      (void)setsockopt(fd, SOL_SOCKET, role_ == Role::kSend ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, sizeof(tv));
    }
    last_moved_ = std::chrono::steady_clock::now();
  }
  for (int j = 0; j < nsocks(); ++j) {
    workers_.emplace_back([this, j] { role_ == Role::kSend ? SendWorker(j) : RecvWorker(j); });
  }
}

DataComm::~DataComm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  WakeAll();
  // A sender's last records are in the kernel already; SHUT_RDWR wakes a worker
  // blocked in send or recv. The peer sees EOF, an error only if it still waits.
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  for (auto& t : workers_) t.join();
  for (int fd : fds_) close(fd);
}

DataComm::WorkerStats DataComm::WorkerStatsForTest(int j) const {
  const Lane& lane = lanes_[static_cast<size_t>(j)];
  return {lane.wakeups.load(std::memory_order_relaxed), lane.messages.load(std::memory_order_relaxed)};
}

void DataComm::WakeAll() {
  for (int j = 0; j < nsocks(); ++j) lanes_[static_cast<size_t>(j)].cv.notify_all();
}

void DataComm::PushLocked(uint64_t m, int first, int last) {
  for (int j = first; j < last; ++j) {
    Lane& lane = lanes_[static_cast<size_t>(j)];
    // Cannot overflow (see Lane); a full queue would be a bug here, not the peer's doing.
    if (lane.pushed - lane.popped >= kMaxRequests) std::abort();
    lane.queue[lane.pushed++ % kMaxRequests] = m;
  }
}

Request* DataComm::WaitNext(int j) {
  Lane& lane = lanes_[static_cast<size_t>(j)];
  std::unique_lock<std::mutex> lock(mu_);
  while (lane.popped == lane.pushed && !stopping_ && !failed_.load()) {
    lane.cv.wait(lock);
    lane.wakeups.fetch_add(1, std::memory_order_relaxed);
  }
  if (stopping_ || failed_.load()) return nullptr;
  const uint64_t m = lane.queue[lane.popped++ % kMaxRequests];
  lane.messages.fetch_add(1, std::memory_order_relaxed);
  return &slots_[m % kMaxRequests];
}

bool DataComm::has_device_layers() const {
  return role_ == Role::kSend ? !layers_.device_senders.empty() : !layers_.device_receivers.empty();
}

Result<Request*> DataComm::Post(uint8_t* data, uint64_t size, bool on_device) {
  if (size > kMaxMessageBytes) return InvalidInput("message of " + std::to_string(size) + " bytes exceeds 2^31-1");
  if (data == nullptr && size > 0) return InvalidInput("NULL buffer");
  if (on_device && !has_device_layers()) {
    return InvalidInput("a GPU buffer on a connection without GPU records (ENCLAVE_NET_GPU=1 turns them on)");
  }
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  Request* r = &slots_[next_post_ % kMaxRequests];
  if (r->state.load(std::memory_order_acquire) != 0) return static_cast<Request*>(nullptr);
  // A send's chunk count is known now: only its workers are woken. A receive wakes
  // worker 0, which wakes the others once chunk 0 has told (and proved) the size.
  const int needed = role_ == Role::kSend
                         ? static_cast<int>(std::min<uint64_t>(PlanChunks(size, nsocks()).count, nsocks()))
                         : Request::kNeededUnknown;
  r->msg_index = next_post_;
  r->data = data;
  r->on_device = on_device;
  r->capacity = size;
  r->size.store(role_ == Role::kSend ? size : 0, std::memory_order_relaxed);
  r->needed.store(needed, std::memory_order_relaxed);
  r->passed.store(0, std::memory_order_relaxed);
  if (stall_timeout_.count() > 0) r->posted_at = std::chrono::steady_clock::now();
  r->state.store(1, std::memory_order_release);
  const int wake = role_ == Role::kSend ? needed : 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PushLocked(next_post_++, 0, wake);
  }
  for (int j = 0; j < wake; ++j) lanes_[static_cast<size_t>(j)].cv.notify_one();
  return r;
}

bool DataComm::Passed(const Request& r) {
  // passed never exceeds needed, and never reaches kNeededUnknown.
  return r.passed.load(std::memory_order_acquire) == r.needed.load(std::memory_order_acquire);
}

void DataComm::AdvanceComplete() {
  // A slot no longer holding message complete_ (freed by test(), or reused by a later
  // post) means that message was reported done already.
  while (complete_ < next_post_) {
    const Request& s = slots_[complete_ % kMaxRequests];
    if (s.state.load(std::memory_order_acquire) == 1 && s.msg_index == complete_ && !Passed(s)) break;
    ++complete_;
  }
}

Status DataComm::Test(Request* r, bool* done, uint64_t* size) {
  *done = false;
  if (r->state.load(std::memory_order_acquire) != 1) return InvalidInput("test() of a request that is not posted");
  // Workers pass messages out of order across sockets (a one-chunk message after a
  // large one completes on socket 0 first); test() still reports them in posting order.
  AdvanceComplete();
  if (r->msg_index < complete_) {
    *done = true;
    *size = r->size.load(std::memory_order_acquire);
    r->state.store(0, std::memory_order_release);
    return OkStatus();
  }
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  if (stall_timeout_.count() > 0) return CheckStall();
  return OkStatus();
}

// NCCL's thread, from test() of a request that is not done (after AdvanceComplete()):
// the one clock read of the call.
Status DataComm::CheckStall() {
  const auto now = std::chrono::steady_clock::now();
  const uint64_t moved = moved_.load(std::memory_order_relaxed);
  if (moved != moved_seen_) {
    moved_seen_ = moved;
    last_moved_ = now;
  }
  // Message complete_ is the oldest outstanding one (its slot still holds it).
  if (complete_ == next_post_) return OkStatus();
  const auto since = std::max(last_moved_, slots_[complete_ % kMaxRequests].posted_at);
  if (now - since < stall_timeout_) return OkStatus();
  const uint64_t outstanding = next_post_ - complete_;
  const std::string secs = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stall_timeout_).count());
  const std::string what = std::string(role_ == Role::kSend ? "send" : "receive") + " connection with " + peer_ +
                           " made no progress for " + secs + " s with " + std::to_string(outstanding) +
                           (outstanding == 1 ? " request" : " requests") + " outstanding";
  FailWith(Unavailable(what + " (ENCLAVE_NET_STALL_TIMEOUT_S=" + secs + ")"), LogLevel::kWarn,
           what + "; failing it (ENCLAVE_NET_STALL_TIMEOUT_S=" + secs + ")");
  std::lock_guard<std::mutex> lock(mu_);
  return error_;  // ours, or a worker's failure that came first
}

void DataComm::Fail(const Status& st) {
  Status error = st.Annotate(std::string(role_ == Role::kSend ? "send" : "receive") + " connection with " + peer_);
  const std::string line = error.message() + "; the connection is failed and every pending request returns an error";
  FailWith(std::move(error), st.code() == Code::kAuthFailed ? LogLevel::kSecurity : LogLevel::kWarn, line);
}

void DataComm::FailWith(Status error, LogLevel level, const std::string& line) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.load()) {
      error_ = std::move(error);
      // Logged before test() can see the failure, so the line is there when it reports.
      Log(level, line);
      failed_.store(true, std::memory_order_release);
      first = true;
    }
  }
  if (first) {
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  }
  WakeAll();
}

void DataComm::InstallProgressCounter() { t_moved = stall_timeout_.count() > 0 ? &moved_ : nullptr; }

// Worker j sends chunks j, j+n, ... of the messages queued for it (those with more than
// j chunks); its record sequence counts only what socket j carries.
void DataComm::SendWorker(int j) {
  InstallProgressCounter();
  uint64_t seq = 0;
  for (;;) {
    Request* r = WaitNext(j);
    if (r == nullptr) return;
    const uint64_t m = r->msg_index;
    const ChunkPlan plan = PlanChunks(r->capacity, nsocks());
    for (uint64_t k = static_cast<uint64_t>(j); k < plan.count; k += static_cast<uint64_t>(nsocks())) {
      RecordHeader h;
      h.payload_len = static_cast<uint32_t>(plan.Length(k));
      h.seq = seq;
      h.msg_index = m;
      h.msg_size = plan.size;
      RecordSender& sender = r->on_device ? *layers_.device_senders[j] : *layers_.senders[j];
      Status st = sender.Send(fds_[j], EncodeRecordHeader(h), seq, r->data + plan.Offset(k), h.payload_len);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      if (!st.ok()) return Fail(st.Annotate("socket " + std::to_string(j) + ", message " + std::to_string(m)));
      ++seq;
    }
    r->passed.fetch_add(1, std::memory_order_acq_rel);
  }
}

Status DataComm::ReadHeader(int j, uint64_t seq, uint64_t m, RecordHeaderBytes* raw, RecordHeader* h) {
  RETURN_IF_ERROR(RecvAll(fds_[j], raw->data(), raw->size()));
  ASSIGN_OR_RETURN(*h, ParseRecordHeader(*raw));
  if (h->seq != seq) {
    return AuthFailed("record sequence number " + std::to_string(h->seq) + ", expected " + std::to_string(seq) +
                      (h->seq < seq ? " (replayed or reordered record)" : " (dropped or reordered record)"));
  }
  if (h->msg_index != m) {
    return AuthFailed("record for message " + std::to_string(h->msg_index) + ", expected message " + std::to_string(m));
  }
  return OkStatus();
}

// Worker 0 gets every message; it learns the size from chunk 0 and, once that record
// has verified, queues the message for workers 1 .. needed-1. Worker j > 0 thus only
// ever sees messages it carries a chunk of, with their authenticated size.
void DataComm::RecvWorker(int j) {
  InstallProgressCounter();
  uint64_t seq = 0;
  const uint64_t n = static_cast<uint64_t>(nsocks());
  for (;;) {
    Request* r = WaitNext(j);
    if (r == nullptr) return;
    const uint64_t m = r->msg_index;
    auto where = [&] { return "socket " + std::to_string(j) + ", message " + std::to_string(m); };
    auto fail = [&](const Status& st) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      Fail(st.Annotate(where()));
    };
    bool first = j == 0;
    ChunkPlan plan = PlanChunks(first ? 0 : r->size.load(std::memory_order_acquire), nsocks());
    for (uint64_t k = static_cast<uint64_t>(j); first || k < plan.count; k += n) {
      RecordHeaderBytes raw{};
      RecordHeader h;
      if (Status st = ReadHeader(j, seq, m, &raw, &h); !st.ok()) return fail(st);
      if (first) {
        // Chunk 0 announces the size. The other workers use it only after this
        // record's tag has verified (published below).
        if (h.msg_size > r->capacity) {
          return fail(AuthFailed("message truncated: the sender sent " + std::to_string(h.msg_size) +
                                 " bytes, the receive posted " + std::to_string(r->capacity)));
        }
        plan = PlanChunks(h.msg_size, nsocks());
      } else if (h.msg_size != plan.size) {
        return fail(AuthFailed("record says message size " + std::to_string(h.msg_size) + ", socket 0 said " +
                               std::to_string(plan.size)));
      }
      if (h.payload_len != plan.Length(k)) {
        return fail(AuthFailed("record payload_len " + std::to_string(h.payload_len) + ", expected " +
                               std::to_string(plan.Length(k))));
      }
      RecordReceiver& receiver = r->on_device ? *layers_.device_receivers[j] : *layers_.receivers[j];
      Status st = receiver.Receive(fds_[j], raw, seq, r->data + plan.Offset(k), h.payload_len);
      if (!st.ok()) return fail(st);
      ++seq;
      if (first) {
        const int needed = static_cast<int>(std::min<uint64_t>(plan.count, n));
        r->size.store(h.msg_size, std::memory_order_relaxed);
        r->needed.store(needed, std::memory_order_release);
        if (needed > 1) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            PushLocked(m, 1, needed);
          }
          for (int i = 1; i < needed; ++i) lanes_[static_cast<size_t>(i)].cv.notify_one();
        }
        first = false;
      }
    }
    r->passed.fetch_add(1, std::memory_order_acq_rel);
  }
}

// ---------------------------------------------------------------- handshake, connector side

struct ClientSock {
  int fd = -1;
  enum State { kConnecting, kSendHello, kReadServerHello, kSendFinished, kDone } state = kConnecting;
  std::array<uint8_t, kClientHelloBytes> hello{};
  std::array<uint8_t, kServerHelloBytes> server{};
  std::array<uint8_t, kClientFinishedBytes> finished{};
  size_t io = 0;
  crypto::SecretBytes data_key;
};

struct PendingConnect {
  ListenHandle handle;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::vector<ClientSock> socks;
  ~PendingConnect() {
    for (auto& s : socks)
      if (s.fd >= 0) close(s.fd);
  }
};

Context::Context(crypto::SecretBytes key, uint64_t comm_id, Device device, Options options, const RecordProtection& p,
                 const RecordProtection* device_p)
    : job_key_(std::move(key)), comm_id_(comm_id), device_(std::move(device)), options_(options), protection_(p),
      device_protection_(device_p) {
  crypto::RandomBytes(endpoint_id_);
}

Context::~Context() = default;

Result<std::unique_ptr<Context>> Context::Create(crypto::SecretBytes job_key, uint64_t comm_id, Device device,
                                                 Options options, const RecordProtection& protection,
                                                 const RecordProtection* device_protection) {
  RETURN_IF_ERROR(crypto::InitCrypto());
  if (job_key.size() < 32) return FailedPrecondition("no job key (or shorter than 32 bytes): refusing to start");
  if (options.nsocks < 1 || options.nsocks > kMaxSockets) return InvalidInput("nsocks outside 1..16");
  if (options.stall_timeout_s < 0 || options.stall_timeout_s > kMaxStallTimeoutSeconds) {
    return InvalidInput("stall timeout outside 0..86400 s");
  }
  return std::unique_ptr<Context>(
      new Context(std::move(job_key), comm_id, std::move(device), options, protection, device_protection));
}

Result<std::unique_ptr<ListenComm>> Context::Listen(std::span<uint8_t, kHandleBytes> handle) {
  const int fam = device_.addr.ss_family;
  int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  sockaddr_storage addr = device_.addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), device_.addr_len) != 0 || listen(fd, 256) != 0) {
    Status st = ErrnoStatus("bind/listen on " + device_.name + " " + AddrString(addr), errno);
    close(fd);
    return st;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ListenHandle h;
  if (fam == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    h.family = 4;
    h.port = ntohs(a->sin_port);
    std::memcpy(h.addr.data(), &a->sin_addr, 4);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    h.family = 6;
    h.port = ntohs(a->sin6_port);
    std::memcpy(h.addr.data(), &a->sin6_addr, 16);
  }
  crypto::RandomBytes(h.listen_id);
  EncodeHandle(h, handle);
  Log(LogLevel::kInfo, "listening on " + device_.name + " " + AddrString(addr));
  return std::make_unique<ListenComm>(this, fd, h.listen_id);
}

// Every failure of connect() and accept() is logged once, where it happens, with what
// and where: plugin.cc returns them to NCCL without logging again.
namespace {
Status LogFailure(Status st) {
  Log(st.code() == Code::kAuthFailed ? LogLevel::kSecurity : LogLevel::kWarn, st.message());
  return st;
}
}  // namespace

Result<std::unique_ptr<DataComm>> Context::Connect(std::span<uint8_t, kHandleBytes> handle) {
  auto decoded = DecodeHandle(handle);
  if (!decoded.ok()) return LogFailure(decoded.status().Annotate("connect(): refused the listen handle"));
  ListenHandle h = *decoded;
  std::unique_lock<std::mutex> lock(mu_);
  PendingConnect* pc = nullptr;
  if (h.connect_token != 0) {
    auto it = pending_.find(h.connect_token);
    if (it == pending_.end()) {
      return LogFailure(FailedPrecondition(
          "connect(): the handle carries an unknown connect token (not from this context, or its attempt has "
          "ended; a new attempt needs the handle as listen() wrote it)"));
    }
    pc = it->second.get();
  } else {
    auto fresh = std::make_unique<PendingConnect>();
    fresh->handle = h;
    if (h.family == 4) {
      auto* a = reinterpret_cast<sockaddr_in*>(&fresh->addr);
      a->sin_family = AF_INET;
      a->sin_port = htons(h.port);
      std::memcpy(&a->sin_addr, h.addr.data(), 4);
      fresh->addr_len = sizeof(sockaddr_in);
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&fresh->addr);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(h.port);
      std::memcpy(&a->sin6_addr, h.addr.data(), 16);
      fresh->addr_len = sizeof(sockaddr_in6);
    }
    ClientHello ch;
    ch.listen_id = h.listen_id;
    crypto::RandomBytes(ch.client_random);
    ch.endpoint_id = endpoint_id_;
    ch.comm_id = comm_id_;
    ch.nsocks = static_cast<uint16_t>(options_.nsocks);
    fresh->socks.resize(static_cast<size_t>(options_.nsocks));
    for (int i = 0; i < options_.nsocks; ++i) {
      ClientSock& s = fresh->socks[static_cast<size_t>(i)];
      ch.socket_index = static_cast<uint16_t>(i);
      s.hello = EncodeClientHello(ch);
      // On a failure, fresh closes the sockets made so far.
      const std::string where = "connect to " + AddrString(fresh->addr) + ": socket " + std::to_string(i);
      s.fd = socket(fresh->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (s.fd < 0) return LogFailure(ErrnoStatus(where + ": socket()", errno));
      SetNoDelay(s.fd);
      if (connect(s.fd, reinterpret_cast<sockaddr*>(&fresh->addr), fresh->addr_len) != 0 && errno != EINPROGRESS) {
        return LogFailure(ErrnoStatus(where + ": connect()", errno));
      }
    }
    uint64_t token = 0;
    while (token == 0 || pending_.count(token) != 0) crypto::RandomBytes(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&token), 8));
    h.connect_token = token;
    EncodeHandle(h, handle);
    pc = fresh.get();
    pending_[token] = std::move(fresh);
  }
  bool done = false;
  Status st = Progress(*pc, &done);
  if (!st.ok() || done) {
    std::unique_ptr<PendingConnect> owned = std::move(pending_[h.connect_token]);
    pending_.erase(h.connect_token);
    lock.unlock();
    const std::string peer = AddrString(owned->addr);
    if (!st.ok()) return LogFailure(st.Annotate("connect to " + peer));
    // Every socket gets its record layer before any is handed over: on a failure (the
    // record layer's memory, say), owned closes them all.
    DataComm::Layers layers;
    for (size_t i = 0; i < owned->socks.size(); ++i) {
      ClientSock& s = owned->socks[i];
      const std::string where = "connect to " + peer + ": socket " + std::to_string(i);
      if (Status b = SetBlocking(s.fd, true); !b.ok()) return LogFailure(b.Annotate(where));
      auto sender = protection_.MakeSender(s.data_key);
      if (!sender.ok()) return LogFailure(sender.status().Annotate(where + ": record layer (MakeSender)"));
      layers.senders.push_back(std::move(sender).value());
      if (device_protection_ == nullptr) continue;
      auto device_sender = device_protection_->MakeSender(s.data_key);
      if (!device_sender.ok()) {
        return LogFailure(device_sender.status().Annotate(where + ": GPU record layer (MakeSender)"));
      }
      layers.device_senders.push_back(std::move(device_sender).value());
    }
    std::vector<int> fds;
    for (auto& s : owned->socks) fds.push_back(std::exchange(s.fd, -1));
    Log(LogLevel::kInfo, "connected to " + peer + " with " + std::to_string(fds.size()) + " sockets");
    return std::make_unique<DataComm>(DataComm::Role::kSend, std::move(fds), std::move(layers), peer,
                                      options_.stall_timeout_s);
  }
  return std::unique_ptr<DataComm>();
}

Status Context::Progress(PendingConnect& pc, bool* done) {
  *done = true;
  for (size_t i = 0; i < pc.socks.size(); ++i) {
    ClientSock& s = pc.socks[i];
    const std::string where = "socket " + std::to_string(i);
    if (s.state == ClientSock::kConnecting) {
      pollfd p{s.fd, POLLOUT, 0};
      if (poll(&p, 1, 0) <= 0) { *done = false; continue; }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return Status(Code::kUnavailable, where + ": connect: " + std::strerror(err));
      s.state = ClientSock::kSendHello;
      s.io = 0;
    }
    if (s.state == ClientSock::kSendHello) {
      ASSIGN_OR_RETURN(bool sent, WriteSome(s.fd, s.hello.data(), s.hello.size(), &s.io));
      if (!sent) { *done = false; continue; }
      s.state = ClientSock::kReadServerHello;
      s.io = 0;
    }
    if (s.state == ClientSock::kReadServerHello) {
      auto got = ReadSome(s.fd, s.server.data(), s.server.size(), &s.io);
      if (!got.ok()) {
        return got.status().Annotate(where + ": the listener closed the connection before its ServerHello (a listen "
                                     "id or communicator it does not serve, our handshake passed its deadline, "
                                     "or it went away)");
      }
      if (!*got) { *done = false; continue; }
      auto sh = ParseServerHello(s.server);
      if (!sh.ok()) return sh.status().Annotate(where);
      if (!ArrayEq(sh->listen_id, pc.handle.listen_id) || sh->socket_index != i || sh->nsocks != pc.socks.size()) {
        return AuthFailed(where + ": ServerHello does not echo our listen id, socket index and socket count");
      }
      if (sh->comm_id != comm_id_) {
        return AuthFailed(where + ": listener is in communicator " + std::to_string(sh->comm_id) + ", we are in " +
                          std::to_string(comm_id_));
      }
      ASSIGN_OR_RETURN(SocketKeys keys,
                       DeriveSocketKeys(job_key_, s.hello, ByteSpan(s.server.data(), kServerHelloBodyBytes)));
      Mac expect = FinishedMac(keys.server_finished, keys.transcript);
      if (!crypto::ConstantTimeEquals(expect, sh->server_finished)) {
        return AuthFailed(where + ": the listener did not prove the job key (ServerFinished MAC mismatch); "
                          "refused before any payload");
      }
      s.finished = EncodeClientFinished(FinishedMac(keys.client_finished, keys.transcript));
      s.data_key = std::move(keys.data);
      s.state = ClientSock::kSendFinished;
      s.io = 0;
    }
    if (s.state == ClientSock::kSendFinished) {
      ASSIGN_OR_RETURN(bool sent, WriteSome(s.fd, s.finished.data(), s.finished.size(), &s.io));
      if (!sent) { *done = false; continue; }
      s.state = ClientSock::kDone;
    }
  }
  return OkStatus();
}

// ---------------------------------------------------------------- handshake, listener side

struct ServerSock {
  int fd = -1;
  std::string peer;
  // Closed if the handshake is not done by then: kHandshakeTimeout after accept, and
  // again after the ServerHello went out (the connector's time to answer).
  std::chrono::steady_clock::time_point deadline{};
  enum State { kReadHello, kSendHello, kReadFinished, kDone } state = kReadHello;
  std::array<uint8_t, kClientHelloBytes> hello{};
  std::array<uint8_t, kServerHelloBytes> server{};
  std::array<uint8_t, kClientFinishedBytes> finished{};
  size_t io = 0;
  ClientHello ch;
  bool have_hello = false;  // ch was parsed (names the socket in log lines)
  crypto::SecretBytes data_key;  // once the ClientFinished verified
  ~ServerSock() {
    if (fd >= 0) close(fd);
  }
};

// The finished (authenticated) sockets of one connection, by client_random.
struct ListenComm::Group {
  uint16_t nsocks = 0;
  uint16_t have = 0;
  std::vector<std::unique_ptr<ServerSock>> socks;  // by socket index
  std::string peer;                                // of its first socket, for the log
  std::chrono::steady_clock::time_point deadline{};  // kGroupTimeout after its last socket joined
};

ListenComm::ListenComm(Context* ctx, int fd, Id listen_id) : ctx_(ctx), fd_(fd), listen_id_(listen_id) {}

ListenComm::~ListenComm() {
  FlushRefused();
  close(fd_);
}

void ListenComm::Refused(const std::string& line) {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_refused_log_) {
    ++refused_unlogged_;
    last_refused_ = line;
    return;
  }
  FlushRefused();
  Log(LogLevel::kSecurity, line);
  next_refused_log_ = now + kLimitLogInterval;
}

void ListenComm::FlushRefused() {
  if (refused_unlogged_ == 0) return;
  Log(LogLevel::kSecurity, "refused " + std::to_string(refused_unlogged_) + " more " +
                               (refused_unlogged_ == 1 ? "handshake" : "handshakes") +
                               " since the last such line (at most one line per " +
                               std::to_string(kLimitLogInterval.count()) + " s); the last: " + last_refused_);
  refused_unlogged_ = 0;
  last_refused_.clear();
}

Status ListenComm::Progress(ServerSock& s, Failure* failure) {
  // Once the ClientHello names our listen id, a failure is the peer's (kRefused), except
  // where our own resources fail (kLocal).
  *failure = Failure::kRefused;
  if (s.state == ServerSock::kReadHello) {
    auto got = ReadSome(s.fd, s.hello.data(), s.hello.size(), &s.io);
    if (!got.ok()) {
      *failure = Failure::kStray;  // nothing proved it is our peer
      return got.status();
    }
    if (!*got) return OkStatus();
    if (std::memcmp(s.hello.data() + kPreambleBytes, listen_id_.data(), kIdBytes) != 0) {
      *failure = Failure::kStray;
      return AuthFailed("ClientHello for another listen id (or not a ClientHello at all)");
    }
    ASSIGN_OR_RETURN(s.ch, ParseClientHello(s.hello));
    s.have_hello = true;
    if (s.ch.comm_id != ctx_->comm_id()) {
      return AuthFailed("connector is in communicator " + std::to_string(s.ch.comm_id) + ", we are in " +
                        std::to_string(ctx_->comm_id()));
    }
    ServerHello sh;
    sh.listen_id = listen_id_;
    crypto::RandomBytes(sh.server_random);
    sh.endpoint_id = ctx_->endpoint_id();
    sh.comm_id = ctx_->comm_id();
    sh.socket_index = s.ch.socket_index;
    sh.nsocks = s.ch.nsocks;
    // The keys are derived for the ServerFinished MAC and dropped: a socket that has not
    // proved the job key holds no locked memory while it waits (connections without the
    // key cannot use up the listener's), and they are derived again from the same
    // transcript when its ClientFinished comes.
    auto body = EncodeServerHelloBody(sh);
    auto derived = DeriveSocketKeys(ctx_->job_key(), s.hello, body);
    if (!derived.ok()) {
      *failure = Failure::kLocal;  // the keys' locked memory, say: it would fail the real peer too
      return derived.status().Annotate("deriving the socket's keys");
    }
    Mac sf = FinishedMac(derived->server_finished, derived->transcript);
    std::memcpy(s.server.data(), body.data(), body.size());
    std::memcpy(s.server.data() + body.size(), sf.data(), sf.size());
    s.state = ServerSock::kSendHello;
    s.io = 0;
  }
  if (s.state == ServerSock::kSendHello) {
    ASSIGN_OR_RETURN(bool sent, WriteSome(s.fd, s.server.data(), s.server.size(), &s.io));
    if (!sent) return OkStatus();
    s.state = ServerSock::kReadFinished;
    s.io = 0;
    s.deadline = std::chrono::steady_clock::now() + kHandshakeTimeout;
  }
  if (s.state == ServerSock::kReadFinished) {
    auto got = ReadSome(s.fd, s.finished.data(), s.finished.size(), &s.io);
    if (!got.ok()) return AuthFailed(got.status().message() + " before it proved the job key");
    if (!*got) return OkStatus();
    ASSIGN_OR_RETURN(Mac cf, ParseClientFinished(s.finished));
    auto derived = DeriveSocketKeys(ctx_->job_key(), s.hello,
                                    ByteSpan(s.server.data(), kServerHelloBodyBytes));
    if (!derived.ok()) {
      *failure = Failure::kLocal;
      return derived.status().Annotate("deriving the socket's keys");
    }
    Mac expect = FinishedMac(derived->client_finished, derived->transcript);
    if (!crypto::ConstantTimeEquals(expect, cf)) {
      return AuthFailed("the connector did not prove the job key (ClientFinished MAC mismatch); refused before any payload");
    }
    s.data_key = std::move(derived->data);
    s.state = ServerSock::kDone;
  }
  return OkStatus();
}

namespace {
// One accepted socket's record layers: the host one, and the GPU one when the context has it.
Status MakeReceivers(const Context& ctx, const crypto::SecretBytes& data_key, DataComm::Layers* layers) {
  auto rx = ctx.protection().MakeReceiver(data_key);
  if (!rx.ok()) return rx.status().Annotate("record layer (MakeReceiver)");
  layers->receivers.push_back(std::move(rx).value());
  if (ctx.device_protection() == nullptr) return OkStatus();
  auto device_rx = ctx.device_protection()->MakeReceiver(data_key);
  if (!device_rx.ok()) return device_rx.status().Annotate("GPU record layer (MakeReceiver)");
  layers->device_receivers.push_back(std::move(device_rx).value());
  return OkStatus();
}
}  // namespace

Result<std::unique_ptr<DataComm>> ListenComm::Accept() {
  using Clock = std::chrono::steady_clock;
  const auto handshake_s = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kHandshakeTimeout).count());
  // New connections are taken from the listen backlog only while fewer than
  // kMaxPendingHandshakes are in their handshake; the others wait in the backlog (nothing
  // is refused) until a handshake finishes, fails or passes its deadline.
  while (pending_.size() < kMaxPendingHandshakes) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return LogFailure(ErrnoStatus("accept(): accept4 on the listening socket", errno));
    }
    SetNoDelay(fd);
    auto s = std::make_unique<ServerSock>();
    s->fd = fd;
    s->peer = AddrString(ss);
    s->deadline = Clock::now() + kHandshakeTimeout;
    pending_.push_back(std::move(s));
  }
  if (pending_.size() >= kMaxPendingHandshakes) {
    const auto now = Clock::now();
    if (now >= next_limit_log_) {
      Log(LogLevel::kWarn, "accept(): pending-handshake limit reached: " + std::to_string(pending_.size()) +
                               " connections are in their handshake, not authenticated yet; new connections wait "
                               "in the listen backlog until one finishes, fails or passes its " + handshake_s +
                               " s deadline (many idle connections to this port: someone may be holding the slots)");
      next_limit_log_ = now + kLimitLogInterval;
    }
  }
  const auto now = pending_.empty() ? Clock::time_point{} : Clock::now();
  if (refused_unlogged_ > 0) {
    const auto t = pending_.empty() ? Clock::now() : now;
    if (t >= next_refused_log_) {
      FlushRefused();
      next_refused_log_ = t + kLimitLogInterval;
    }
  }
  size_t expired = 0;
  std::string expired_line;
  struct LogExpired {  // on every way out of the loop below
    const size_t& n;
    const std::string& line;
    ~LogExpired() {
      if (n == 1) Log(LogLevel::kWarn, line);
      if (n > 1) Log(LogLevel::kWarn, line + ", and " + std::to_string(n - 1) + " more the same way");
    }
  } log_expired{expired, expired_line};
  for (size_t i = 0; i < pending_.size();) {
    ServerSock& s = *pending_[i];
    Failure failure = Failure::kRefused;
    Status st = Progress(s, &failure);
    if (!st.ok()) {
      const std::string what = "closed a connection from " + s.peer +
                               (s.have_hello ? " (socket " + std::to_string(s.ch.socket_index) + ")" : "") + ": " +
                               st.message();
      if (failure == Failure::kLocal) {
        Status out = st.Annotate("accept from " + s.peer);
        pending_.erase(pending_.begin() + static_cast<long>(i));
        return LogFailure(out);
      }
      // The listen id travels in the clear (NCCL's bootstrap, the rendezvous), so a
      // failed handshake does not mean that our peer failed: anyone who can reach the
      // port can cause one. Only this socket is closed; accept() waits on for the peer,
      // as long as its caller does (NCCL's bootstrap timeout, the ring's --peer-timeout).
      if (failure == Failure::kStray) {
        Log(LogLevel::kWarn, what);
      } else {
        Refused(what + "; accept() goes on waiting for its peer");
      }
      pending_.erase(pending_.begin() + static_cast<long>(i));
      continue;
    }
    if (s.state != ServerSock::kDone) {
      if (now > s.deadline) {
        // Checked after Progress read what had arrived, so a listener that was not
        // called for a while does not drop a connector that did its part. One line per
        // call names the first (idle connections tend to expire together).
        if (expired++ == 0) {
          expired_line = "closed a connection from " + s.peer + ": its handshake did not finish within " +
                         handshake_s + " s (" +
                         (s.state == ServerSock::kReadHello ? "no complete ClientHello"
                                                            : "no ClientFinished after our ServerHello") +
                         ")";
        }
        pending_.erase(pending_.begin() + static_cast<long>(i));
        continue;
      }
      ++i;
      continue;
    }
    std::unique_ptr<ServerSock> owned = std::move(pending_[i]);
    pending_.erase(pending_.begin() + static_cast<long>(i));
    auto& g = groups_[owned->ch.client_random];
    if (!g) {
      g = std::make_unique<Group>();
      g->nsocks = owned->ch.nsocks;
      g->socks.resize(g->nsocks);
      g->peer = owned->peer;
    }
    const uint16_t idx = owned->ch.socket_index;
    if (owned->ch.nsocks != g->nsocks || g->socks[idx]) {
      // Only a holder of the job key gets here (the socket proved it), but the group
      // that came first may be our peer's: this socket alone is closed (owned), the
      // group is kept and completes, or expires (below).
      Refused("closed a connection from " + owned->peer + " (socket " + std::to_string(idx) + " of " +
              std::to_string(owned->ch.nsocks) + "): it proved the job key, but " +
              (owned->ch.nsocks != g->nsocks
                   ? "its connection has " + std::to_string(g->nsocks) + " sockets"
                   : "socket " + std::to_string(idx) + " of its connection is there already") +
              " (a socket index that repeats or disagrees on the socket count); accept() goes on waiting for its "
              "peer");
      continue;
    }
    g->socks[idx] = std::move(owned);
    ++g->have;
    g->deadline = Clock::now() + kGroupTimeout;
  }
  // A connection whose other sockets never come (they failed their handshake, or their
  // connector gave up) is closed: its sockets hold descriptors, never a slot.
  if (!groups_.empty()) {
    const auto group_now = Clock::now();
    for (auto it = groups_.begin(); it != groups_.end();) {
      Group& g = *it->second;
      if (g.have == g.nsocks || group_now <= g.deadline) {
        ++it;
        continue;
      }
      Log(LogLevel::kWarn, "closed " + std::to_string(g.have) + " of the " + std::to_string(g.nsocks) +
                               " sockets of a connection from " + g.peer + ": its other sockets did not finish their "
                               "handshake within " + std::to_string(kGroupTimeout.count()) + " s");
      it = groups_.erase(it);
    }
  }
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    Group& g = *it->second;
    if (g.have != g.nsocks) continue;
    const std::string peer = g.socks[0]->peer;
    // Every socket gets its record layer (locked staging memory: RLIMIT_MEMLOCK) before
    // any is handed over. On a failure the group is dropped, which closes its sockets.
    DataComm::Layers layers;
    for (size_t i = 0; i < g.socks.size(); ++i) {
      ServerSock& s = *g.socks[i];
      const std::string where = "accept from " + peer + ": socket " + std::to_string(i);
      Status st = SetBlocking(s.fd, true);
      if (st.ok()) st = MakeReceivers(*ctx_, s.data_key, &layers);
      if (st.ok()) continue;
      groups_.erase(it);
      return LogFailure(st.Annotate(where));
    }
    std::vector<int> fds;
    for (auto& s : g.socks) fds.push_back(std::exchange(s->fd, -1));
    groups_.erase(it);
    Log(LogLevel::kInfo, "accepted " + std::to_string(fds.size()) + " sockets from " + peer);
    return std::make_unique<DataComm>(DataComm::Role::kRecv, std::move(fds), std::move(layers), peer,
                                      ctx_->options().stall_timeout_s);
  }
  return std::unique_ptr<DataComm>();
}

}  // namespace enclave::net
