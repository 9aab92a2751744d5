// Sealed data straight into GPU memory. GpuChunkOpener opens chunk batches on a CUDA
// stream without waiting; GpuSealedStream reads a sealed file in batches through pinned
// host buffers, copies them to the device and opens them there, `depth` batches in flight
// on as many streams, so that reading, copying and decrypting overlap. Plaintext exists
// only in device memory; the host only ever holds ciphertext. A chunk failing
// authentication stops every later decryption (a device-side failure slot that each
// decrypt kernel checks) and the whole output range is zeroed before the error returns.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "enclave/common/status.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/crypto/secret_bytes.h"
#include "enclave/kernels/chunk_open.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers
struct CUevent_st;   // cudaEvent_t

namespace enclave::kernels {

// One file's chunk keys on the GPU side, and a device failure slot shared by every batch.
class GpuChunkOpener {
 public:
  static Result<std::unique_ptr<GpuChunkOpener>> Create(const crypto::SecretBytes& payload_key, crypto::Suite suite);
  ~GpuChunkOpener();
  GpuChunkOpener(const GpuChunkOpener&) = delete;
  GpuChunkOpener& operator=(const GpuChunkOpener&) = delete;

  // Enqueues on `stream`: verify every tag of `batch` (device_in: batch.InputBytes()),
  // then decrypt into device_out (batch.OutputBytes()) unless a chunk of this or any
  // earlier batch failed. Returns without waiting.
  Status Enqueue(const ChunkBatch& batch, const uint8_t* device_in, uint8_t* device_out, CUstream_st* stream);
  // Waits for the device, then: OK, or AuthFailed naming the lowest failing chunk seen
  // since the last Reset. The caller zeroes what it asked to be decrypted on failure.
  Status Check();
  // Clears the failure slot (waits for the device first).
  Status Reset();

  // For benchmarks: runs `batch` as Enqueue does on a stream of its own, waits, and
  // returns the milliseconds (CUDA events) of its three kernels.
  struct KernelTimes {
    float tag_segments_ms = 0, tag_finish_ms = 0, decrypt_ms = 0;
  };
  Result<KernelTimes> TimeKernels(const ChunkBatch& batch, const uint8_t* device_in, uint8_t* device_out);

 private:
  GpuChunkOpener() = default;
  Status EnqueueMarked(const ChunkBatch& batch, const uint8_t* device_in, uint8_t* device_out, CUstream_st* stream,
                       CUevent_st* const* marks);
  struct Keys;
  std::unique_ptr<Keys> keys_;
  crypto::Suite suite_ = crypto::Suite::kAes256Gcm;
  unsigned long long* device_bad_ = nullptr;
};

struct GpuStreamOptions {
  uint64_t batch_bytes = 64ull << 20;  // ciphertext bytes per batch (rounded to whole chunks)
  int depth = 3;                       // batches in flight: pinned and device staging buffers
  int read_threads = 4;                // parallel preads per batch
};

class GpuSealedStream {
 public:
  // Reads the header, checks the file size, the key commitment and the header tag
  // (crypto::SealedFileReader), then sets up the pinned and device staging buffers.
  static Result<std::unique_ptr<GpuSealedStream>> Open(const std::string& path, const crypto::SecretBytes& dek,
                                                       const GpuStreamOptions& options = {});
  ~GpuSealedStream();
  GpuSealedStream(const GpuSealedStream&) = delete;
  GpuSealedStream& operator=(const GpuSealedStream&) = delete;

  const crypto::SealedHeader& header() const { return header_; }
  // Plaintext bytes of chunks [first, first + count).
  uint64_t OutputBytes(uint64_t first, uint64_t count) const;

  // Opens chunks [first, first + count) into `device_out` (device memory of
  // OutputBytes(first, count) bytes), pipelined; returns when all is done. On any
  // failure the whole output range is zeroed; AuthFailed names the first bad chunk.
  Status ReadChunks(uint64_t first, uint64_t count, uint8_t* device_out);
  Status ReadAll(uint8_t* device_out) { return ReadChunks(0, header_.chunk_count, device_out); }

 private:
  GpuSealedStream() = default;
  Status Run(uint64_t first, uint64_t count, uint8_t* device_out);
  struct Slot;
  crypto::SealedHeader header_;
  std::unique_ptr<FileReader> file_;
  std::unique_ptr<GpuChunkOpener> opener_;
  GpuStreamOptions options_;
  uint64_t chunks_per_batch_ = 0;
  std::unique_ptr<Slot[]> slots_;
  CUstream_st* copy_stream_ = nullptr;     // every host-to-device copy, in order
  CUstream_st* compute_stream_ = nullptr;  // every batch's kernels, in order
};

}  // namespace enclave::kernels
