#include "gpu_records.h"

#if ENCLAVE_NET_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstring>
#include <new>

#include "enclave/kernels/net_records_gpu.h"
#endif

namespace enclave::net {

#if !ENCLAVE_NET_HAVE_CUDA

const RecordProtection* GpuRecordProtection(std::string* why) {
  *why = "this plugin was built without CUDA";
  return nullptr;
}

#else

namespace {

constexpr uint64_t kRecordBytes = kMaxRecordPayload + kRecordTagBytes;

Status CudaStatus(cudaError_t e, const char* call) {
  return Unavailable(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
#define ENCLAVE_CUDA_RETURN(call)                                                 \
  do {                                                                            \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) return CudaStatus(e_, #call); \
  } while (0)

// The expanded record key in locked memory (SecretBytes wipes it).
Result<crypto::SecretBytes> DeviceKeyOf(const crypto::SecretBytes& data_key) {
  if (data_key.size() != 32) return InvalidInput("GPU records: data key is not 32 bytes");
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(sizeof(kernels::NetRecordDeviceKey)));
  auto* k = new (out.ExposeSecretMutable().data()) kernels::NetRecordDeviceKey;
  kernels::NetRecordDeviceKeyOf(data_key.ExposeSecret().data(), k);
  return out;
}

// One socket's GPU resources, used by its worker thread only.
class GpuLane {
 public:
  GpuLane() = default;
  GpuLane(const GpuLane&) = delete;
  GpuLane& operator=(const GpuLane&) = delete;
  ~GpuLane() {
    if (device_ < 0) return;
    int previous = -1;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess;
    cudaSetDevice(device_);
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    cudaFree(record_);
    cudaFree(scratch_);
    cudaFree(ok_);
    cudaFreeHost(staging_);
    cudaFreeHost(host_ok_);
    if (restore) cudaSetDevice(previous);
  }

  // Resources on the device of `buffer`, made at the first call; a later buffer on
  // another device is refused.
  Status Ready(const void* buffer) {
    cudaPointerAttributes attr{};
    if (device_ >= 0 && !ready_) return Unavailable("GPU records: this socket's GPU resources could not be made");
    if (buffer == nullptr) {  // an empty message without a buffer: any device will do
      if (device_ >= 0) return OkStatus();
      ENCLAVE_CUDA_RETURN(cudaGetDevice(&attr.device));
    } else {
      ENCLAVE_CUDA_RETURN(cudaPointerGetAttributes(&attr, buffer));
      if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
        return InvalidInput("GPU records: the buffer is not GPU memory");
      }
    }
    if (device_ >= 0) {
      if (attr.device != device_) {
        return InvalidInput("GPU records: a buffer on GPU " + std::to_string(attr.device) +
                            ", the connection's first was on GPU " + std::to_string(device_));
      }
      return OkStatus();
    }
    ENCLAVE_CUDA_RETURN(cudaSetDevice(attr.device));
    device_ = attr.device;
    ENCLAVE_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ENCLAVE_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&record_), kRecordBytes));
    ENCLAVE_CUDA_RETURN(cudaMalloc(&scratch_, kernels::gpu::NetRecordScratchBytes(kMaxRecordPayload)));
    ENCLAVE_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&ok_), sizeof(uint32_t)));
    ENCLAVE_CUDA_RETURN(cudaHostAlloc(reinterpret_cast<void**>(&staging_), kRecordHeaderBytes + kRecordBytes,
                                      cudaHostAllocDefault));
    ENCLAVE_CUDA_RETURN(cudaHostAlloc(reinterpret_cast<void**>(&host_ok_), sizeof(uint32_t), cudaHostAllocDefault));
    ready_ = true;
    return OkStatus();
  }

  Status Wait() {
    ENCLAVE_CUDA_RETURN(cudaStreamSynchronize(stream_));
    return OkStatus();
  }

  cudaStream_t stream() const { return stream_; }
  uint8_t* record() const { return record_; }    // device: ciphertext || tag
  void* scratch() const { return scratch_; }     // device: the tag segments' sums
  uint32_t* ok() const { return ok_; }           // device: the tag check's result
  uint8_t* staging() const { return staging_; }  // pinned: header || ciphertext || tag
  uint32_t* host_ok() const { return host_ok_; }

 private:
  int device_ = -1;
  bool ready_ = false;  // everything below was made
  cudaStream_t stream_ = nullptr;
  uint8_t* record_ = nullptr;
  void* scratch_ = nullptr;
  uint32_t* ok_ = nullptr;
  uint8_t* staging_ = nullptr;
  uint32_t* host_ok_ = nullptr;
};

kernels::gpu::NetRecordHeader HeaderOf(const RecordHeaderBytes& bytes) {
  kernels::gpu::NetRecordHeader h;
  std::memcpy(h.bytes, bytes.data(), sizeof h.bytes);
  return h;
}

const kernels::NetRecordDeviceKey& KeyIn(const crypto::SecretBytes& s) {
  return *reinterpret_cast<const kernels::NetRecordDeviceKey*>(s.ExposeSecret().data());
}

class GpuSender final : public RecordSender {
 public:
  explicit GpuSender(crypto::SecretBytes key) : key_(std::move(key)) {}
  Status Send(int fd, const RecordHeaderBytes& header, uint64_t seq, const uint8_t* data, uint32_t len) override {
    RETURN_IF_ERROR(lane_.Ready(data));
    char error[256] = "";
    if (!kernels::gpu::EnqueueSealNetRecord(KeyIn(key_), HeaderOf(header), seq, data, len, lane_.record(),
                                            lane_.scratch(), lane_.stream(), error, sizeof error)) {
      return Unavailable(std::string("GPU records: ") + error);
    }
    ENCLAVE_CUDA_RETURN(cudaMemcpyAsync(lane_.staging() + kRecordHeaderBytes, lane_.record(), len + kRecordTagBytes,
                                        cudaMemcpyDeviceToHost, lane_.stream()));
    std::memcpy(lane_.staging(), header.data(), header.size());
    RETURN_IF_ERROR(lane_.Wait());
    return SendAll(fd, lane_.staging(), kRecordHeaderBytes + len + kRecordTagBytes);
  }

 private:
  crypto::SecretBytes key_;
  GpuLane lane_;
};

class GpuReceiver final : public RecordReceiver {
 public:
  explicit GpuReceiver(crypto::SecretBytes key) : key_(std::move(key)) {}
  Status Receive(int fd, const RecordHeaderBytes& header, uint64_t seq, uint8_t* dest, uint32_t len) override {
    RETURN_IF_ERROR(lane_.Ready(dest));
    RETURN_IF_ERROR(RecvAll(fd, lane_.staging(), len + kRecordTagBytes));
    ENCLAVE_CUDA_RETURN(cudaMemcpyAsync(lane_.record(), lane_.staging(), len + kRecordTagBytes,
                                        cudaMemcpyHostToDevice, lane_.stream()));
    char error[256] = "";
    if (!kernels::gpu::EnqueueOpenNetRecord(KeyIn(key_), HeaderOf(header), seq, lane_.record(), len, dest,
                                            lane_.scratch(), lane_.ok(), lane_.stream(), error, sizeof error)) {
      return Unavailable(std::string("GPU records: ") + error);
    }
    ENCLAVE_CUDA_RETURN(
        cudaMemcpyAsync(lane_.host_ok(), lane_.ok(), sizeof(uint32_t), cudaMemcpyDeviceToHost, lane_.stream()));
    RETURN_IF_ERROR(lane_.Wait());
    if (*lane_.host_ok() != 1) {
      return AuthFailed("record " + std::to_string(seq) + ": authentication failed (checked on the GPU)");
    }
    return OkStatus();
  }

 private:
  crypto::SecretBytes key_;
  GpuLane lane_;
};

class GpuRecords final : public RecordProtection {
 public:
  Result<std::unique_ptr<RecordSender>> MakeSender(const crypto::SecretBytes& data_key) const override {
    ASSIGN_OR_RETURN(crypto::SecretBytes key, DeviceKeyOf(data_key));
    return std::unique_ptr<RecordSender>(new GpuSender(std::move(key)));
  }
  Result<std::unique_ptr<RecordReceiver>> MakeReceiver(const crypto::SecretBytes& data_key) const override {
    ASSIGN_OR_RETURN(crypto::SecretBytes key, DeviceKeyOf(data_key));
    return std::unique_ptr<RecordReceiver>(new GpuReceiver(std::move(key)));
  }
};

}  // namespace

const RecordProtection* GpuRecordProtection(std::string* why) {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    *why = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e) : "no CUDA device";
    return nullptr;
  }
  static const GpuRecords records;
  return &records;
}

#endif

}  // namespace enclave::net
