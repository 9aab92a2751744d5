#include "enclave/trainer/nccl_collective.h"

#include <strings.h>

#include <cstdlib>
#include <cstring>
#include <string>

#if ENCLAVE_TRAIN_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <thread>
#endif

namespace enclave::trainer {

// NCCL reads its network settings from the environment (and /etc/nccl.conf, whose values
// never override the environment) when it first initialises. Only the encrypted plugin may
// carry inter-host traffic: another configured network, and the paths between hosts that
// bypass the net plugin (in-network reduction, multi-node NVLink), are refused rather than
// overridden silently; then all of them are set, before any NCCL call. Needs no CUDA: a
// process whose NCCL is another library's (torch's) is configured by it too.
Status ForceNcclNetwork(const char* net) {
  struct Setting {
    const char* var;
    const char* value;
  };
  const Setting settings[] = {{"NCCL_NET", net}, {"NCCL_NET_PLUGIN", net}, {"NCCL_COLLNET_ENABLE", "0"},
                              {"NCCL_MNNVL_ENABLE", "0"}};
  for (const Setting& s : settings) {  // every check before any change
    const char* v = std::getenv(s.var);
    if (v != nullptr && *v != '\0' && strcasecmp(v, s.value) != 0) {
      return FailedPrecondition(std::string(s.var) + "=" + v + " would let NCCL move data between hosts outside the " +
                                "encrypted '" + net + "' plugin: unset it");
    }
  }
  for (const Setting& s : settings) {
    if (setenv(s.var, s.value, 1) != 0) return Internal(std::string("setenv ") + s.var);
  }
  return OkStatus();
}

#if !ENCLAVE_TRAIN_NCCL

bool NcclBuilt() { return false; }
Result<NcclUniqueId> NewNcclUniqueId() { return Unsupported("this build has no CUDA: no NCCL"); }
Result<std::unique_ptr<Collective>> JoinNccl(const NcclJoinOptions&) {
  return Unsupported("this build has no CUDA: no NCCL");
}

#else

namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);

// libnccl.so.2 is opened when first needed, so that enclave-train (and every CPU run)
// starts on machines without NCCL.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommFinalize) finalize = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

Result<const NcclApi*> Api() {
  static NcclApi api;
  static Status loaded = [] {
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return Unavailable(std::string("cannot load NCCL: ") + dlerror());
    auto sym = [h](auto* field, const char* name) {
      *field = reinterpret_cast<std::remove_reference_t<decltype(*field)>>(dlsym(h, name));
      return *field != nullptr;
    };
    if (!sym(&api.get_unique_id, "ncclGetUniqueId") || !sym(&api.init_rank_config, "ncclCommInitRankConfig") ||
        !sym(&api.get_async_error, "ncclCommGetAsyncError") || !sym(&api.all_reduce, "ncclAllReduce") ||
        !sym(&api.abort, "ncclCommAbort") || !sym(&api.finalize, "ncclCommFinalize") ||
        !sym(&api.destroy, "ncclCommDestroy") || !sym(&api.error_string, "ncclGetErrorString")) {
      return Unavailable("libnccl.so.2 lacks the NCCL 2.14+ API (ncclCommFinalize, nonblocking communicators)");
    }
    return OkStatus();
  }();
  if (!loaded.ok()) return loaded;
  return &api;
}

Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return OkStatus();
  return Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(const NcclApi* api, ncclComm_t comm, cudaStream_t stream, cudaEvent_t done, const NcclJoinOptions& o)
      : api_(api), comm_(comm), stream_(stream), done_(done), rank_(o.rank), world_(o.world_size), timeout_(o.timeout) {}
  ~NcclCollective() override {
    if (comm_ != nullptr) {
      // A clean end flushes; a failed flush (or a peer silent for the timeout) aborts.
      const ncclResult_t f = api_->finalize(comm_);
      if (f == ncclSuccess || f == ncclInProgress) {
        (void)Wait("closing the communicator", /*call_only=*/true);  // aborts on failure
      } else {
        api_->abort(comm_);
        comm_ = nullptr;
      }
      if (comm_ != nullptr) api_->destroy(comm_);
    }
    if (device_ != nullptr) {
      cudaMemsetAsync(device_, 0, capacity_, stream_);  // it held gradients
      cudaStreamSynchronize(stream_);
      cudaFree(device_);
    }
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Status AllReduceSum(float* data, size_t n) override { return AllReduce(data, n * sizeof(float), n, ncclFloat32); }
  Status AllReduceSum(double* data, size_t n) override { return AllReduce(data, n * sizeof(double), n, ncclFloat64); }

 private:
  Status AllReduce(void* host, size_t bytes, size_t count, ncclDataType_t type) {
    if (comm_ == nullptr) return FailedPrecondition("the NCCL communicator failed earlier");
    if (count == 0) return OkStatus();
    if (bytes > capacity_) {
      if (device_ != nullptr) RETURN_IF_ERROR(Cuda(cudaFree(device_), "cudaFree"));
      device_ = nullptr;
      capacity_ = 0;
      RETURN_IF_ERROR(Cuda(cudaMalloc(&device_, bytes), "cudaMalloc"));
      capacity_ = bytes;
    }
    // `host` is pageable (locked by libsodium, not pinned by CUDA): copies to and from it
    // are synchronous. So the copy back is issued only once the all-reduce has finished,
    // which Wait polls with the deadline, else a silent peer would block it forever.
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(device_, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
    const ncclResult_t r = api_->all_reduce(device_, device_, count, type, ncclSum, comm_, stream_);
    if (r != ncclSuccess && r != ncclInProgress) return Failed("ncclAllReduce", r);
    // A nonblocking communicator may still be enqueueing: the event must follow it.
    if (r == ncclInProgress) RETURN_IF_ERROR(Wait("enqueueing an all-reduce", /*call_only=*/true));
    RETURN_IF_ERROR(Cuda(cudaEventRecord(done_, stream_), "cudaEventRecord"));
    RETURN_IF_ERROR(Wait("an all-reduce"));
    return Cuda(cudaMemcpyAsync(host, device_, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
  }

  // Polls until the all-reduce's event has fired (or, `call_only`, until the communicator
  // finished the NCCL call in progress); an NCCL error or a peer silent for the timeout
  // aborts the communicator.
  Status Wait(const char* what, bool call_only = false) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t q = api_->get_async_error(comm_, &async);
      if (q != ncclSuccess) return Failed("ncclCommGetAsyncError", q);
      if (async != ncclSuccess && async != ncclInProgress) return Failed(what, async);
      if (call_only) {
        if (async == ncclSuccess) return OkStatus();
      } else {
        const cudaError_t e = cudaEventQuery(done_);
        if (e == cudaSuccess && async == ncclSuccess) return OkStatus();
        if (e != cudaSuccess && e != cudaErrorNotReady) {
          api_->abort(comm_);
          comm_ = nullptr;
          return Cuda(e, what);
        }
      }
      if (std::chrono::steady_clock::now() > deadline) {
        api_->abort(comm_);
        comm_ = nullptr;
        return Unavailable(std::string(what) + ": a peer did not answer within " +
                           std::to_string(timeout_.count() / 1000) + " s (rank " + std::to_string(rank_) + " of " +
                           std::to_string(world_) + "; the communicator is aborted)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  Status Failed(const char* what, ncclResult_t r) {
    const std::string msg = std::string(what) + ": NCCL: " + api_->error_string(r);
    if (comm_ != nullptr) api_->abort(comm_);
    comm_ = nullptr;
    return Unavailable(msg);
  }

  const NcclApi* api_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaEvent_t done_;  // recorded after each all-reduce
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  void* device_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

bool NcclBuilt() { return true; }

Result<NcclUniqueId> NewNcclUniqueId() {
  ASSIGN_OR_RETURN(const NcclApi* api, Api());
  ncclUniqueId id;
  const ncclResult_t r = api->get_unique_id(&id);
  if (r != ncclSuccess) return Unavailable(std::string("ncclGetUniqueId: ") + api->error_string(r));
  NcclUniqueId out;
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

Result<std::unique_ptr<Collective>> JoinNccl(const NcclJoinOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) return InvalidInput("NCCL: bad rank or world size");
  if (o.net != nullptr && *o.net != '\0') RETURN_IF_ERROR(ForceNcclNetwork(o.net));
  ASSIGN_OR_RETURN(const NcclApi* api, Api());
  ncclUniqueId id;
  std::memcpy(id.internal, o.unique_id.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a silent peer can be timed out
  if (o.net != nullptr && *o.net != '\0') {
    config.netName = o.net;  // the same choice through the API (NCCL 2.28 reads it first)
    config.collnetEnable = 0;
  }
  ncclComm_t comm = nullptr;
  ncclResult_t r = api->init_rank_config(&comm, o.world_size, id, o.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) api->abort(comm);
    return Unavailable(std::string("ncclCommInitRankConfig: ") + api->error_string(r));
  }
  const auto join_timeout = o.join_timeout.count() > 0 ? o.join_timeout : o.timeout;
  const auto deadline = std::chrono::steady_clock::now() + join_timeout;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    if (api->get_async_error(comm, &state) != ncclSuccess) state = ncclInternalError;
    if (state == ncclInProgress && std::chrono::steady_clock::now() > deadline) {
      api->abort(comm);
      return Unavailable("NCCL: the other ranks did not join within " + std::to_string(join_timeout.count() / 1000) +
                         " s");
    }
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) {
    api->abort(comm);
    return Unavailable(std::string("NCCL: joining the communicator failed: ") + api->error_string(state) +
                       (o.net != nullptr && *o.net != '\0'
                            ? std::string(" (is libnccl-net-") + o.net + ".so on the library path?)"
                            : std::string()));
  }
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  Status st = Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (st.ok()) st = Cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  if (!st.ok()) {
    api->abort(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
    return st;
  }
  return std::unique_ptr<Collective>(new NcclCollective(api, comm, stream, done, o));
}

#endif  // ENCLAVE_TRAIN_NCCL

}  // namespace enclave::trainer
