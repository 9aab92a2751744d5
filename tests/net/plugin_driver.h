// Drives libnccl-net-enclave.so through its ABI the way NCCL's proxy thread does:
// dlopen + dlsym("ncclNetPlugin_v11"), init per communicator, listen / connect /
// accept retried until non-NULL, regMr, up to a window of outstanding isend/irecv,
// test() polled round-robin, close, finalize. Shared by the tests and enclave_net_peer.
#pragma once

#include <dlfcn.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "nccl_net_v11.h"

namespace enclave::net::test {

// Everything the plugin logged through the logger we gave init().
inline std::mutex g_log_mu;
inline std::string g_log;
inline void CaptureLog(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log += (level == NCCL_LOG_WARN ? "WARN " : "INFO ") + std::string(buf) + "\n";
}
inline void ClearLog() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log.clear();
}
inline std::string LogText() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return g_log;
}

struct Plugin {
  void* lib = nullptr;
  ncclNet_v11_t* net = nullptr;
  int (*set_key)(const uint8_t*, size_t) = nullptr;
  void (*clear_key)() = nullptr;
  std::string error;

  bool Load(const char* path) {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return Err(std::string("dlopen: ") + dlerror());
    net = static_cast<ncclNet_v11_t*>(dlsym(lib, "ncclNetPlugin_v11"));
    set_key = reinterpret_cast<int (*)(const uint8_t*, size_t)>(dlsym(lib, "enclave_net_set_job_key"));
    clear_key = reinterpret_cast<void (*)()>(dlsym(lib, "enclave_net_clear_job_key"));
    if (net == nullptr || set_key == nullptr || clear_key == nullptr) return Err("missing exported symbol");
    return true;
  }
  bool Err(std::string e) {
    error = std::move(e);
    return false;
  }
};

using Clock = std::chrono::steady_clock;

// NCCL's loop: call connect() and accept() until both comms exist (either may be NULL
// on a call; neither blocks). Returns the first error.
inline ncclResult_t ConnectAccept(ncclNet_v11_t* net, void* ctx, void* handle, void* listen_comm, void** send_comm,
                                  void** recv_comm, double timeout_s = 60) {
  void *s_local = nullptr, *r_local = nullptr;
  if (send_comm == nullptr) send_comm = &s_local;
  if (recv_comm == nullptr) recv_comm = &r_local;
  *send_comm = nullptr;
  *recv_comm = nullptr;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while ((handle != nullptr && *send_comm == nullptr) || (listen_comm != nullptr && *recv_comm == nullptr)) {
    if (handle != nullptr && *send_comm == nullptr) {
      ncclResult_t r = net->connect(ctx, 0, handle, send_comm, nullptr);
      if (r != ncclSuccess) return r;
    }
    if (listen_comm != nullptr && *recv_comm == nullptr) {
      ncclResult_t r = net->accept(listen_comm, recv_comm, nullptr);
      if (r != ncclSuccess) return r;
    }
    if (Clock::now() > deadline) return ncclInProgress;
  }
  return ncclSuccess;
}

// The bytes of message i of a schedule: a function of (seed, i, offset), so the
// receiver checks every byte without the sender's buffer.
inline void Fill(uint8_t* p, size_t n, uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull;
  for (size_t o = 0; o < n; o += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t k = n - o < 8 ? n - o : 8;
    std::memcpy(p + o, &x, k);
  }
}

inline std::vector<size_t> Schedule(uint64_t seed, int count, size_t max_size) {
  // The edges first, then a deterministic spread.
  std::vector<size_t> s = {0, 1, 7, 4095, 4096, 65535, 65536, 65537, 262144 + 3, 1u << 20, (4u << 20) + 1, 0};
  if (max_size >= (64u << 20)) s.push_back(64u << 20);
  uint64_t x = seed | 1;
  while (static_cast<int>(s.size()) < count) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s.push_back(static_cast<size_t>(x % (x % 4 == 0 ? max_size / 4 : 300000)));
  }
  s.resize(static_cast<size_t>(count));
  for (auto& v : s) v = v > max_size ? max_size : v;
  return s;
}

struct ExchangeResult {
  ncclResult_t rc = ncclSuccess;
  std::string what;       // which call failed, or which message was wrong
  int sent = 0, received = 0;
  bool wrong_data = false;  // a request reported done with bytes that differ
};

// Sends `send` (if send_comm) and receives `recv` (if recv_comm) concurrently from one
// thread, at most `window` requests outstanding per comm, as NCCL's proxy does.
inline ExchangeResult Exchange(ncclNet_v11_t* net, void* send_comm, void* recv_comm, const std::vector<size_t>& send,
                               const std::vector<size_t>& recv, uint64_t send_seed, uint64_t recv_seed,
                               int window = 16,
                               double timeout_s = 120) {
  ExchangeResult res;
  struct Pending {
    void* req;
    int index;
    std::vector<uint8_t> buf;
  };
  std::deque<Pending> sends, recvs;
  void* smr = nullptr;
  void* rmr = nullptr;
  int next_send = 0, next_recv = 0;
  const int nsend = send_comm ? static_cast<int>(send.size()) : 0;
  const int nrecv = recv_comm ? static_cast<int>(recv.size()) : 0;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto fail = [&](ncclResult_t rc, std::string what) {
    res.rc = rc;
    res.what = std::move(what);
    return res;
  };
  std::vector<uint8_t> expect;
  while (res.sent < nsend || res.received < nrecv) {
    if (Clock::now() > deadline) return fail(ncclInProgress, "timed out");
    while (next_send < nsend && static_cast<int>(sends.size()) < window) {
      Pending p{nullptr, next_send, std::vector<uint8_t>(send[next_send])};
      Fill(p.buf.data(), p.buf.size(), send_seed, static_cast<uint64_t>(next_send));
      if (net->regMr(send_comm, p.buf.data(), p.buf.size(), NCCL_PTR_HOST, &smr) != ncclSuccess)
        return fail(ncclInternalError, "regMr(send)");
      ncclResult_t rc = net->isend(send_comm, p.buf.data(), p.buf.size(), 0, smr, nullptr, &p.req);
      net->deregMr(send_comm, smr);
      if (rc != ncclSuccess) return fail(rc, "isend " + std::to_string(next_send));
      if (p.req == nullptr) break;  // all slots busy: NCCL retries later
      sends.push_back(std::move(p));
      ++next_send;
    }
    while (next_recv < nrecv && static_cast<int>(recvs.size()) < window) {
      // Every third receive is posted larger than the message: test() reports the size.
      size_t cap = recv[next_recv] + (next_recv % 3 == 0 ? 1000 : 0);
      Pending p{nullptr, next_recv, std::vector<uint8_t>(cap, 0xEE)};
      void* data = p.buf.data();
      size_t size = cap;
      int tag = 0;
      if (net->regMr(recv_comm, data, size, NCCL_PTR_HOST, &rmr) != ncclSuccess)
        return fail(ncclInternalError, "regMr(recv)");
      ncclResult_t rc = net->irecv(recv_comm, 1, &data, &size, &tag, &rmr, nullptr, &p.req);
      net->deregMr(recv_comm, rmr);
      if (rc != ncclSuccess) return fail(rc, "irecv " + std::to_string(next_recv));
      if (p.req == nullptr) break;
      recvs.push_back(std::move(p));
      ++next_recv;
    }
    // Test every outstanding request (completion may come out of order across comms).
    for (auto it = sends.begin(); it != sends.end();) {
      int done = 0, size = -1;
      ncclResult_t rc = net->test(it->req, &done, &size);
      if (rc != ncclSuccess) return fail(rc, "test(send " + std::to_string(it->index) + ")");
      if (!done) break;  // in posting order
      if (size != static_cast<int>(send[it->index])) return fail(ncclInternalError, "send size reported wrong");
      it = sends.erase(it);
      ++res.sent;
    }
    for (auto it = recvs.begin(); it != recvs.end();) {
      int done = 0, size = -1;
      ncclResult_t rc = net->test(it->req, &done, &size);
      if (rc != ncclSuccess) return fail(rc, "test(recv " + std::to_string(it->index) + ")");
      if (!done) break;
      const size_t n = recv[it->index];
      expect.resize(n);
      Fill(expect.data(), n, recv_seed, static_cast<uint64_t>(it->index));
      if (size != static_cast<int>(n) || (n > 0 && std::memcmp(expect.data(), it->buf.data(), n) != 0)) {
        res.wrong_data = true;
        return fail(ncclInternalError, "message " + std::to_string(it->index) + " arrived with wrong size or bytes");
      }
      for (size_t o = n; o < it->buf.size(); ++o) {
        if (it->buf[o] != 0xEE) {
          res.wrong_data = true;
          return fail(ncclInternalError, "bytes written past the message end");
        }
      }
      it = recvs.erase(it);
      ++res.received;
    }
  }
  return res;
}

inline std::string Hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}
inline bool Unhex(const std::string& s, uint8_t* out, size_t n) {
  if (s.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    auto v = [](char c) { return c >= 'a' ? c - 'a' + 10 : c - '0'; };
    out[i] = static_cast<uint8_t>(v(s[2 * i]) << 4 | v(s[2 * i + 1]));
  }
  return true;
}

}  // namespace enclave::net::test
