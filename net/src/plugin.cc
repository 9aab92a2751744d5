// The ABI edge: ncclNetPlugin_v11 over the transport. Status -> ncclResult_t here and
// nowhere else; every failure is logged through NCCL's logger with what and where.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "enclave/net/plugin.h"
#include "gpu_records.h"
#include "nccl_net_legacy.h"
#include "nccl_net_v11.h"
#include "transport.h"

#define ENCLAVE_EXPORT __attribute__((visibility("default")))

namespace enclave::net {
namespace {

std::mutex g_mu;
crypto::SecretBytes g_job_key;  // guarded by g_mu
std::once_flag g_device_once;
Result<Device> g_device = NotFound("network device not selected yet");
char g_dev_name[64] = "enclave";
char g_pci_path[] = "";
std::atomic<ncclDebugLogger_t> g_nccl_log{nullptr};
// Whether an initialized context seals GPU buffers on the GPU (ENCLAVE_NET_GPU=1): then
// NCCL_PTR_CUDA is advertised and device memory registered.
std::atomic<bool> g_gpu_records{false};

void LogToNccl(LogLevel level, const char* message) {
  ncclDebugLogger_t fn = g_nccl_log.load();
  if (fn == nullptr) {
    // kSecurity lines reach stderr through Log() already.
    if (level == LogLevel::kWarn) std::fprintf(stderr, "NET/Enclave : %s\n", message);
    return;
  }
  fn(level == LogLevel::kInfo ? NCCL_LOG_INFO : NCCL_LOG_WARN, NCCL_NET | NCCL_INIT, __FILE__, __LINE__,
     "NET/Enclave : %s", message);
}

ncclResult_t ToNccl(const Status& st, const char* call) {
  if (st.ok()) return ncclSuccess;
  Log(st.code() == Code::kAuthFailed ? LogLevel::kSecurity : LogLevel::kWarn,
      std::string(call) + ": " + st.ToString());
  switch (st.code()) {
    case Code::kInvalidInput: return ncclInvalidArgument;
    case Code::kFailedPrecondition:
    case Code::kPermissionDenied: return ncclInvalidUsage;
    case Code::kAuthFailed:
    case Code::kUnavailable: return ncclRemoteError;
    case Code::kIo:
    case Code::kNotFound: return ncclSystemError;
    default: return ncclInternalError;
  }
}

// Errors a DataComm already logged when it failed: convert without logging again.
ncclResult_t QuietToNccl(const Status& st) {
  return st.code() == Code::kAuthFailed || st.code() == Code::kUnavailable ? ncclRemoteError : ncclSystemError;
}

// A bad argument is logged here; a failed connection's error was logged when it failed.
ncclResult_t PostError(const Status& st, const char* call) {
  return st.code() == Code::kInvalidInput ? ToNccl(st, call) : QuietToNccl(st);
}

void SelectDeviceOnce() {
  std::call_once(g_device_once, [] {
    g_device = SelectDevice();
    if (g_device.ok()) {
      std::snprintf(g_dev_name, sizeof(g_dev_name), "%s", g_device->name.c_str());
      Log(LogLevel::kInfo, "using interface " + g_device->name);
    }
  });
}

struct MemoryRegion {
  void* data;
  size_t size;
  int type;  // NCCL_PTR_HOST or NCCL_PTR_CUDA
};

bool OnDevice(void* mhandle) {
  return mhandle != nullptr && static_cast<MemoryRegion*>(mhandle)->type == NCCL_PTR_CUDA;
}

ncclResult_t Init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t*, ncclDebugLogger_t log_fn,
                  ncclProfilerCallback_t) {
  if (ctx == nullptr) return ncclInvalidArgument;
  *ctx = nullptr;
  if (log_fn != nullptr) g_nccl_log.store(log_fn);
  SetLogHook(LogToNccl);
  crypto::SecretBytes key;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_job_key.empty()) {
      return ToNccl(FailedPrecondition("no job key: the trainer must call enclave_net_set_job_key() before NCCL "
                                       "initialises; refusing to run without encryption"),
                    "init");
    }
    auto copy = g_job_key.Clone();
    if (!copy.ok()) return ToNccl(copy.status(), "init");
    key = std::move(copy).value();
  }
  SelectDeviceOnce();
  if (!g_device.ok()) return ToNccl(g_device.status(), "init");
  auto options = OptionsFromEnv();
  if (!options.ok()) return ToNccl(options.status(), "init");
  const RecordProtection* gpu = nullptr;
  if (options->gpu_records) {
    // LL128 in a device buffer is read by NCCL's kernels while it is being written, which
    // only in-order 128-byte writes make safe; our decrypting kernel gives no such order.
    // NCCL leaves LL128 off for a network at this plugin's distance (no PCI path), so only
    // a forced NCCL_PROTO can turn it on: refuse that.
    if (const char* proto = std::getenv("NCCL_PROTO"); proto != nullptr && proto[0] != '^' &&
                                                       strcasestr(proto, "LL128") != nullptr) {
      return ToNccl(FailedPrecondition("ENCLAVE_NET_GPU=1 with NCCL_PROTO='" + std::string(proto) +
                                       "': LL128 cannot run on GPU records; leave NCCL_PROTO unset or exclude LL128"),
                    "init");
    }
    std::string why;
    gpu = GpuRecordProtection(&why);
    if (gpu == nullptr) return ToNccl(FailedPrecondition("ENCLAVE_NET_GPU=1, but " + why), "init");
  }
  auto c = Context::Create(std::move(key), comm_id, *g_device, *options, AeadProtection(), gpu);
  if (!c.ok()) return ToNccl(c.status(), "init");
  if (gpu != nullptr) {
    g_gpu_records.store(true);
    Log(LogLevel::kInfo, "GPU buffers are sealed and opened on the GPU (ENCLAVE_NET_GPU=1)");
  }
  *ctx = c->release();
  return ncclSuccess;
}

ncclResult_t Devices(int* ndev) {
  SelectDeviceOnce();
  *ndev = g_device.ok() ? 1 : 0;
  return ncclSuccess;
}

ncclResult_t GetProperties(int dev, ncclNetProperties_v11_t* props) {
  SelectDeviceOnce();
  if (dev != 0 || props == nullptr || !g_device.ok()) return ncclInvalidArgument;
  std::memset(props, 0, sizeof(*props));
  props->name = g_dev_name;
  props->pciPath = g_pci_path;
  props->guid = 0x656e636c61766500ull;  // "enclave\0"
  // Without GPU records NCCL stages GPU data through host buffers.
  props->ptrSupport = g_gpu_records.load() ? NCCL_PTR_HOST | NCCL_PTR_CUDA : NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = g_device->speed_mbps;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = static_cast<size_t>(kMaxMessageBytes);
  props->maxCollBytes = static_cast<size_t>(kMaxMessageBytes);
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t Listen(void* ctx, int dev, void* handle, void** listen_comm) {
  if (ctx == nullptr || dev != 0 || handle == nullptr || listen_comm == nullptr) return ncclInvalidArgument;
  *listen_comm = nullptr;
  auto l = static_cast<Context*>(ctx)->Listen(std::span<uint8_t, kHandleBytes>(static_cast<uint8_t*>(handle), kHandleBytes));
  if (!l.ok()) return ToNccl(l.status(), "listen");
  *listen_comm = l->release();
  return ncclSuccess;
}

ncclResult_t Connect(void* ctx, int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v11_t**) {
  if (ctx == nullptr || dev != 0 || handle == nullptr || send_comm == nullptr) return ncclInvalidArgument;
  *send_comm = nullptr;
  auto c = static_cast<Context*>(ctx)->Connect(std::span<uint8_t, kHandleBytes>(static_cast<uint8_t*>(handle), kHandleBytes));
  if (!c.ok()) return QuietToNccl(c.status());  // Connect logged it
  *send_comm = c->release();
  return ncclSuccess;
}

ncclResult_t Accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v11_t**) {
  if (listen_comm == nullptr || recv_comm == nullptr) return ncclInvalidArgument;
  *recv_comm = nullptr;
  auto c = static_cast<ListenComm*>(listen_comm)->Accept();
  if (!c.ok()) return QuietToNccl(c.status());  // Accept logged it
  *recv_comm = c->release();
  return ncclSuccess;
}

ncclResult_t RegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (comm == nullptr || mhandle == nullptr) return ncclInvalidArgument;
  // Without GPU records, host memory only: with ptrSupport HOST, NCCL never registers
  // device memory except in its GDR probe, which expects this refusal.
  const bool gpu = type == NCCL_PTR_CUDA && static_cast<DataComm*>(comm)->has_device_layers();
  if (type != NCCL_PTR_HOST && !gpu) return ncclInternalError;
  *mhandle = new MemoryRegion{data, size, type};
  return ncclSuccess;
}

ncclResult_t DeregMr(void*, void* mhandle) {
  delete static_cast<MemoryRegion*>(mhandle);
  return ncclSuccess;
}

ncclResult_t Isend(void* send_comm, void* data, size_t size, int, void* mhandle, void*, void** request) {
  if (send_comm == nullptr || request == nullptr) return ncclInvalidArgument;
  auto* comm = static_cast<DataComm*>(send_comm);
  if (comm->role() != DataComm::Role::kSend) return ToNccl(InvalidInput("isend on a receive comm"), "isend");
  auto r = comm->Post(static_cast<uint8_t*>(data), size, OnDevice(mhandle));
  if (!r.ok()) return PostError(r.status(), "isend");
  *request = *r;
  return ncclSuccess;
}

ncclResult_t Irecv(void* recv_comm, int n, void** data, size_t* sizes, int*, void** mhandles, void**,
                   void** request) {
  if (recv_comm == nullptr || request == nullptr || data == nullptr || sizes == nullptr) return ncclInvalidArgument;
  if (n != 1) return ToNccl(InvalidInput("irecv with n=" + std::to_string(n) + " (maxRecvs is 1)"), "irecv");
  auto* comm = static_cast<DataComm*>(recv_comm);
  if (comm->role() != DataComm::Role::kRecv) return ToNccl(InvalidInput("irecv on a send comm"), "irecv");
  auto r = comm->Post(static_cast<uint8_t*>(data[0]), sizes[0], mhandles != nullptr && OnDevice(mhandles[0]));
  if (!r.ok()) return PostError(r.status(), "irecv");
  *request = *r;
  return ncclSuccess;
}

// NCCL asks for a flush only after a receive into GPU memory. A GPU record's plaintext is
// written by our kernels on our stream, which finished before test() said done: nothing
// to flush (a null request is NCCL's "done"). Without GPU records we refuse as before.
ncclResult_t Iflush(void* recv_comm, int, void**, int*, void**, void** request) {
  if (request != nullptr) *request = nullptr;
  if (recv_comm != nullptr && static_cast<DataComm*>(recv_comm)->has_device_layers()) return ncclSuccess;
  return ncclInternalError;
}

ncclResult_t Test(void* request, int* done, int* sizes) {
  if (request == nullptr || done == nullptr) return ncclInvalidArgument;
  auto* r = static_cast<Request*>(request);
  bool d = false;
  uint64_t size = 0;
  Status st = r->owner->Test(r, &d, &size);
  if (!st.ok()) {
    *done = 0;
    return st.code() == Code::kInvalidInput ? ToNccl(st, "test") : QuietToNccl(st);
  }
  *done = d ? 1 : 0;
  if (d && sizes != nullptr) sizes[0] = static_cast<int>(size);
  return ncclSuccess;
}

ncclResult_t CloseComm(void* comm) {
  delete static_cast<DataComm*>(comm);
  return ncclSuccess;
}

ncclResult_t CloseListen(void* listen_comm) {
  delete static_cast<ListenComm*>(listen_comm);
  return ncclSuccess;
}

ncclResult_t Finalize(void* ctx) {
  delete static_cast<Context*>(ctx);
  return ncclSuccess;
}

}  // namespace

bool ContextKeyIsCurrent(void* ctx) {
  if (ctx == nullptr) return false;
  const crypto::SecretBytes& key = static_cast<Context*>(ctx)->job_key();
  std::lock_guard<std::mutex> lock(g_mu);
  return !g_job_key.empty() && crypto::ConstantTimeEquals(g_job_key.ExposeSecret(), key.ExposeSecret());
}

}  // namespace enclave::net

extern "C" {

ENCLAVE_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    "enclave",
    enclave::net::Init,
    enclave::net::Devices,
    enclave::net::GetProperties,
    enclave::net::Listen,
    enclave::net::Connect,
    enclave::net::Accept,
    enclave::net::RegMr,
    nullptr,  // regMrDmaBuf: not offered (no NCCL_PTR_DMABUF)
    enclave::net::DeregMr,
    enclave::net::Isend,
    enclave::net::Irecv,
    enclave::net::Iflush,
    enclave::net::Test,
    enclave::net::CloseComm,
    enclave::net::CloseComm,
    enclave::net::CloseListen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed
    nullptr,  // makeVDevice
    enclave::net::Finalize,
    nullptr,  // setNetAttr
};

ENCLAVE_EXPORT int enclave_net_set_job_key(const uint8_t* key, size_t len) {
  if (key == nullptr || len < 32 || len > 64) return -1;
  auto s = enclave::crypto::SecretBytes::CopyFrom(std::span<const uint8_t>(key, len));
  if (!s.ok()) return -1;
  std::lock_guard<std::mutex> lock(enclave::net::g_mu);
  enclave::net::g_job_key = std::move(s).value();
  return 0;
}

ENCLAVE_EXPORT void enclave_net_clear_job_key(void) {
  std::lock_guard<std::mutex> lock(enclave::net::g_mu);
  enclave::net::g_job_key = enclave::crypto::SecretBytes();
}

}  // extern "C"
