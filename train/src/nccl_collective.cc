#include "enclave/train/nccl_collective.h"

#if ENCLAVE_TRAIN_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#endif

namespace enclave::train {

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

// NCCL picks its network from the environment when the communicator is made. Only the
// encrypted plugin may carry inter-host traffic: another configured network is refused
// rather than overridden silently.
Status ForceNetwork(const char* net) {
  for (const char* var : {"NCCL_NET", "NCCL_NET_PLUGIN"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0' && std::strcmp(v, net) != 0) {
      return FailedPrecondition(std::string(var) + "=" + v + " would let NCCL use another network than the encrypted '" +
                                net + "' plugin: unset it");
    }
    if (setenv(var, net, 1) != 0) return Internal(std::string("setenv ") + var);
  }
  return OkStatus();
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(const NcclApi* api, ncclComm_t comm, cudaStream_t stream, const NcclJoinOptions& o)
      : api_(api), comm_(comm), stream_(stream), rank_(o.rank), world_(o.world_size), timeout_(o.timeout) {}
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
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(device_, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
    const ncclResult_t r = api_->all_reduce(device_, device_, count, type, ncclSum, comm_, stream_);
    if (r != ncclSuccess && r != ncclInProgress) return Failed("ncclAllReduce", r);
    // A nonblocking communicator may still be enqueueing: the copy back must follow it.
    if (r == ncclInProgress) RETURN_IF_ERROR(Wait("enqueueing an all-reduce", /*call_only=*/true));
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(host, device_, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync"));
    return Wait("an all-reduce");
  }

  // Polls until the stream is done (or, `call_only`, until the communicator finished the
  // NCCL call in progress); an NCCL error or a peer silent for the timeout aborts it.
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
        const cudaError_t e = cudaStreamQuery(stream_);
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
  if (o.net != nullptr && *o.net != '\0') RETURN_IF_ERROR(ForceNetwork(o.net));
  ASSIGN_OR_RETURN(const NcclApi* api, Api());
  ncclUniqueId id;
  std::memcpy(id.internal, o.unique_id.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a silent peer can be timed out
  ncclComm_t comm = nullptr;
  ncclResult_t r = api->init_rank_config(&comm, o.world_size, id, o.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return Unavailable(std::string("ncclCommInitRankConfig: ") + api->error_string(r));
  }
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    if (api->get_async_error(comm, &state) != ncclSuccess) state = ncclInternalError;
    if (state == ncclInProgress && std::chrono::steady_clock::now() > deadline) {
      api->abort(comm);
      return Unavailable("NCCL: the other ranks did not join within " + std::to_string(o.timeout.count() / 1000) + " s");
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
  if (Status st = Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"); !st.ok()) {
    api->abort(comm);
    return st;
  }
  return std::unique_ptr<Collective>(new NcclCollective(api, comm, stream, o));
}

#endif  // ENCLAVE_TRAIN_NCCL

}  // namespace enclave::train
