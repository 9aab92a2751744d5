// The older NCCL network plugin tables, ncclNetPlugin_v10 .. ncclNetPlugin_v6, as thin
// wrappers over the exported ncclNetPlugin_v11 table (plugin.cc): each entry point adapts
// its arguments to the v11 function and calls it; nothing here touches the transport.
// NCCL 2.28+ finds _v11 first and never looks at these; older releases know only older
// names (first looked up by NCCL 2.13 for v6, 2.19 v7, 2.20 v8, 2.24 v9, 2.26 v10).
// Layouts: nccl_net_legacy.h. How NCCL 2.28 itself adapts each version (the reverse
// direction, which fixes the semantics): NVIDIA/nccl src/plugin/net/net_v6.cc .. net_v10.cc.
//
// The one real difference: v6..v10 have no per-communicator context. init(logFn) is called
// once per process (NCCL 2.28's own compat layer keeps that with a refcount), listen and
// connect take only a device, and there is no finalize. So these tables keep ONE
// process-wide v11 context, created by the first successful older init() (which, like v11
// init, fails closed while no job key is set), with comm_id 0, and kept until the process
// exits. Consequences (docs/formats/net-transport.md, "Older NCCL releases"):
//  - every communicator of the process shares that context; the handshake's comm_id check
//    cannot separate communicators (the job key and the per-listen listen_id still bind
//    every connection), and a peer must use an older table too (a v11 peer has a real
//    comm_id and the handshake refuses the pair);
//  - the job key is read once; because no later init() would notice the key being cleared
//    or replaced, listen() and connect() check before every use that the key set now is
//    still the one the context holds, and refuse otherwise (fail closed; stricter than
//    v11, where a communicator created before enclave_net_clear_job_key() keeps
//    connecting). Established connections keep their derived keys until closed.
//
// Per version (details next to each wrapper): sizes given as int (regMr in v6/v7,
// isend/irecv in v6..v8) are checked non-negative and widened; v10's connect config
// (trafficClass) is ignored as the v11 init ignores it; v10's phandles are dropped (v11
// ignores them too); properties are copied field by field from the v11 ones.
// Left out: nothing of v6..v10 that v11 implements. makeVDevice, regMrDmaBuf,
// getDeviceMr and irecvConsumed stay NULL as in the v11 table (host memory only, no
// device offload, no virtual NICs), which every NCCL release checks for.
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "nccl_net_legacy.h"
#include "nccl_net_v11.h"
#include "transport.h"

#define ENCLAVE_EXPORT __attribute__((visibility("default")))

extern "C" ENCLAVE_EXPORT ncclNet_v11_t ncclNetPlugin_v11;  // plugin.cc

namespace enclave::net {
namespace {

constexpr uint64_t kLegacyCommId = 0;  // older NCCL does not tell us its communicator

std::mutex g_legacy_mu;                       // serialises older init() calls
std::atomic<void*> g_legacy_ctx{nullptr};     // the shared v11 context, never freed

const ncclNet_v11_t& V11() { return ncclNetPlugin_v11; }

ncclResult_t LegacyInit(ncclDebugLogger_t log_fn, ncclProfilerCallback_t prof_fn) {
  std::lock_guard<std::mutex> lock(g_legacy_mu);
  // v11 init checks the key (fails closed and logs why), selects the device, installs
  // NCCL's logger and creates a context. Done on every call so that every older init()
  // fails without a key, as v11's does.
  void* ctx = nullptr;
  ncclResult_t rc = V11().init(&ctx, kLegacyCommId, nullptr, log_fn, prof_fn);
  if (rc != ncclSuccess) return rc;
  void* shared = g_legacy_ctx.load();
  if (shared == nullptr) {
    g_legacy_ctx.store(ctx);
    return ncclSuccess;
  }
  V11().finalize(ctx);  // one context per process: keep the first
  if (!ContextKeyIsCurrent(shared)) {
    Log(LogLevel::kWarn, "init (older plugin ABI): the job key changed since the first init(); the older ABIs "
                         "share one context per process, which keeps the first key: restart the process");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

ncclResult_t InitV10(ncclDebugLogger_t log_fn, ncclProfilerCallback_t prof_fn) { return LegacyInit(log_fn, prof_fn); }
// v6..v9: init(logFunction) only.
ncclResult_t InitLogOnly(ncclDebugLogger_t log_fn) { return LegacyInit(log_fn, nullptr); }

// The shared context for listen/connect, if init() succeeded and the key is unchanged.
ncclResult_t SharedContext(const char* call, void** ctx) {
  *ctx = nullptr;
  void* c = g_legacy_ctx.load();
  if (c == nullptr) {
    Log(LogLevel::kWarn, std::string(call) + " (older plugin ABI): init() has not succeeded");
    return ncclInvalidUsage;
  }
  if (!ContextKeyIsCurrent(c)) {
    Log(LogLevel::kWarn, std::string(call) +
                             " (older plugin ABI): the job key was cleared or replaced after init(); refusing new "
                             "connections (fail closed)");
    return ncclInvalidUsage;
  }
  *ctx = c;
  return ncclSuccess;
}

// An int size from v6..v8 as the v11 size_t.
bool Widen(int size, size_t* out) {
  if (size < 0) {
    Log(LogLevel::kWarn, "negative size " + std::to_string(size) + " (older plugin ABI)");
    return false;
  }
  *out = static_cast<size_t>(size);
  return true;
}

// ---- the same in every version ----
ncclResult_t Devices(int* ndev) { return V11().devices(ndev); }
ncclResult_t RegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return V11().regMr(comm, data, size, type, mhandle);
}
ncclResult_t DeregMr(void* comm, void* mhandle) { return V11().deregMr(comm, mhandle); }
ncclResult_t Iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return V11().iflush(recv_comm, n, data, sizes, mhandles, request);
}
ncclResult_t Test(void* request, int* done, int* sizes) { return V11().test(request, done, sizes); }
ncclResult_t CloseSend(void* comm) { return V11().closeSend(comm); }
ncclResult_t CloseRecv(void* comm) { return V11().closeRecv(comm); }
ncclResult_t CloseListen(void* comm) { return V11().closeListen(comm); }

ncclResult_t Listen(int dev, void* handle, void** listen_comm) {
  void* ctx = nullptr;
  if (listen_comm != nullptr) *listen_comm = nullptr;
  if (ncclResult_t rc = SharedContext("listen", &ctx); rc != ncclSuccess) return rc;
  return V11().listen(ctx, dev, handle, listen_comm);
}

// v7..v9 connect: (dev, handle, sendComm, sendDevComm).
ncclResult_t Connect(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v11_t** send_dev_comm) {
  void* ctx = nullptr;
  if (send_comm != nullptr) *send_comm = nullptr;
  if (ncclResult_t rc = SharedContext("connect", &ctx); rc != ncclSuccess) return rc;
  return V11().connect(ctx, dev, handle, send_comm, send_dev_comm);
}
// v10: the per-connection config moved into init in v11; its only field, trafficClass,
// is ignored by the v11 plugin as well (plain TCP, no traffic classes).
ncclResult_t ConnectV10(int dev, ncclNetCommConfig_v10_t*, void* handle, void** send_comm,
                        ncclNetDeviceHandle_v10_t** send_dev_comm) {
  return Connect(dev, handle, send_comm, send_dev_comm);
}
// v6: no device handles.
ncclResult_t ConnectV6(int dev, void* handle, void** send_comm) { return Connect(dev, handle, send_comm, nullptr); }

ncclResult_t Accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v11_t** recv_dev_comm) {
  return V11().accept(listen_comm, recv_comm, recv_dev_comm);
}
ncclResult_t AcceptV6(void* listen_comm, void** recv_comm) { return Accept(listen_comm, recv_comm, nullptr); }

// v6/v7 regMr: int size.
ncclResult_t RegMrInt(void* comm, void* data, int size, int type, void** mhandle) {
  size_t s = 0;
  if (!Widen(size, &s)) return ncclInvalidArgument;
  return V11().regMr(comm, data, s, type, mhandle);
}

// v10: as v11 (the phandle is unused by v11 too).
ncclResult_t IsendV10(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                      void** request) {
  return V11().isend(send_comm, data, size, tag, mhandle, phandle, request);
}
ncclResult_t IrecvV10(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void** phandles, void** request) {
  return V11().irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}
// v9: size_t sizes, no phandle.
ncclResult_t IsendV9(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return V11().isend(send_comm, data, size, tag, mhandle, nullptr, request);
}
ncclResult_t IrecvV9(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return V11().irecv(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
}
// v6..v8: int sizes, no phandle. maxRecvs is 1, so only sizes[0] can be valid: it is
// widened, and the v11 irecv refuses (and logs) any n other than 1 before reading more.
ncclResult_t IsendInt(void* send_comm, void* data, int size, int tag, void* mhandle, void** request) {
  size_t s = 0;
  if (!Widen(size, &s)) return ncclInvalidArgument;
  return V11().isend(send_comm, data, s, tag, mhandle, nullptr, request);
}
ncclResult_t IrecvInt(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  size_t s0 = 0;
  if (sizes != nullptr && n >= 1 && !Widen(sizes[0], &s0)) return ncclInvalidArgument;
  return V11().irecv(recv_comm, n, data, sizes != nullptr ? &s0 : nullptr, tags, mhandles, nullptr, request);
}

// Properties: the v11 values, copied into each older layout (same names, same meaning).
template <typename P>
ncclResult_t CommonProperties(int dev, P* props, ncclNetProperties_v11_t* v11) {
  if (props == nullptr) return ncclInvalidArgument;
  ncclResult_t rc = V11().getProperties(dev, v11);
  if (rc != ncclSuccess) return rc;
  std::memset(props, 0, sizeof(*props));
  props->name = v11->name;
  props->pciPath = v11->pciPath;
  props->guid = v11->guid;
  props->ptrSupport = v11->ptrSupport;
  props->speed = v11->speed;
  props->port = v11->port;
  props->latency = v11->latency;
  props->maxComms = v11->maxComms;
  props->maxRecvs = v11->maxRecvs;
  return ncclSuccess;
}
ncclResult_t GetPropertiesV6(int dev, ncclNetProperties_v6_t* props) {
  ncclNetProperties_v11_t v11;
  return CommonProperties(dev, props, &v11);
}
ncclResult_t GetPropertiesV7(int dev, ncclNetProperties_v7_t* props) {
  ncclNetProperties_v11_t v11;
  ncclResult_t rc = CommonProperties(dev, props, &v11);
  if (rc != ncclSuccess) return rc;
  props->netDeviceType = v11.netDeviceType;
  props->netDeviceVersion = v11.netDeviceVersion;
  return ncclSuccess;
}
ncclResult_t GetPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  ncclNetProperties_v11_t v11;
  ncclResult_t rc = CommonProperties(dev, props, &v11);
  if (rc != ncclSuccess) return rc;
  props->regIsGlobal = v11.regIsGlobal;
  props->netDeviceType = v11.netDeviceType;
  props->netDeviceVersion = v11.netDeviceVersion;
  return ncclSuccess;
}
// v9 and v10 have the same properties layout (v10 = v9).
template <typename P>
ncclResult_t GetPropertiesV9Layout(int dev, P* props) {
  ncclNetProperties_v11_t v11;
  ncclResult_t rc = CommonProperties(dev, props, &v11);
  if (rc != ncclSuccess) return rc;
  props->regIsGlobal = v11.regIsGlobal;
  props->forceFlush = v11.forceFlush;
  props->netDeviceType = v11.netDeviceType;
  props->netDeviceVersion = v11.netDeviceVersion;
  props->vProps = v11.vProps;
  props->maxP2pBytes = v11.maxP2pBytes;
  props->maxCollBytes = v11.maxCollBytes;
  return ncclSuccess;
}
ncclResult_t GetPropertiesV9(int dev, ncclNetProperties_v9_t* props) { return GetPropertiesV9Layout(dev, props); }
ncclResult_t GetPropertiesV10(int dev, ncclNetProperties_v10_t* props) { return GetPropertiesV9Layout(dev, props); }

}  // namespace
}  // namespace enclave::net

namespace n = enclave::net;

extern "C" {

ENCLAVE_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    "enclave",
    n::InitV10,
    n::Devices,
    n::GetPropertiesV10,
    n::Listen,
    n::ConnectV10,
    n::Accept,
    n::RegMr,
    nullptr,  // regMrDmaBuf: host memory only
    n::DeregMr,
    n::IsendV10,
    n::IrecvV10,
    n::Iflush,
    n::Test,
    n::CloseSend,
    n::CloseRecv,
    n::CloseListen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed
    nullptr,  // makeVDevice
};

ENCLAVE_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {
    "enclave",
    n::InitLogOnly,
    n::Devices,
    n::GetPropertiesV9,
    n::Listen,
    n::Connect,
    n::Accept,
    n::RegMr,
    nullptr,  // regMrDmaBuf
    n::DeregMr,
    n::IsendV9,
    n::IrecvV9,
    n::Iflush,
    n::Test,
    n::CloseSend,
    n::CloseRecv,
    n::CloseListen,
    nullptr,  // getDeviceMr
    nullptr,  // irecvConsumed
    nullptr,  // makeVDevice
};

ENCLAVE_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {
    "enclave",
    n::InitLogOnly,
    n::Devices,
    n::GetPropertiesV8,
    n::Listen,
    n::Connect,
    n::Accept,
    n::RegMr,
    nullptr,  // regMrDmaBuf
    n::DeregMr,
    n::IsendInt,
    n::IrecvInt,
    n::Iflush,
    n::Test,
    n::CloseSend,
    n::CloseRecv,
    n::CloseListen,
    nullptr,  // getDeviceMr
    nullptr,  // irecvConsumed
};

ENCLAVE_EXPORT ncclNet_v7_t ncclNetPlugin_v7 = {
    "enclave",
    n::InitLogOnly,
    n::Devices,
    n::GetPropertiesV7,
    n::Listen,
    n::Connect,
    n::Accept,
    n::RegMrInt,
    nullptr,  // regMrDmaBuf
    n::DeregMr,
    n::IsendInt,
    n::IrecvInt,
    n::Iflush,
    n::Test,
    n::CloseSend,
    n::CloseRecv,
    n::CloseListen,
    nullptr,  // getDeviceMr
    nullptr,  // irecvConsumed
};

ENCLAVE_EXPORT ncclNet_v6_t ncclNetPlugin_v6 = {
    "enclave",
    n::InitLogOnly,
    n::Devices,
    n::GetPropertiesV6,
    n::Listen,
    n::ConnectV6,
    n::AcceptV6,
    n::RegMrInt,
    nullptr,  // regMrDmaBuf
    n::DeregMr,
    n::IsendInt,
    n::IrecvInt,
    n::Iflush,
    n::Test,
    n::CloseSend,
    n::CloseRecv,
    n::CloseListen,
};

}  // extern "C"
