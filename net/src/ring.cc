#include "enclave/net/ring.h"

#include <cstdarg>
#include <cstdio>
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/files.h"
#include "enclave/net/plugin.h"
#include "nccl_net_v11.h"

extern "C" ncclNet_v11_t ncclNetPlugin_v11;  // libnccl-net-enclave.so

namespace enclave::net {
namespace {

using Clock = std::chrono::steady_clock;

// The plugin's warnings (a failed peer, a refused handshake) reach the user's terminal.
void PluginLog(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "enclave-train: %s\n", buf);
}

Status FromNccl(ncclResult_t rc, const std::string& what) {
  if (rc == ncclSuccess) return OkStatus();
  const std::string m = what + " failed (NCCL result " + std::to_string(static_cast<int>(rc)) + ")";
  return rc == ncclRemoteError ? Unavailable(m + ": the peer failed or was refused; see the line above")
                               : Internal(m);
}

// Polls without burning a core the plugin's workers need: spin briefly, then sleep.
void Backoff(int* spins) {
  if (++*spins < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool IsTagChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}

class Directory final : public HandleExchange {
 public:
  Directory(std::string dir, std::string tag) : dir_(std::move(dir)), tag_(std::move(tag)) {}

  Status Publish(int rank, const RingHandle& handle) override {
    const std::string text = HexEncode(ByteSpan(handle.data(), handle.size())) + "\n";
    ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(Path(rank), true));
    RETURN_IF_ERROR(out.Write(text.data(), text.size()));
    return out.Commit();
  }

  Result<RingHandle> Fetch(int rank, Clock::time_point deadline) override {
    const std::string path = Path(rank);
    for (;;) {
      std::error_code ec;
      if (std::filesystem::exists(path, ec)) {
        ASSIGN_OR_RETURN(std::vector<uint8_t> text, ReadWholeFile(path, 4096));
        std::string s(text.begin(), text.end());
        if (!s.empty() && s.back() == '\n') s.pop_back();
        auto bytes = HexDecode(s);
        if (!bytes.ok() || bytes->size() != kRingHandleBytes) {
          return InvalidInput(path + ": not a listen handle (need " + std::to_string(2 * kRingHandleBytes) +
                              " hex digits)");
        }
        RingHandle h;
        std::memcpy(h.data(), bytes->data(), h.size());
        return h;
      }
      if (Clock::now() > deadline) return Unavailable("rank " + std::to_string(rank) + " did not publish " + path + " in time");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void Withdraw(int rank) override {
    std::error_code ec;
    std::filesystem::remove(Path(rank), ec);
  }

 private:
  std::string Path(int rank) const {
    return (std::filesystem::path(dir_) / (tag_ + ".rank-" + std::to_string(rank) + ".handle")).string();
  }
  std::string dir_, tag_;
};

// The bytes of a listen handle that listen() writes and the exchange carries
// (docs/formats/net-transport.md, "The listen handle"): connect() keeps its token in
// bytes 64..71 of its own copy, so two handles name the same listener when these agree.
constexpr size_t kPublishedHandleBytes = 64;
bool SameListener(const RingHandle& a, const RingHandle& b) {
  return std::memcmp(a.data(), b.data(), kPublishedHandleBytes) == 0;
}

// Between the polls for a fresh handle after a failed connect, and so between two
// connect attempts: 100 ms, doubling, at most 1 s. The ring's own "retrying" line is
// printed at most every kRetryLogInterval.
constexpr auto kFirstRetryDelay = std::chrono::milliseconds(100);
constexpr auto kMaxRetryDelay = std::chrono::seconds(1);
constexpr auto kRetryLogInterval = std::chrono::seconds(5);

// "ADDR:PORT" of a listen handle (docs/formats/net-transport.md, "The listen handle"), for
// the log line that says which interface the ring uses.
std::string HandleAddress(const RingHandle& h) {
  char text[INET6_ADDRSTRLEN] = "?";
  const int family = h[5] == 6 ? AF_INET6 : AF_INET;
  inet_ntop(family, h.data() + 8, text, sizeof(text));
  const unsigned port = h[6] | (unsigned{h[7]} << 8);
  return (family == AF_INET6 ? "[" + std::string(text) + "]" : std::string(text)) + ":" + std::to_string(port);
}

}  // namespace

Result<std::unique_ptr<HandleExchange>> DirectoryExchange(const std::string& dir, const std::string& tag) {
  if (tag.empty() || tag.size() > 128) return InvalidInput("rendezvous tag must be 1..128 characters");
  for (char c : tag) {
    if (!IsTagChar(c)) return InvalidInput("rendezvous tag '" + tag + "': only letters, digits, '-', '_' and '.'");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return NotFound("rendezvous directory " + dir + " does not exist");
  return std::unique_ptr<HandleExchange>(new Directory(dir, tag));
}

// The plugin's objects; closed in reverse order of creation.
struct Ring::Comms {
  ncclNet_v11_t* net = &ncclNetPlugin_v11;
  void* ctx = nullptr;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ~Comms() {
    if (send != nullptr) net->closeSend(send);
    if (recv != nullptr) net->closeRecv(recv);
    if (listen != nullptr) net->closeListen(listen);
    if (ctx != nullptr) net->finalize(ctx);
  }
};

Ring::Ring(RingOptions options) : options_(options) {}
Ring::~Ring() = default;

Result<std::unique_ptr<Ring>> Ring::Connect(const crypto::SecretBytes& job_key, const RingOptions& options,
                                            HandleExchange& exchange) {
  const int n = options.world_size, r = options.rank;
  if (n < 1 || n > 1024 || r < 0 || r >= n) return InvalidInput("need 1 <= world size <= 1024 and 0 <= rank < world size");
  std::unique_ptr<Ring> ring(new Ring(options));
  if (n == 1) return ring;
  if (enclave_net_set_job_key(job_key.ExposeSecret().data(), job_key.size()) != 0) {
    return InvalidInput("the job communication key must be 32 to 64 bytes");
  }
  auto comms = std::make_unique<Comms>();
  ncclNet_v11_t* net = comms->net;
  ncclNetCommConfig_v11_t config{};
  RETURN_IF_ERROR(FromNccl(net->init(&comms->ctx, options.comm_id, &config, PluginLog, nullptr), "plugin init"));
  RingHandle mine{}, next{};
  RETURN_IF_ERROR(FromNccl(net->listen(comms->ctx, 0, mine.data(), &comms->listen), "listen"));
  ring->listen_address_ = HandleAddress(mine);
  RETURN_IF_ERROR(exchange.Publish(r, mine));
  // Whatever happens next, our handle does not outlive this attempt.
  struct WithdrawUnlessConnected {
    HandleExchange& exchange;
    int rank;
    bool connected = false;
    ~WithdrawUnlessConnected() {
      if (!connected) exchange.Withdraw(rank);
    }
  } withdraw{exchange, r};
  const auto deadline = Clock::now() + options.timeout;
  const int to = (r + 1) % n, from = (r + n - 1) % n;
  ASSIGN_OR_RETURN(RingHandle published, exchange.Fetch(to, deadline));
  next = published;  // connect() writes its token into next; published stays as fetched
  // NCCL's loop: connect() and accept() retried until both comms exist; neither blocks.
  // After a failed connect (a stale handle left by a crashed run names a dead port, or
  // the listener refused us) rank `to` must publish a fresh handle: we poll for one with
  // backoff and keep accepting meanwhile. A neighbour that withdrew its handle has
  // failed. The deadline is checked on every pass.
  int spins = 0;
  bool waiting = false;  // for a handle other than `published`
  int failed_connects = 0;
  ncclResult_t last_rc = ncclSuccess;
  auto retry_delay = std::chrono::duration_cast<Clock::duration>(kFirstRetryDelay);
  Clock::time_point retry_at{}, next_log{};
  auto connect_failed = [&](const std::string& why) {
    return FromNccl(last_rc, "connecting to rank " + std::to_string(to) + " at " + HandleAddress(published))
        .Annotate("ring of " + std::to_string(n) + ": " + why + " after " + std::to_string(failed_connects) +
                  (failed_connects == 1 ? " attempt" : " attempts"));
  };
  while (comms->send == nullptr || comms->recv == nullptr) {
    const auto now = Clock::now();
    if (now > deadline) {
      if (comms->send == nullptr && waiting) {
        return connect_failed("rank " + std::to_string(to) + " published no fresh handle in time");
      }
      return Unavailable(std::string("ring of ") + std::to_string(n) + ": " +
                         (comms->send == nullptr ? "rank " + std::to_string(to) + " did not accept"
                                                 : "rank " + std::to_string(from) + " did not connect") +
                         " in time");
    }
    if (comms->send == nullptr && waiting && now >= retry_at) {
      Result<RingHandle> fresh = exchange.Fetch(to, now);  // looks once, does not wait
      if (!fresh.ok()) {
        if (fresh.status().code() == Code::kUnavailable) {
          return connect_failed("rank " + std::to_string(to) + " withdrew its handle");
        }
        return fresh.status();
      }
      if (!SameListener(*fresh, published)) {
        published = *fresh;
        next = published;
        waiting = false;
      } else {
        retry_at = now + retry_delay;
        retry_delay = std::min<Clock::duration>(retry_delay * 2, kMaxRetryDelay);
      }
    }
    if (comms->send == nullptr && !waiting) {
      const ncclResult_t rc = net->connect(comms->ctx, 0, next.data(), &comms->send, nullptr);
      if (rc != ncclSuccess) {
        comms->send = nullptr;
        last_rc = rc;
        ++failed_connects;
        waiting = true;
        retry_at = now + retry_delay;
        retry_delay = std::min<Clock::duration>(retry_delay * 2, kMaxRetryDelay);
        if (now >= next_log) {
          std::fprintf(stderr,
                       "enclave-train: ring: rank %d could not connect to rank %d at %s (attempt %d, see the line "
                       "above); waiting for it to publish a fresh handle\n",
                       r, to, HandleAddress(published).c_str(), failed_connects);
          next_log = now + kRetryLogInterval;
        }
      }
    }
    // accept() fails for local causes only: the plugin closes a connection that fails
    // its handshake (anyone who reads our handle can make one) and goes on waiting.
    if (comms->recv == nullptr) {
      RETURN_IF_ERROR(FromNccl(net->accept(comms->listen, &comms->recv, nullptr),
                               "accepting rank " + std::to_string(from)));
    }
    if (comms->send == nullptr || comms->recv == nullptr) Backoff(&spins);
  }
  // Rank r-1 read our handle before connecting to us: the file is no longer needed.
  exchange.Withdraw(r);
  withdraw.connected = true;
  ring->comms_ = std::move(comms);
  return ring;
}

Status Ring::SendRecv(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, const char* phase) {
  ncclNet_v11_t* net = comms_->net;
  void *smr = nullptr, *rmr = nullptr, *sreq = nullptr, *rreq = nullptr;
  struct Dereg {
    ncclNet_v11_t* net;
    void* comm;
    void** mr;
    ~Dereg() {
      if (*mr != nullptr) net->deregMr(comm, *mr);
    }
  } ds{net, comms_->send, &smr}, dr{net, comms_->recv, &rmr};
  RETURN_IF_ERROR(FromNccl(net->regMr(comms_->send, const_cast<void*>(send), send_bytes, NCCL_PTR_HOST, &smr), "regMr"));
  RETURN_IF_ERROR(FromNccl(net->regMr(comms_->recv, recv, recv_bytes, NCCL_PTR_HOST, &rmr), "regMr"));
  size_t size = recv_bytes;
  int tag = 0;
  RETURN_IF_ERROR(FromNccl(net->irecv(comms_->recv, 1, &recv, &size, &tag, &rmr, nullptr, &rreq), "irecv"));
  RETURN_IF_ERROR(FromNccl(net->isend(comms_->send, const_cast<void*>(send), send_bytes, 0, smr, nullptr, &sreq), "isend"));
  if (rreq == nullptr || sreq == nullptr) return Internal("the plugin had no free request slot");
  const auto deadline = Clock::now() + options_.timeout;
  bool sent = false, received = false;
  int spins = 0;
  while (!sent || !received) {
    int done = 0, got = 0;
    if (!sent) {
      RETURN_IF_ERROR(FromNccl(net->test(sreq, &done, &got), std::string(phase) + ": sending to the next rank"));
      sent = done != 0;
    }
    if (!received) {
      done = 0;
      RETURN_IF_ERROR(FromNccl(net->test(rreq, &done, &got), std::string(phase) + ": receiving from the previous rank"));
      if (done != 0) {
        if (static_cast<size_t>(got) != recv_bytes) {
          return InvalidInput(std::string(phase) + ": the previous rank sent " + std::to_string(got) +
                              " bytes, expected " + std::to_string(recv_bytes) + " (ranks disagree on the model)");
        }
        received = true;
      }
    }
    if (Clock::now() > deadline) {
      return Unavailable(std::string(phase) + ": no progress for " +
                         std::to_string(options_.timeout.count() / 1000) + " s (" +
                         (sent ? "the previous rank sent nothing" : "the next rank took nothing") + ")");
    }
    if (!sent || !received) Backoff(&spins);
  }
  bytes_sent_ += send_bytes;
  return OkStatus();
}

// A failed exchange leaves the ring unusable: an irecv may still be posted into the
// caller's buffer (or into staging_), and the ranks' message streams no longer line up.
// So the comms are closed before the error is returned (closing joins the plugin's
// worker threads: nothing lands in the caller's buffer afterwards), and every later call
// fails at once with the first error.
template <typename T>
Status Ring::AllReduce(T* data, size_t n) {
  if (!failed_.ok()) {
    return Status(failed_.code(), "the ring failed earlier and is closed (start a new one): " + failed_.message());
  }
  Status st = AllReduceSteps(data, n);
  if (!st.ok()) {
    failed_ = st;
    comms_.reset();
  }
  return st;
}

template <typename T>
Status Ring::AllReduceSteps(T* data, size_t n) {
  const size_t N = static_cast<size_t>(options_.world_size), r = static_cast<size_t>(options_.rank);
  if (N == 1) return OkStatus();
  auto begin = [&](size_t c) { return n * c / N; };
  auto len = [&](size_t c) { return begin(c + 1) - begin(c); };
  const size_t need = ((len(0) + 1) * sizeof(T) + 15) / 16 * 16;  // a multiple of 16: sodium_malloc then aligns it
  if (staging_.size() < need) {
    staging_ = crypto::SecretBytes();
    ASSIGN_OR_RETURN(staging_, crypto::SecretBytes::Create(need));
  }
  T* staging = reinterpret_cast<T*>(staging_.ExposeSecretMutable().data());
  // Reduce-scatter: after step s, chunk (r-s-1) holds the sum of ranks r-s-1 .. r.
  for (size_t s = 0; s + 1 < N; ++s) {
    const size_t sc = (r + N - s) % N, rc = (r + 2 * N - s - 1) % N;
    RETURN_IF_ERROR(SendRecv(data + begin(sc), len(sc) * sizeof(T), staging, len(rc) * sizeof(T),
                             "all-reduce (reduce-scatter)"));
    T* dst = data + begin(rc);
    for (size_t i = 0; i < len(rc); ++i) dst[i] = staging[i] + dst[i];
  }
  // All-gather: rank r owns the finished chunk r+1 and passes each finished chunk on.
  for (size_t s = 0; s + 1 < N; ++s) {
    const size_t sc = (r + 1 + N - s) % N, rc = (r + N - s) % N;
    RETURN_IF_ERROR(SendRecv(data + begin(sc), len(sc) * sizeof(T), data + begin(rc), len(rc) * sizeof(T),
                             "all-reduce (all-gather)"));
  }
  return OkStatus();
}

Status Ring::AllReduceSum(float* data, size_t n) { return AllReduce(data, n); }
Status Ring::AllReduceSum(double* data, size_t n) { return AllReduce(data, n); }

}  // namespace enclave::net
