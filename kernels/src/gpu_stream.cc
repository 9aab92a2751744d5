#include "enclave/kernels/gpu_stream.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "chunk_keys.h"
#include "enclave/crypto/hash.h"
#if ENCLAVE_HAVE_CUDA
#include <cuda_runtime.h>

#include "enclave/kernels/cuda_status.h"

#include "chunk_open_gpu.h"
#endif

namespace enclave::kernels {

#if ENCLAVE_HAVE_CUDA

// The round keys and GHASH tables live as long as the opener: locked memory, zeroized
// when freed. (sizeof is a multiple of 8, so sodium_malloc returns it 8-byte aligned.)
struct GpuChunkOpener::Keys {
  crypto::SecretBytes mem;
  gpu::DeviceKeys& device() { return *reinterpret_cast<gpu::DeviceKeys*>(mem.ExposeSecretMutable().data()); }
};
static_assert(sizeof(gpu::DeviceKeys) % 8 == 0 && alignof(gpu::DeviceKeys) <= 8 &&
              std::is_trivially_copyable_v<gpu::DeviceKeys>);

Result<std::unique_ptr<GpuChunkOpener>> GpuChunkOpener::Create(const crypto::SecretBytes& payload_key,
                                                               crypto::Suite suite) {
  if (!gpu::DeviceAvailable()) return Unavailable("no CUDA device visible");
  std::unique_ptr<GpuChunkOpener> o(new GpuChunkOpener());
  o->suite_ = suite;
  o->keys_ = std::make_unique<Keys>();
  ASSIGN_OR_RETURN(o->keys_->mem, crypto::SecretBytes::Create(sizeof(gpu::DeviceKeys)));
  {
    KeysHolder holder;
    RETURN_IF_ERROR(MakeChunkKeys(payload_key, suite, &holder.keys));
    gpu::MakeDeviceKeys(holder.keys, &o->keys_->device());
  }
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&o->device_bad_, sizeof *o->device_bad_), "cudaMalloc(failure slot)"));
  RETURN_IF_ERROR(o->Reset());
  return o;
}

GpuChunkOpener::~GpuChunkOpener() {
  if (device_bad_ != nullptr) cudaFree(device_bad_);
}

Status GpuChunkOpener::Enqueue(const ChunkBatch& batch, const uint8_t* device_in, uint8_t* device_out,
                               CUstream_st* stream) {
  return EnqueueMarked(batch, device_in, device_out, stream, nullptr);
}

Status GpuChunkOpener::EnqueueMarked(const ChunkBatch& batch, const uint8_t* device_in, uint8_t* device_out,
                                     CUstream_st* stream, CUevent_st* const* marks) {
  RETURN_IF_ERROR(batch.Validate());
  if (batch.suite != suite_) return InvalidInput("chunk batch: suite differs from the opener's");
  gpu::ChunkGeometry g{batch.first_index, batch.count, batch.file_chunk_count, batch.payload_length,
                       batch.chunk_size, {}};
  std::memcpy(g.aad, batch.header_digest.data(), 32);
  char error[256] = "";
  if (!gpu::EnqueueOpenChunks(keys_->device(), g, device_in, device_out, device_bad_, stream, error, sizeof error,
                              marks)) {
    return Unavailable(error);
  }
  return OkStatus();
}

Result<GpuChunkOpener::KernelTimes> GpuChunkOpener::TimeKernels(const ChunkBatch& batch, const uint8_t* device_in,
                                                                uint8_t* device_out) {
  cudaStream_t stream = nullptr;
  cudaEvent_t marks[4] = {};
  auto release = [&] {
    for (cudaEvent_t e : marks) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  };
  Status s = CudaStatus(cudaStreamCreate(&stream), "cudaStreamCreate");
  for (cudaEvent_t& e : marks) {
    if (s.ok()) s = CudaStatus(cudaEventCreate(&e), "cudaEventCreate");
  }
  if (s.ok()) s = EnqueueMarked(batch, device_in, device_out, stream, marks);
  if (s.ok()) s = CudaStatus(cudaEventSynchronize(marks[3]), "cudaEventSynchronize");
  KernelTimes t;
  float* out[3] = {&t.tag_segments_ms, &t.tag_finish_ms, &t.decrypt_ms};
  for (int i = 0; i < 3 && s.ok(); ++i) {
    s = CudaStatus(cudaEventElapsedTime(out[i], marks[i], marks[i + 1]), "cudaEventElapsedTime");
  }
  release();
  RETURN_IF_ERROR(s);
  return t;
}

Status GpuChunkOpener::Check() {
  RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  unsigned long long bad = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(&bad, device_bad_, sizeof bad, cudaMemcpyDeviceToHost), "cudaMemcpy"));
  if (bad != gpu::kNoBadChunk) return AuthFailed("chunk " + std::to_string(bad) + " failed authentication");
  return OkStatus();
}

Status GpuChunkOpener::Reset() {
  RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  return CudaStatus(cudaMemset(device_bad_, 0xff, sizeof *device_bad_), "cudaMemset(failure slot)");
}

// A staging slot: a pinned host buffer and a device buffer for one batch of chunks.
struct GpuSealedStream::Slot {
  uint8_t* pinned = nullptr;
  uint8_t* device_in = nullptr;
  cudaEvent_t copied = nullptr;    // on the copy stream: pinned free again, device_in filled
  cudaEvent_t consumed = nullptr;  // on the compute stream: device_in free again
  bool used = false;
  ~Slot() {
    if (copied != nullptr) cudaEventDestroy(copied);
    if (consumed != nullptr) cudaEventDestroy(consumed);
    if (device_in != nullptr) cudaFree(device_in);
    if (pinned != nullptr) cudaFreeHost(pinned);
  }
};

Result<std::unique_ptr<GpuSealedStream>> GpuSealedStream::Open(const std::string& path,
                                                               const crypto::SecretBytes& dek,
                                                               const GpuStreamOptions& options) {
  if (options.depth < 1 || options.depth > 16 || options.read_threads < 1 || options.read_threads > 64 ||
      options.batch_bytes == 0) {
    return InvalidInput("gpu stream options: depth 1..16, read threads 1..64, batch bytes > 0");
  }
  // Header structure, file size, key commitment and header tag: the CPU library's checks.
  ASSIGN_OR_RETURN(auto reader, crypto::SealedFileReader::Open(path));
  RETURN_IF_ERROR(reader->Unlock(dek));
  std::unique_ptr<GpuSealedStream> s(new GpuSealedStream());
  s->header_ = reader->header();
  s->options_ = options;
  ASSIGN_OR_RETURN(auto file, FileReader::Open(path));
  if (file.size() != s->header_.FileSize()) return AuthFailed(path + ": file size changed since its header was read");
  s->file_ = std::make_unique<FileReader>(std::move(file));
  ASSIGN_OR_RETURN(auto payload_key,
                   crypto::HkdfSha256(dek, s->header_.salt, "enclave sealed-file v1 payload key", 32));
  ASSIGN_OR_RETURN(s->opener_, GpuChunkOpener::Create(payload_key, s->header_.params.suite));
  const uint64_t stored = static_cast<uint64_t>(s->header_.params.chunk_size) + 16;
  s->chunks_per_batch_ = std::max<uint64_t>(1, options.batch_bytes / stored);
  s->chunks_per_batch_ = std::min(s->chunks_per_batch_, s->header_.chunk_count);
  const uint64_t buffer = s->chunks_per_batch_ * stored;
  s->slots_ = std::make_unique<Slot[]>(static_cast<size_t>(options.depth));
  for (int i = 0; i < options.depth; ++i) {
    Slot& slot = s->slots_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&slot.pinned, buffer, cudaHostAllocDefault), "cudaHostAlloc"));
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&slot.device_in, buffer), "cudaMalloc(staging)"));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming), "cudaEventCreate"));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&slot.consumed, cudaEventDisableTiming), "cudaEventCreate"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&s->copy_stream_), "cudaStreamCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&s->compute_stream_), "cudaStreamCreate"));
  return s;
}

GpuSealedStream::~GpuSealedStream() {
  if (slots_ != nullptr) cudaDeviceSynchronize();  // nothing may still read a buffer being freed
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (compute_stream_ != nullptr) cudaStreamDestroy(compute_stream_);
}

uint64_t GpuSealedStream::OutputBytes(uint64_t first, uint64_t count) const {
  if (count == 0) return 0;
  const uint64_t last = first + count - 1;
  return (last - first) * static_cast<uint64_t>(header_.params.chunk_size) + header_.ChunkPlaintextSize(last);
}

Status GpuSealedStream::ReadChunks(uint64_t first, uint64_t count, uint8_t* device_out) {
  if (first > header_.chunk_count || count > header_.chunk_count - first) {
    return InvalidInput("chunks " + std::to_string(first) + "+" + std::to_string(count) + " outside a file of " +
                        std::to_string(header_.chunk_count));
  }
  Status s = Run(first, count, device_out);
  if (!s.ok()) {  // fail closed: whatever was decrypted before the failure is wiped
    cudaStreamSynchronize(copy_stream_);
    cudaStreamSynchronize(compute_stream_);
    const uint64_t bytes = OutputBytes(first, count);
    Status wiped = CudaStatus(cudaMemset(device_out, 0, bytes), "cudaMemset(output)");
    if (wiped.ok()) wiped = CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (!wiped.ok()) return Internal("could not wipe the output after: " + s.message() + "; " + wiped.message());
  }
  return s;
}

Status GpuSealedStream::Run(uint64_t first, uint64_t count, uint8_t* device_out) {
  RETURN_IF_ERROR(opener_->Reset());
  ChunkBatch batch = FileChunks(header_);
  uint64_t k = 0;
  for (uint64_t next = first; next < first + count; next += batch.count, ++k) {
    Slot& slot = slots_[static_cast<size_t>(k % static_cast<uint64_t>(options_.depth))];
    batch.first_index = next;
    batch.count = std::min(chunks_per_batch_, first + count - next);
    // The pinned buffer may be refilled once its last copy has left it.
    if (slot.used) RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(slot.copied), "cudaEventSynchronize"));
    const uint64_t bytes = batch.InputBytes(), offset = header_.ChunkOffset(next);
    const uint64_t part = (bytes + static_cast<uint64_t>(options_.read_threads) - 1) /
                          static_cast<uint64_t>(options_.read_threads);
    std::vector<Status> read(static_cast<size_t>(options_.read_threads));
    {
      std::vector<std::jthread> readers;
      for (size_t t = 0; t < read.size(); ++t) {
        const uint64_t from = t * part;
        if (from >= bytes) break;
        const uint64_t n = std::min(part, bytes - from);
        readers.emplace_back([&, t, from, n] { read[t] = file_->ReadAt(offset + from, slot.pinned + from, n); });
      }
    }
    for (const Status& r : read) RETURN_IF_ERROR(r);
    // All copies on one stream, all kernels on another: copies that share a stream with
    // kernels ran about 4% slower on an H200 (docs/gpu.md). The copy into a slot's device
    // buffer waits until the kernels of the slot's previous batch are done with it.
    if (slot.used) {
      RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(copy_stream_, slot.consumed, 0), "cudaStreamWaitEvent"));
    }
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(slot.device_in, slot.pinned, bytes, cudaMemcpyHostToDevice,
                                               copy_stream_),
                               "cudaMemcpyAsync"));
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(slot.copied, copy_stream_), "cudaEventRecord"));
    slot.used = true;
    RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(compute_stream_, slot.copied, 0), "cudaStreamWaitEvent"));
    RETURN_IF_ERROR(opener_->Enqueue(batch, slot.device_in, device_out + (next - first) * header_.params.chunk_size,
                                     compute_stream_));
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(slot.consumed, compute_stream_), "cudaEventRecord"));
  }
  return opener_->Check();  // waits for every stream
}

#else  // built without CUDA

struct GpuChunkOpener::Keys {};
struct GpuSealedStream::Slot {};

Result<std::unique_ptr<GpuChunkOpener>> GpuChunkOpener::Create(const crypto::SecretBytes&, crypto::Suite) {
  return Unsupported("this build has no CUDA kernels (nvcc was not found at configure time)");
}
GpuChunkOpener::~GpuChunkOpener() = default;
Status GpuChunkOpener::Enqueue(const ChunkBatch&, const uint8_t*, uint8_t*, CUstream_st*) {
  return Unsupported("no CUDA");
}
Status GpuChunkOpener::EnqueueMarked(const ChunkBatch&, const uint8_t*, uint8_t*, CUstream_st*, CUevent_st* const*) {
  return Unsupported("no CUDA");
}
Result<GpuChunkOpener::KernelTimes> GpuChunkOpener::TimeKernels(const ChunkBatch&, const uint8_t*, uint8_t*) {
  return Unsupported("no CUDA");
}
Status GpuChunkOpener::Check() { return Unsupported("no CUDA"); }
Status GpuChunkOpener::Reset() { return Unsupported("no CUDA"); }

Result<std::unique_ptr<GpuSealedStream>> GpuSealedStream::Open(const std::string&, const crypto::SecretBytes&,
                                                               const GpuStreamOptions&) {
  return Unsupported("this build has no CUDA kernels (nvcc was not found at configure time)");
}
GpuSealedStream::~GpuSealedStream() = default;
uint64_t GpuSealedStream::OutputBytes(uint64_t, uint64_t) const { return 0; }
Status GpuSealedStream::ReadChunks(uint64_t, uint64_t, uint8_t*) { return Unsupported("no CUDA"); }
Status GpuSealedStream::Run(uint64_t, uint64_t, uint8_t*) { return Unsupported("no CUDA"); }

#endif

}  // namespace enclave::kernels
