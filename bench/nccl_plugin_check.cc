// Issue #7 part 4: NCCL through libnccl-net-enclave.so on one GPU, beside NCCL's built-in
// plaintext socket transport. Two processes share GPU 0 but carry different NCCL_HOSTID
// values, so NCCL counts two hosts: P2P and SHM are off (and disabled explicitly) and every
// byte between the ranks goes through the network plugin.
//
//   nccl_plugin_check --launch [--plugin-dir DIR] [--out FILE.json] [--log-dir DIR]
//                     [--child-timeout S] [--seconds-per-size S]
//
// The launcher runs three configurations one after the other, each as two children (this
// binary again, `--rank R --world 2 --id-file PATH --mode enclave|enclave-gpu|socket`):
//   enclave  NCCL_NET_PLUGIN=enclave NCCL_NET=enclave, LD_LIBRARY_PATH starts with DIR; the
//            child dlopens libnccl-net-enclave.so (RTLD_GLOBAL, the same library NCCL then
//            opens) and sets a fixed TEST key (kTestKey below) before ncclCommInitRank.
//            NCCL stages GPU data through host buffers; the plugin encrypts on the CPU.
//   enclave-gpu  the same plus ENCLAVE_NET_GPU=1 (the plugin offers NCCL_PTR_CUDA and seals
//            and opens device buffers on the GPU), NCCL_NET_GDR_LEVEL=SYS and
//            NCCL_NET_GDR_READ=1 (so NCCL hands the plugin device buffers although our
//            "NIC" has no PCI path near the GPU).
//   socket   NCCL_NET_PLUGIN=none NCCL_NET=Socket: NCCL's own plaintext socket transport.
// Both: NCCL_HOSTID=enclave-check-host-R, NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1,
// NCCL_NVLS_ENABLE=0, NCCL_MNNVL_ENABLE=0, NCCL_SOCKET_IFNAME=lo, ENCLAVE_NET_IFNAME=lo,
// NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV into <log-dir>/<mode>.rank<R>.nccl.log. Every
// other inherited NCCL_* variable is dropped (listed on stderr); ENCLAVE_NET_NSOCKS passes.
//
// Each child: (a) all-reduce sum of 1, 256 Ki and 16 Mi floats (4 B, 1 MiB, 64 MiB), rank r
// contributing small integers, every element compared exactly; (b) all-reduce bandwidth for
// 64 KiB .. 256 MiB (powers of 4): 2 warm-ups, then as many timed iterations as fit in
// --seconds-per-size (1..100), timed with CUDA events, the slower rank's time;
// algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' convention), and the rank's
// process CPU time (user + system, getrusage) over the timed loop per GB all-reduced.
// Rank 0 prints JSON lines on its stdout (<log-dir>/<mode>.rank0.stdout).
//
// (c) The transport in use is read from each rank's NCCL log (NCCL 2.28.9; the wording
// is the same in 2.27 .. 2.30 except the path line, which 2.27 words "loaded external plugin"):
//   enclave needs  "NET/Plugin: Loaded net plugin enclave (vN)"  src/plugin/net/net_v11.cc
//                  "Using network enclave"                       src/init.cc
//                  "NET/Enclave : "   our plugin's own lines through NCCL's logger (net/src/plugin.cc)
//                  "Channel ... [send|receive] via NET/enclave/<dev>"  src/transport/net.cc
//                  (enclave-gpu: every such line ends in "/GDRDMA", enclave: none does)
//                  and "Successfully loaded external network plugin <path>" (src/plugin/net.cc),
//                  when printed, must name libnccl-net-enclave.so from --plugin-dir.
//   socket  needs  "Using network Socket", "NET/Socket : Using [0]lo:...", channels via
//                  NET/Socket/, and no "NET/Enclave" or external-plugin line.
//   Either mode fails on any channel line "via" another transport (P2P, SHM, NET/IB, ...).
//
// GPU time-slicing between the two processes makes the figures a lower bound for either
// transport (docs/gpu.md); the ratio compares them under the same handicap.
//
// Exit status (append only): 0 all three configurations passed; 1 a check failed (wrong sum,
// wrong transport, a child failed or timed out, plugin missing); 2 no GPU visible (nothing
// checked); 3 bad usage.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <nccl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitNoGpu = 2;
constexpr int kExitUsage = 3;

// A fixed, public TEST key: it is in this source file and protects nothing. It exists
// only so that the plugin (which refuses to initialise without a job key) can run in this
// check; real jobs get their key from the broker after attestation (docs/formats/net-transport.md).
constexpr char kTestKey[] = "nccl_plugin_check: TEST KEY ONLY";
static_assert(sizeof(kTestKey) - 1 == 32, "the plugin's job key is 32..64 bytes");

constexpr const char* kPluginFile = "libnccl-net-enclave.so";
constexpr size_t kCorrectnessCounts[] = {1, size_t{1} << 18, size_t{1} << 24};  // floats: 4 B, 1 MiB, 64 MiB
constexpr size_t kMinBwBytes = size_t{64} << 10;
constexpr size_t kMaxBwBytes = size_t{256} << 20;
constexpr int kMaxTimedIters = 100;

struct Options {
  bool launch = false;
  int rank = -1;
  int world = 0;
  std::string mode;        // enclave | socket (child)
  std::string id_file;     // child
  std::string plugin_dir;  // launcher: where libnccl-net-enclave.so is; child: the dir it must come from
  std::string out;         // launcher: JSON file
  std::string log_dir;     // launcher
  int child_timeout_s = 120;
  double seconds_per_size = 1.0;
};

constexpr const char* kUsage =
    "usage: nccl_plugin_check --launch [--plugin-dir DIR] [--out FILE.json] [--log-dir DIR]\n"
    "                         [--child-timeout S (120)] [--seconds-per-size S (1)]\n"
    "       (internal) nccl_plugin_check --rank R --world 2 --id-file PATH --mode enclave|socket\n"
    "                         [--plugin-dir DIR] [--child-timeout S] [--seconds-per-size S]\n"
    "Two processes on GPU 0 as two NCCL hosts: all-reduce correctness and bus bandwidth through\n"
    "the enclave net plugin and through NCCL's socket transport. Exit: 0 passed, 1 failed,\n"
    "2 no GPU visible, 3 usage.\n";

std::optional<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    auto as_int = [](const char* v, int lo, int hi, int* out) {
      if (v == nullptr) return false;
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || n < lo || n > hi) return false;
      *out = static_cast<int>(n);
      return true;
    };
    const char* v = nullptr;
    if (a == "--launch") {
      o.launch = true;
    } else if (a == "--rank") {
      if (!as_int(value(), 0, 1023, &o.rank)) return std::nullopt;
    } else if (a == "--world") {
      if (!as_int(value(), 2, 1024, &o.world)) return std::nullopt;
    } else if (a == "--child-timeout") {
      if (!as_int(value(), 5, 3600, &o.child_timeout_s)) return std::nullopt;
    } else if (a == "--seconds-per-size") {
      if ((v = value()) == nullptr) return std::nullopt;
      char* end = nullptr;
      o.seconds_per_size = std::strtod(v, &end);
      if (*end != '\0' || !(o.seconds_per_size > 0.0 && o.seconds_per_size <= 60.0)) return std::nullopt;
    } else if (a == "--mode" || a == "--id-file" || a == "--plugin-dir" || a == "--out" || a == "--log-dir") {
      if ((v = value()) == nullptr || *v == '\0') return std::nullopt;
      (a == "--mode" ? o.mode : a == "--id-file" ? o.id_file : a == "--plugin-dir" ? o.plugin_dir
                                                   : a == "--out"                   ? o.out
                                                                                    : o.log_dir) = v;
    } else {
      return std::nullopt;
    }
  }
  if (o.launch) return o.rank < 0 && o.world == 0 && o.mode.empty() && o.id_file.empty() ? std::optional(o) : std::nullopt;
  if (o.rank < 0 || o.world == 0 || o.rank >= o.world || o.id_file.empty()) return std::nullopt;
  if (o.mode != "enclave" && o.mode != "enclave-gpu" && o.mode != "socket") return std::nullopt;
  return o;
}

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string Realpath(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::canonical(p, ec);
  return ec ? p : r.string();
}

std::string FormatBytes(size_t b) {
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (size_t{1} << 10) && b % (size_t{1} << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "no GPU visible" is what scripts/gpu-check looks for; the CUDA error says why.
bool GpuVisible(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "cudaGetDeviceCount: 0 devices";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Child: one rank of one configuration.

std::string g_tag = "nccl_plugin_check";

[[noreturn]] void ChildFail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", g_tag.c_str(), what.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  _exit(kExitFailed);
}

// Foreign codes are turned into text right here, with the call and the line.
void CudaCheck(cudaError_t e, const char* call, int line) {
  if (e == cudaSuccess) return;
  ChildFail(std::string(call) + " failed (nccl_plugin_check.cc:" + std::to_string(line) + "): " + cudaGetErrorName(e) +
            ": " + cudaGetErrorString(e));
}
void NcclCheck(ncclResult_t r, const char* call, int line) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);
  ChildFail(std::string(call) + " failed (nccl_plugin_check.cc:" + std::to_string(line) + "): " + ncclGetErrorString(r) +
            (last != nullptr && *last != '\0' ? std::string(" (last NCCL error: ") + last + ")" : std::string()) +
            "; see this rank's NCCL log");
}
#define CUDA_CHECK(call) CudaCheck((call), #call, __LINE__)
#define NCCL_CHECK(call) NcclCheck((call), #call, __LINE__)

// Waits for the stream without hanging on a dead peer: NCCL reports network failures as
// the communicator's asynchronous error, after which the comm is aborted.
void WaitStream(cudaStream_t stream, ncclComm_t comm, const std::string& what) {
  for (;;) {
    cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      ChildFail(what + ": cudaStreamQuery: " + cudaGetErrorName(q) + ": " + cudaGetErrorString(q));
    }
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = ncclGetLastError(comm);
      ncclCommAbort(comm);
      ChildFail(what + ": NCCL asynchronous error: " + ncclGetErrorString(async) +
                (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// The id file: rank 0 writes it whole under a temporary name and renames it; rank 1
// waits for it.
void WriteIdFile(const std::string& path, const ncclUniqueId& id) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) ChildFail("cannot create " + tmp + ": " + std::strerror(errno));
  const char* p = id.internal;
  size_t left = sizeof(id.internal);
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ChildFail("cannot write " + tmp + ": " + std::strerror(errno));
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) ChildFail("cannot write " + tmp + ": " + std::strerror(errno));
  if (rename(tmp.c_str(), path.c_str()) != 0) ChildFail("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
}

ncclUniqueId ReadIdFile(const std::string& path, Clock::time_point deadline) {
  ncclUniqueId id{};
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f) {
      f.read(id.internal, sizeof(id.internal));
      if (f.gcount() == static_cast<std::streamsize>(sizeof(id.internal))) return id;
      ChildFail(path + ": " + std::to_string(f.gcount()) + " bytes, expected " + std::to_string(sizeof(id.internal)));
    }
    if (Clock::now() > deadline) ChildFail("rank 0 wrote no id file " + path + " in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Small integers, different per rank and per element: every sum is exact in float.
float Contribution(size_t i, int rank) {
  return static_cast<float>((i + 31 * static_cast<size_t>(rank)) % 997 + 1 + 1000 * static_cast<size_t>(rank));
}

struct Child {
  Options o;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* dsend = nullptr;
  float* drecv = nullptr;
  double* dscalar = nullptr;

  void Emit(const Json& j) const {
    if (o.rank != 0) return;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }

  // The largest value of x over the ranks (an all-reduce of one double).
  double AgreeMax(double x) {
    CUDA_CHECK(cudaMemcpy(dscalar, &x, sizeof x, cudaMemcpyHostToDevice));
    NCCL_CHECK(ncclAllReduce(dscalar, dscalar, 1, ncclFloat64, ncclMax, comm, stream));
    WaitStream(stream, comm, "all-reduce of one double (agreeing on a value)");
    CUDA_CHECK(cudaMemcpy(&x, dscalar, sizeof x, cudaMemcpyDeviceToHost));
    return x;
  }

  // (a) Returns true when this rank's results were all exact.
  bool Correctness() {
    bool all_ok = true;
    for (size_t count : kCorrectnessCounts) {
      std::vector<float> host(count);
      for (size_t i = 0; i < count; ++i) host[i] = Contribution(i, o.rank);
      CUDA_CHECK(cudaMemcpy(dsend, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemset(drecv, 0xff, count * sizeof(float)));  // NaN: a stale buffer cannot pass
      CUDA_CHECK(cudaDeviceSynchronize());
      NCCL_CHECK(ncclAllReduce(dsend, drecv, count, ncclFloat32, ncclSum, comm, stream));
      WaitStream(stream, comm, "all-reduce of " + std::to_string(count) + " floats");
      CUDA_CHECK(cudaMemcpy(host.data(), drecv, count * sizeof(float), cudaMemcpyDeviceToHost));
      size_t bad = 0, first_bad = 0;
      float first_got = 0, first_want = 0;
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int r = 0; r < o.world; ++r) want += Contribution(i, r);
        const float w = static_cast<float>(want);
        if (!(host[i] == w)) {
          if (bad == 0) { first_bad = i; first_got = host[i]; first_want = w; }
          ++bad;
        }
      }
      Json j{{"type", "correctness"}, {"mode", o.mode}, {"op", "allreduce_sum_float32"}, {"elements", count},
             {"bytes", count * sizeof(float)}, {"mismatches", bad}, {"ok", bad == 0}};
      if (bad != 0) {
        j["first_bad_index"] = first_bad;
        j["got"] = first_got;
        j["expected"] = first_want;
        std::fprintf(stderr, "%s: WRONG all-reduce result: %zu of %zu floats (%s) differ, first at index %zu: got %.9g, expected %.9g\n",
                     g_tag.c_str(), bad, count, FormatBytes(count * sizeof(float)).c_str(), first_bad,
                     static_cast<double>(first_got), static_cast<double>(first_want));
        all_ok = false;
      }
      Emit(j);
    }
    return all_ok;
  }

  static double ProcessCpuSeconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
    return secs(u.ru_utime) + secs(u.ru_stime);
  }

  // (b)
  void Bandwidth() {
    CUDA_CHECK(cudaMemset(dsend, 0, kMaxBwBytes));
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (size_t bytes = kMinBwBytes; bytes <= kMaxBwBytes; bytes *= 4) {
      const size_t count = bytes / sizeof(float);
      const std::string what = "all-reduce of " + FormatBytes(bytes);
      // Two warm-ups; the second is timed to size the timed loop.
      NCCL_CHECK(ncclAllReduce(dsend, drecv, count, ncclFloat32, ncclSum, comm, stream));
      CUDA_CHECK(cudaEventRecord(start, stream));
      NCCL_CHECK(ncclAllReduce(dsend, drecv, count, ncclFloat32, ncclSum, comm, stream));
      CUDA_CHECK(cudaEventRecord(stop, stream));
      WaitStream(stream, comm, what + " (warm-up)");
      float warm_ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&warm_ms, start, stop));
      const double warm_s = AgreeMax(static_cast<double>(warm_ms) / 1e3);  // both ranks loop the same count
      const int iters = static_cast<int>(std::clamp(std::floor(o.seconds_per_size / std::max(warm_s, 1e-9)), 1.0,
                                                    static_cast<double>(kMaxTimedIters)));
      const double cpu0 = ProcessCpuSeconds();
      CUDA_CHECK(cudaEventRecord(start, stream));
      for (int i = 0; i < iters; ++i) {
        NCCL_CHECK(ncclAllReduce(dsend, drecv, count, ncclFloat32, ncclSum, comm, stream));
      }
      CUDA_CHECK(cudaEventRecord(stop, stream));
      WaitStream(stream, comm, what);
      const double cpu_s = ProcessCpuSeconds() - cpu0;
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      const double t = AgreeMax(static_cast<double>(ms) / 1e3 / iters);  // the slower rank's time
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      const double busbw = algbw * 2.0 * (o.world - 1) / o.world;
      Emit(Json{{"type", "bandwidth"}, {"mode", o.mode}, {"op", "allreduce_sum_float32"}, {"bytes", bytes},
                {"iters", iters}, {"time_us", t * 1e6}, {"algbw_GBps", algbw}, {"busbw_GBps", busbw},
                {"cpu_s_per_GB", cpu_s / (static_cast<double>(bytes) * iters / 1e9)}});
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

int ChildMain(const Options& o) {
  g_tag = "nccl_plugin_check[" + o.mode + " rank " + std::to_string(o.rank) + "]";
  alarm(static_cast<unsigned>(o.child_timeout_s) + 10);  // backstop: the launcher kills us first
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(o.child_timeout_s);
  std::string why;
  if (!GpuVisible(&why)) {
    std::fprintf(stderr, "%s: no GPU visible (%s): nothing checked\n", g_tag.c_str(), why.c_str());
    return kExitNoGpu;
  }

  void* plugin = nullptr;
  std::string plugin_path;
  if (o.mode != "socket") {
    // The same library NCCL dlopens for NCCL_NET_PLUGIN=enclave (by this name, through
    // LD_LIBRARY_PATH): NCCL's dlopen then returns this handle, so the key set here is
    // the one its init() sees.
    plugin = dlopen(kPluginFile, RTLD_NOW | RTLD_GLOBAL);
    if (plugin == nullptr) {
      const char* ld = std::getenv("LD_LIBRARY_PATH");
      ChildFail(std::string("dlopen(") + kPluginFile + "): " + dlerror() + " (LD_LIBRARY_PATH=" + (ld ? ld : "") + ")");
    }
    link_map* lm = nullptr;
    if (dlinfo(plugin, RTLD_DI_LINKMAP, &lm) != 0 || lm == nullptr || lm->l_name == nullptr) {
      const char* e = dlerror();
      ChildFail(std::string("dlinfo(") + kPluginFile + "): " + (e != nullptr ? e : "no link map"));
    }
    plugin_path = Realpath(lm->l_name);
    if (!o.plugin_dir.empty() && fs::path(plugin_path).parent_path() != fs::path(Realpath(o.plugin_dir))) {
      ChildFail(std::string(kPluginFile) + " was loaded from " + plugin_path + ", not from --plugin-dir " + o.plugin_dir);
    }
    using SetKey = int (*)(const uint8_t*, size_t);
    auto set_key = reinterpret_cast<SetKey>(dlsym(plugin, "enclave_net_set_job_key"));
    if (set_key == nullptr) ChildFail(plugin_path + " has no enclave_net_set_job_key");
    if (set_key(reinterpret_cast<const uint8_t*>(kTestKey), sizeof(kTestKey) - 1) != 0) {
      ChildFail("enclave_net_set_job_key(TEST key, 32) returned an error");
    }
    std::fprintf(stderr, "%s: fixed TEST job key set in %s\n", g_tag.c_str(), plugin_path.c_str());
  }

  Child c;
  c.o = o;
  CUDA_CHECK(cudaSetDevice(0));
  ncclUniqueId id{};
  if (o.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    WriteIdFile(o.id_file, id);
  } else {
    id = ReadIdFile(o.id_file, deadline);
  }
  NCCL_CHECK(ncclCommInitRank(&c.comm, o.world, id, o.rank));
  CUDA_CHECK(cudaStreamCreate(&c.stream));
  CUDA_CHECK(cudaMalloc(&c.dsend, kMaxBwBytes));
  CUDA_CHECK(cudaMalloc(&c.drecv, kMaxBwBytes));
  CUDA_CHECK(cudaMalloc(&c.dscalar, sizeof(double)));

  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  c.Emit(Json{{"type", "info"}, {"mode", o.mode}, {"world", o.world}, {"nccl_version", nccl_version},
              {"gpu", prop.name}, {"plugin", plugin_path}});

  const bool mine_ok = c.Correctness();
  const bool all_ok = c.AgreeMax(mine_ok ? 0.0 : 1.0) == 0.0;
  if (all_ok) c.Bandwidth();

  cudaFree(c.dsend);
  cudaFree(c.drecv);
  cudaFree(c.dscalar);
  NCCL_CHECK(ncclCommDestroy(c.comm));
  cudaStreamDestroy(c.stream);
  if (plugin != nullptr) {
    if (auto clear = reinterpret_cast<void (*)()>(dlsym(plugin, "enclave_net_clear_job_key"))) clear();
  }
  if (!mine_ok) ChildFail("all-reduce results were wrong (details above)");
  if (!all_ok) ChildFail("the peer rank's all-reduce results were wrong (see its .stderr)");
  return kExitOk;
}

// ---------------------------------------------------------------------------------------
// Launcher.

std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream f(path);
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

std::string LastNonEmptyLine(const std::string& path) {
  auto lines = ReadLines(path);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->find_first_not_of(" \t\r") != std::string::npos) return *it;
  }
  return "";
}

struct RankRun {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  bool timed_out = false;
  bool stopped_after_peer = false;
  std::string out, err, log;
};

pid_t Spawn(const std::string& exe, const std::vector<std::string>& args, const std::vector<std::string>& env,
            const std::string& out_path, const std::string& err_path, std::string* error) {
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || err < 0 || devnull < 0) {
    *error = "cannot open " + out_path + " / " + err_path + ": " + std::strerror(errno);
    if (out >= 0) close(out);
    if (err >= 0) close(err);
    if (devnull >= 0) close(devnull);
    return -1;
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid > 0) setpgid(pid, pid);  // also here: no window where kill(-pid) misses it
  if (pid == 0) {
    // Own process group (killed as a whole), and dies with the launcher.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(devnull, 0);
    dup2(out, 1);
    dup2(err, 2);
    execve(exe.c_str(), argv.data(), envp.data());
    const char msg[] = "nccl_plugin_check: execve of the child failed\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
  }
  const int saved = errno;
  close(out);
  close(err);
  close(devnull);
  if (pid < 0) *error = std::string("fork: ") + std::strerror(saved);
  return pid;
}

std::string DescribeExit(const RankRun& r, int timeout_s) {
  if (r.timed_out) return "timed out after " + std::to_string(timeout_s) + " s (killed)";
  if (WIFSIGNALED(r.status)) return std::string("killed by signal ") + strsignal(WTERMSIG(r.status));
  return "exit status " + std::to_string(WEXITSTATUS(r.status));
}

bool RankOk(const RankRun& r) {
  return !r.timed_out && !r.stopped_after_peer && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
}

struct ModeResult {
  std::string mode;
  std::vector<std::string> failures;
  std::vector<RankRun> ranks;
  Json info = Json::object();
  Json correctness = Json::array();
  std::map<size_t, Json> bandwidth;
  Json evidence = Json::object();
  Json env = Json::object();
};

// (c) Which transport carried the ranks' traffic, from one rank's NCCL INFO log.
void CheckTransport(const std::string& mode, const RankRun& r, const std::string& plugin_dir, ModeResult* res) {
  const std::string where = "[" + mode + " rank " + std::to_string(r.rank) + "] ";
  auto fail = [&](const std::string& what) { res->failures.push_back(where + what + " (" + r.log + ")"); };
  Json ev = Json::object();
  if (!fs::exists(r.log)) {
    if (RankOk(r)) fail("no NCCL log: NCCL_DEBUG_FILE was not written");
    ev["log"] = "missing";
    res->evidence["rank" + std::to_string(r.rank)] = ev;
    return;
  }
  // Every connection line of every transport: net.cc "Channel 00/0 : 0[0] -> 1[0] [send] via NET/x/0",
  // p2p.cc "Channel 00/0 : 0[0] -> 1[1] via P2P/...", shm.cc "Channel 00 : ... via SHM/...", coll_net.cc.
  static const std::regex channel_re(R"((?:Channel|CollNet) \d+(?:/\d+)? : .*? via (\S+))");
  static const std::regex loaded_re(R"(NET/Plugin: Loaded net plugin (\S+) \(v(\d+)\))");
  static const std::regex path_re(R"(Successfully loaded external (?:network )?plugin (\S+))");
  const bool enclave = mode != "socket", gpu = mode == "enclave-gpu";
  const std::string want_net = enclave ? "enclave" : "Socket";
  const std::string want_via = "NET/" + want_net + "/";
  int channels = 0, wrong_channels = 0, gdr_channels = 0;
  std::string first_channel, first_wrong, loaded_line, path_line, using_line, plugin_line, socket_if_line, gpu_line;
  std::vector<std::string> warns;
  for (const auto& line : ReadLines(r.log)) {
    std::smatch m;
    if (std::regex_search(line, m, channel_re)) {
      if (m[1].str().rfind(want_via, 0) == 0) {
        if (channels++ == 0) first_channel = line;
        if (m[1].str().find("/GDRDMA") != std::string::npos) ++gdr_channels;
      } else if (wrong_channels++ == 0) {
        first_wrong = line;
      }
    } else if (std::regex_search(line, m, loaded_re)) {
      if (loaded_line.empty()) loaded_line = line;
    } else if (std::regex_search(line, m, path_re)) {
      if (path_line.empty()) path_line = line;
    } else if (line.find("Using network ") != std::string::npos) {
      if (using_line.empty()) using_line = line;
    }
    if (line.find("NET/Enclave : ") != std::string::npos && plugin_line.empty()) plugin_line = line;
    if (line.find("NET/Enclave : GPU buffers are sealed and opened on the GPU") != std::string::npos) gpu_line = line;
    if (line.find("NET/Socket : Using") != std::string::npos && socket_if_line.empty()) socket_if_line = line;
    if (line.find(" NCCL WARN ") != std::string::npos && warns.size() < 3) warns.push_back(line);
  }
  const bool using_right = using_line.find("Using network " + want_net) != std::string::npos &&
                           using_line.size() >= want_net.size() &&
                           using_line.compare(using_line.size() - want_net.size(), want_net.size(), want_net) == 0;
  if (!RankOk(r)) {
    // The rank's own failure is the first line; NCCL's warnings say more.
    for (const auto& w : warns) res->failures.push_back(where + "NCCL: " + w.substr(w.find("NCCL WARN")));
  }
  if (using_line.empty()) {
    if (RankOk(r)) fail("NCCL never printed \"Using network ...\"");
  } else if (!using_right) {
    fail("NCCL used the wrong network: \"" + using_line.substr(using_line.find("Using network")) + "\", expected \"Using network " + want_net + "\"");
  }
  if (channels == 0 && RankOk(r)) fail("no NCCL channel line \"... via " + want_via + "<dev>\": traffic not seen on " + want_via);
  if (wrong_channels > 0) {
    fail(std::to_string(wrong_channels) + " channel(s) via another transport than " + want_via + ", e.g. \"" +
         first_wrong.substr(first_wrong.find("Channel")) + "\"");
  }
  if (gpu && gdr_channels != channels) {
    fail(std::to_string(channels - gdr_channels) + " of " + std::to_string(channels) +
         " channel(s) via NET/enclave without /GDRDMA: NCCL staged GPU data through the host");
  }
  if (!gpu && gdr_channels > 0) fail(std::to_string(gdr_channels) + " channel(s) via GDRDMA without ENCLAVE_NET_GPU=1");
  if (gpu && gpu_line.empty() && RankOk(r)) fail("no \"GPU buffers are sealed and opened on the GPU\" line from the plugin");
  if (enclave) {
    if (loaded_line.find("Loaded net plugin enclave ") == std::string::npos) {
      if (RankOk(r) || !loaded_line.empty()) fail("no \"NET/Plugin: Loaded net plugin enclave (vN)\": NCCL did not load the enclave plugin");
    }
    if (!path_line.empty()) {
      std::smatch m;
      std::regex_search(path_line, m, path_re);
      const std::string p = m[1].str();
      if (p.find('/') != std::string::npos && fs::path(Realpath(p)) != fs::path(Realpath(plugin_dir)) / kPluginFile) {
        fail("NCCL loaded the plugin from " + p + ", expected " + (fs::path(Realpath(plugin_dir)) / kPluginFile).string());
      }
    }
    if (plugin_line.empty() && RankOk(r)) fail("no \"NET/Enclave : \" line: the plugin's own log is absent");
  } else {
    if (!plugin_line.empty()) fail("the enclave plugin logged in socket mode: \"" + plugin_line.substr(plugin_line.find("NET/Enclave")) + "\"");
    if (!path_line.empty() || !loaded_line.empty()) fail("an external net plugin was loaded in socket mode");
    if (socket_if_line.empty() && RankOk(r)) fail("no \"NET/Socket : Using <if>\" line");
  }
  auto tail = [](const std::string& l, const char* from) {
    size_t at = l.find(from);
    return at == std::string::npos ? l : l.substr(at);
  };
  ev["using_network"] = tail(using_line, "Using network");
  ev["channels_via_gdrdma"] = gdr_channels;
  if (enclave) {
    ev["loaded"] = tail(loaded_line, "NET/Plugin");
    ev["loaded_from"] = tail(path_line, "Successfully");
    ev["plugin_log"] = tail(plugin_line, "NET/Enclave");
  } else {
    ev["socket_interfaces"] = tail(socket_if_line, "NET/Socket");
  }
  ev["channels_via_" + want_net] = channels;
  ev["channels_via_other"] = wrong_channels;
  ev["first_channel"] = tail(first_channel, "Channel");
  res->evidence["rank" + std::to_string(r.rank)] = ev;
}

std::vector<std::string> ChildEnv(const std::string& mode, int rank, const std::string& plugin_dir,
                                  const std::string& log_path, std::vector<std::string>* dropped) {
  std::vector<std::string> env;
  std::string ld;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view s(*e);
    if (s.rfind("NCCL_", 0) == 0) {
      if (dropped != nullptr) dropped->push_back(std::string(s.substr(0, s.find('='))));
      continue;
    }
    if (s.rfind("ENCLAVE_NET_IFNAME=", 0) == 0 || s.rfind("ENCLAVE_NET_GPU=", 0) == 0) continue;
    if (s.rfind("LD_LIBRARY_PATH=", 0) == 0) {
      ld = std::string(s.substr(std::strlen("LD_LIBRARY_PATH=")));
      continue;
    }
    env.emplace_back(s);
  }
  const std::vector<std::string> common = {
      "NCCL_HOSTID=enclave-check-host-" + std::to_string(rank),  // two "hosts" on one GPU
      "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_NVLS_ENABLE=0", "NCCL_MNNVL_ENABLE=0",
      "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,ENV", "NCCL_DEBUG_FILE=" + log_path,
      "NCCL_SOCKET_IFNAME=lo", "ENCLAVE_NET_IFNAME=lo"};
  env.insert(env.end(), common.begin(), common.end());
  if (mode != "socket") {
    env.push_back("NCCL_NET_PLUGIN=enclave");
    env.push_back("NCCL_NET=enclave");  // no fallback: NCCL fails if the plugin does not initialise
    env.push_back("LD_LIBRARY_PATH=" + plugin_dir + (ld.empty() ? "" : ":" + ld));
    if (mode == "enclave-gpu") {
      env.push_back("ENCLAVE_NET_GPU=1");
      env.push_back("NCCL_NET_GDR_LEVEL=SYS");  // our TCP "NIC" has no PCI path: allow any distance
      env.push_back("NCCL_NET_GDR_READ=1");     // device buffers on the send side too
    }
  } else {
    env.push_back("NCCL_NET_PLUGIN=none");  // "none": no external plugin (src/plugin/net.cc)
    env.push_back("NCCL_NET=Socket");
    if (!ld.empty()) env.push_back("LD_LIBRARY_PATH=" + ld);
  }
  return env;
}

ModeResult RunMode(const Options& o, const std::string& exe, const std::string& mode) {
  ModeResult res;
  res.mode = mode;
  const std::string id_file = o.log_dir + "/" + mode + ".id";
  std::error_code ec;
  fs::remove(id_file, ec);
  std::vector<std::string> dropped;
  const int world = 2;
  for (int r = 0; r < world; ++r) {
    RankRun run;
    run.rank = r;
    const std::string base = o.log_dir + "/" + mode + ".rank" + std::to_string(r);
    run.out = base + ".stdout";
    run.err = base + ".stderr";
    run.log = base + ".nccl.log";
    fs::remove(run.log, ec);
    std::vector<std::string> args = {exe,         "--rank",         std::to_string(r),
                                     "--world",   std::to_string(world), "--id-file",
                                     id_file,     "--mode",         mode,
                                     "--plugin-dir", o.plugin_dir,  "--child-timeout",
                                     std::to_string(o.child_timeout_s), "--seconds-per-size",
                                     std::to_string(o.seconds_per_size)};
    auto env = ChildEnv(mode, r, o.plugin_dir, run.log, r == 0 ? &dropped : nullptr);
    if (r == 0) {
      for (const auto& e : env) {
        if (e.rfind("NCCL_", 0) == 0 || e.rfind("ENCLAVE_NET_", 0) == 0) {
          const size_t eq = e.find('=');
          res.env[e.substr(0, eq)] = e.substr(eq + 1);
        }
      }
      res.env["NCCL_HOSTID"] = "enclave-check-host-<rank>";
      res.env["NCCL_DEBUG_FILE"] = o.log_dir + "/" + mode + ".rank<rank>.nccl.log";
    }
    std::string error;
    run.pid = Spawn(exe, args, env, run.out, run.err, &error);
    if (run.pid < 0) {
      res.failures.push_back("[" + mode + " rank " + std::to_string(r) + "] cannot start: " + error);
    } else {
      run.running = true;
    }
    res.ranks.push_back(run);
  }
  if (!dropped.empty()) {
    std::string names;
    for (const auto& d : dropped) names += (names.empty() ? "" : " ") + d;
    std::fprintf(stderr, "nccl_plugin_check: %s: not passing the inherited %s to the ranks\n", mode.c_str(), names.c_str());
    res.env["dropped_inherited"] = dropped;
  }

  // Wait with one deadline; when one rank fails the other gets 10 s to finish, then is killed.
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(o.child_timeout_s);
  bool shortened = false;
  for (;;) {
    bool any_running = false;
    for (auto& r : res.ranks) {
      if (!r.running) continue;
      int st = 0;
      pid_t w = waitpid(r.pid, &st, WNOHANG);
      if (w == r.pid) {
        r.running = false;
        r.status = st;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !shortened) {
          deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
          shortened = true;
        }
      } else {
        any_running = true;
      }
    }
    if (!any_running) break;
    if (Clock::now() > deadline) {
      for (auto& r : res.ranks) {
        if (!r.running) continue;
        kill(-r.pid, SIGKILL);
        kill(r.pid, SIGKILL);
        waitpid(r.pid, &r.status, 0);
        r.running = false;
        if (shortened) r.stopped_after_peer = true; else r.timed_out = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  fs::remove(id_file, ec);

  // The rank that failed first, then the one stopped because of it.
  std::vector<std::string> stopped;
  for (const auto& r : res.ranks) {
    if (r.pid < 0 || RankOk(r)) continue;
    const std::string where = "[" + mode + " rank " + std::to_string(r.rank) + "] ";
    if (r.stopped_after_peer) {
      stopped.push_back(where + "stopped (killed) 10 s after the other rank failed");
      continue;
    }
    const std::string last = LastNonEmptyLine(r.err);
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == kExitNoGpu) {
      res.failures.push_back(where + "no GPU visible in the child: " + last);
      continue;
    }
    res.failures.push_back(where + DescribeExit(r, o.child_timeout_s) + (last.empty() ? "" : ": " + last) + " (" + r.err + ")");
  }
  res.failures.insert(res.failures.end(), stopped.begin(), stopped.end());

  // Rank 0's JSON lines.
  if (!res.ranks.empty()) {
    for (const auto& line : ReadLines(res.ranks[0].out)) {
      if (line.empty() || line[0] != '{') continue;
      Json j = Json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("type")) continue;
      const std::string type = j["type"].get<std::string>();
      if (type == "info") res.info = j;
      else if (type == "correctness") res.correctness.push_back(j);
      else if (type == "bandwidth") res.bandwidth[j["bytes"].get<size_t>()] = j;
    }
    const bool both_ok = std::all_of(res.ranks.begin(), res.ranks.end(), RankOk);
    if (both_ok) {
      const std::string where = "[" + mode + " rank 0] ";
      size_t want_bw = 0;
      for (size_t b = kMinBwBytes; b <= kMaxBwBytes; b *= 4) ++want_bw;
      if (res.correctness.size() != std::size(kCorrectnessCounts)) {
        res.failures.push_back(where + std::to_string(res.correctness.size()) + " correctness records, expected " +
                               std::to_string(std::size(kCorrectnessCounts)) + " (" + res.ranks[0].out + ")");
      }
      for (const auto& c : res.correctness) {
        if (!c.value("ok", false)) res.failures.push_back(where + "wrong all-reduce result: " + c.dump());
      }
      if (res.bandwidth.size() != want_bw) {
        res.failures.push_back(where + std::to_string(res.bandwidth.size()) + " bandwidth records, expected " +
                               std::to_string(want_bw) + " (" + res.ranks[0].out + ")");
      }
    }
  }
  for (const auto& r : res.ranks) {
    if (r.pid >= 0) CheckTransport(mode, r, o.plugin_dir, &res);
  }
  return res;
}

Json ModeJson(const ModeResult& m, int timeout_s) {
  Json bw = Json::array();
  for (const auto& [bytes, j] : m.bandwidth) bw.push_back(j);
  Json ranks = Json::array();
  for (const auto& r : m.ranks) {
    ranks.push_back(Json{{"rank", r.rank},
                         {"ok", RankOk(r)},
                         {"exit", r.pid < 0 ? std::string("not started") : RankOk(r) ? std::string("0") : DescribeExit(r, timeout_s)},
                         {"stdout", r.out},
                         {"stderr", r.err},
                         {"nccl_log", r.log}});
  }
  return Json{{"ok", m.failures.empty()}, {"failures", m.failures}, {"env", m.env}, {"info", m.info},
              {"ranks", ranks}, {"correctness", m.correctness}, {"bandwidth", bw}, {"transport_evidence", m.evidence}};
}

int LaunchMain(Options o, const std::string& command) {
  std::string why;
  if (!GpuVisible(&why)) {
    std::fprintf(stderr, "nccl_plugin_check: no GPU visible (%s): nothing checked\n", why.c_str());
    return kExitNoGpu;
  }
  const std::string exe = SelfExe();
  if (exe.empty()) {
    std::fprintf(stderr, "nccl_plugin_check: FAIL cannot resolve /proc/self/exe\n");
    return kExitFailed;
  }
  if (o.plugin_dir.empty()) {  // the carry (bin/ + lib/) or the build tree (bench/ + net/)
    const fs::path bin = fs::path(exe).parent_path();
    for (const fs::path& d : {bin / ".." / "lib", bin / ".." / "net"}) {
      if (fs::exists(d / kPluginFile)) { o.plugin_dir = d.string(); break; }
    }
    if (o.plugin_dir.empty()) {
      std::fprintf(stderr, "nccl_plugin_check: FAIL no %s next to %s (../lib, ../net): pass --plugin-dir\n", kPluginFile, exe.c_str());
      return kExitFailed;
    }
  }
  o.plugin_dir = Realpath(o.plugin_dir);
  if (!fs::exists(fs::path(o.plugin_dir) / kPluginFile)) {
    std::fprintf(stderr, "nccl_plugin_check: FAIL %s/%s not found (--plugin-dir)\n", o.plugin_dir.c_str(), kPluginFile);
    return kExitFailed;
  }
  if (o.log_dir.empty()) {
    char tmpl[] = "/tmp/nccl_plugin_check.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "nccl_plugin_check: FAIL mkdtemp(%s): %s\n", tmpl, std::strerror(errno));
      return kExitFailed;
    }
    o.log_dir = tmpl;
  }
  std::error_code ec;
  fs::create_directories(o.log_dir, ec);
  if (ec || o.log_dir.find('%') != std::string::npos) {
    std::fprintf(stderr, "nccl_plugin_check: FAIL cannot use log dir %s%s\n", o.log_dir.c_str(),
                 ec ? (": " + ec.message()).c_str() : " (no '%' allowed: NCCL_DEBUG_FILE expands it)");
    return kExitFailed;
  }
  o.log_dir = Realpath(o.log_dir);
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  std::fprintf(stderr, "nccl_plugin_check: 2 ranks on GPU 0 as two NCCL hosts, NCCL %d, plugin %s/%s, logs in %s\n",
               nccl_version, o.plugin_dir.c_str(), kPluginFile, o.log_dir.c_str());

  const std::string started = UtcNow();
  std::vector<ModeResult> modes;
  for (const char* mode : {"enclave", "enclave-gpu", "socket"}) {
    std::fprintf(stderr, "nccl_plugin_check: %s: running (time limit %d s per rank)\n", mode, o.child_timeout_s);
    const auto t0 = Clock::now();
    modes.push_back(RunMode(o, exe, mode));
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const ModeResult& m = modes.back();
    if (m.failures.empty()) {
      std::fprintf(stderr, "nccl_plugin_check: %s: passed in %.1f s (all-reduce exact at 1, 262144, 16777216 floats; "
                           "both ranks' channels via NET/%s%s)\n", mode, secs, m.mode == "socket" ? "Socket" : "enclave",
                   m.mode == "enclave-gpu" ? ", GDRDMA" : "");
    } else {
      std::fprintf(stderr, "nccl_plugin_check: %s: FAILED in %.1f s\n", mode, secs);
    }
    for (const auto& f : m.failures) std::fprintf(stderr, "nccl_plugin_check: FAIL %s\n", f.c_str());
  }

  // The side-by-side table: bus bandwidth against the plaintext socket transport, and the
  // host CPU time per GB of the GPU-encrypting path against the CPU-encrypting one.
  const ModeResult& enc = modes[0];
  const ModeResult& gpu = modes[1];
  const ModeResult& sock = modes[2];
  Json table = Json::array();
  std::printf("\nall-reduce float32 sum, 2 ranks on one GPU as two hosts, bus bandwidth (GB/s = 1e9 B/s), rank 0's "
              "process CPU seconds per GB all-reduced\n");
  std::printf("%-10s %12s %12s %12s %10s %10s %12s %12s %10s\n", "size", "busbw cpu", "busbw gpu", "busbw socket",
              "cpu/sock", "gpu/sock", "cpu s/GB cpu", "cpu s/GB gpu", "gpu/cpu");
  for (size_t b = kMinBwBytes; b <= kMaxBwBytes; b *= 4) {
    auto get = [b](const ModeResult& m, const char* key) -> std::optional<double> {
      auto it = m.bandwidth.find(b);
      if (it == m.bandwidth.end() || !it->second.contains(key)) return std::nullopt;
      return it->second[key].get<double>();
    };
    auto ratio = [](std::optional<double> x, std::optional<double> y) -> std::optional<double> {
      if (x && y && *y > 0) return *x / *y;
      return std::nullopt;
    };
    const auto e = get(enc, "busbw_GBps"), g = get(gpu, "busbw_GBps"), s = get(sock, "busbw_GBps");
    const auto ce = get(enc, "cpu_s_per_GB"), cg = get(gpu, "cpu_s_per_GB");
    auto cell = [](std::optional<double> v) {
      char buf[32];
      if (v) std::snprintf(buf, sizeof buf, "%.3f", *v); else std::snprintf(buf, sizeof buf, "-");
      return std::string(buf);
    };
    std::printf("%-10s %12s %12s %12s %10s %10s %12s %12s %10s\n", FormatBytes(b).c_str(), cell(e).c_str(),
                cell(g).c_str(), cell(s).c_str(), cell(ratio(e, s)).c_str(), cell(ratio(g, s)).c_str(),
                cell(ce).c_str(), cell(cg).c_str(), cell(ratio(cg, ce)).c_str());
    auto json = [](std::optional<double> v) { return v ? Json(*v) : Json(nullptr); };
    table.push_back(Json{{"bytes", b},
                         {"busbw_enclave_GBps", json(e)},
                         {"busbw_enclave_gpu_GBps", json(g)},
                         {"busbw_socket_GBps", json(s)},
                         {"ratio", json(ratio(e, s))},
                         {"ratio_gpu", json(ratio(g, s))},
                         {"cpu_s_per_GB_enclave", json(ce)},
                         {"cpu_s_per_GB_enclave_gpu", json(cg)},
                         {"cpu_ratio_gpu_to_cpu", json(ratio(cg, ce))}});
  }
  size_t nfail = 0;
  for (const auto& m : modes) nfail += m.failures.size();
  const bool ok = nfail == 0;

  if (!o.out.empty()) {
    Json report{{"tool", "nccl_plugin_check"},
                {"command", command},
                {"started_utc", started},
                {"finished_utc", UtcNow()},
                {"nccl_version", nccl_version},
                {"gpu", enc.info.value("gpu", sock.info.value("gpu", ""))},
                {"plugin", (fs::path(o.plugin_dir) / kPluginFile).string()},
                {"log_dir", o.log_dir},
                {"setup", "2 processes on CUDA device 0, NCCL_HOSTID differs per rank (two hosts): P2P/SHM off, "
                          "traffic through the net transport on lo; the GPU is time-sliced between the processes"},
                {"ok", ok},
                {"modes", Json{{"enclave", ModeJson(enc, o.child_timeout_s)},
                               {"enclave-gpu", ModeJson(gpu, o.child_timeout_s)},
                               {"socket", ModeJson(sock, o.child_timeout_s)}}},
                {"table", table}};
    const std::string tmp = o.out + ".tmp";
    {
      std::ofstream f(tmp);
      f << report.dump(2) << "\n";
      if (!f) {
        std::fprintf(stderr, "nccl_plugin_check: FAIL cannot write %s\n", tmp.c_str());
        return kExitFailed;
      }
    }
    fs::rename(tmp, o.out, ec);
    if (ec) {
      std::fprintf(stderr, "nccl_plugin_check: FAIL cannot write %s: %s\n", o.out.c_str(), ec.message().c_str());
      return kExitFailed;
    }
  }
  if (ok) {
    std::printf("nccl_plugin_check: OK - all-reduce exact through the enclave plugin (CPU and GPU records) and the "
                "socket transport; plugin in use proven from both ranks' NCCL logs\n");
  } else {
    std::printf("nccl_plugin_check: FAILED - %zu problem(s), listed above (logs in %s)\n", nfail, o.log_dir.c_str());
  }
  std::fflush(stdout);
  return ok ? kExitOk : kExitFailed;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
  }
  auto o = ParseArgs(argc, argv);
  if (!o) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  if (o->launch) {
    std::string command;
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
    return LaunchMain(*o, command);
  }
  return ChildMain(*o);
}
