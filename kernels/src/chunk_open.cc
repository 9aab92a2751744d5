#include <algorithm>
#include <cstring>

#include "enclave/kernels/chunk_math.h"
#include "enclave/kernels/chunk_open.h"
#include "chunk_keys.h"
#if ENCLAVE_HAVE_CUDA
#include "chunk_open_gpu.h"
#endif

namespace enclave::kernels {

uint64_t ChunkBatch::PlaintextSize(uint64_t index) const {
  if (index + 1 < file_chunk_count) return chunk_size;
  return payload_length - (file_chunk_count - 1) * static_cast<uint64_t>(chunk_size);
}

uint64_t ChunkBatch::InputOffset(uint64_t index) const {
  return (index - first_index) * (static_cast<uint64_t>(chunk_size) + 16);
}

uint64_t ChunkBatch::OutputOffset(uint64_t index) const {
  return (index - first_index) * static_cast<uint64_t>(chunk_size);
}

uint64_t ChunkBatch::InputBytes() const {
  if (count == 0) return 0;
  const uint64_t last = first_index + count - 1;
  return InputOffset(last) + PlaintextSize(last) + 16;
}

uint64_t ChunkBatch::OutputBytes() const {
  if (count == 0) return 0;
  const uint64_t last = first_index + count - 1;
  return OutputOffset(last) + PlaintextSize(last);
}

ChunkBatch FileChunks(const crypto::SealedHeader& h) {
  ChunkBatch file;
  file.suite = h.params.suite;
  file.file_chunk_count = h.chunk_count;
  file.chunk_size = h.params.chunk_size;
  file.payload_length = h.params.payload_length;
  std::copy(h.header_digest.begin(), h.header_digest.end(), file.header_digest.begin());
  return file;
}

Status ChunkBatch::Validate() const {
  if (chunk_size == 0 || file_chunk_count == 0) return InvalidInput("chunk batch: empty file geometry");
  if (first_index > file_chunk_count || count > file_chunk_count - first_index) {
    return InvalidInput("chunk batch: chunks " + std::to_string(first_index) + "+" + std::to_string(count) +
                        " outside a file of " + std::to_string(file_chunk_count));
  }
  const uint64_t full = (file_chunk_count - 1) * static_cast<uint64_t>(chunk_size);
  if (payload_length < full || payload_length - full > chunk_size) {
    return InvalidInput("chunk batch: payload length does not fit the chunk count");
  }
  if (PlaintextSize(file_chunk_count - 1) >= (uint64_t{1} << 32) * 64) return InvalidInput("chunk too large");
  return OkStatus();
}

// Key material for the shared per-chunk code (chunk_keys.h).
KeysHolder::~KeysHolder() {
  volatile uint8_t* p = reinterpret_cast<volatile uint8_t*>(&keys);
  for (size_t i = 0; i < sizeof keys; ++i) p[i] = 0;
}

Status MakeChunkKeys(const crypto::SecretBytes& payload_key, crypto::Suite suite, ChunkKeys* k) {
  if (payload_key.size() != 32) return InvalidInput("payload key must be 32 bytes");
  const uint8_t* key = payload_key.ExposeSecret().data();
  k->aes = suite == crypto::Suite::kAes256Gcm;
  if (k->aes) {
    Aes256ExpandKey(key, kAesTable.t0, &k->aes_keys);
    const uint8_t zero[16] = {0};
    uint8_t h[16];
    Aes256EncryptBlock(k->aes_keys, kAesTable.t0, zero, h);
    k->aes_h = Gf128Load(h);
    volatile uint8_t* wipe = h;  // the GHASH key
    for (int i = 0; i < 16; ++i) wipe[i] = 0;
  } else {
    std::memcpy(k->chacha_key, key, 32);
  }
  return OkStatus();
}

Status OpenChunks(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* in, uint8_t* out) {
  RETURN_IF_ERROR(batch.Validate());
  KeysHolder holder;
  RETURN_IF_ERROR(MakeChunkKeys(payload_key, batch.suite, &holder.keys));
  const ChunkKeys& keys = holder.keys;
  // Every tag first: no chunk of a batch is decrypted unless all are authentic.
  for (uint64_t i = batch.first_index; i < batch.first_index + batch.count; ++i) {
    const bool last = i + 1 == batch.file_chunk_count;
    if (!ChunkTagValid(keys, kAesTable.t0, batch.header_digest.data(), i, last, in + batch.InputOffset(i),
                       batch.PlaintextSize(i))) {
      return AuthFailed("chunk " + std::to_string(i) + " failed authentication");
    }
  }
  for (uint64_t i = batch.first_index; i < batch.first_index + batch.count; ++i) {
    const bool last = i + 1 == batch.file_chunk_count;
    const uint64_t len = batch.PlaintextSize(i);
    for (uint64_t u = 0; u * kUnitBytes < len; ++u) {
      ChunkDecryptUnit(keys, kAesTable.t0, i, last, in + batch.InputOffset(i), out + batch.OutputOffset(i), len, u);
    }
  }
  return OkStatus();
}

Status SealChunks(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* in, uint8_t* out) {
  RETURN_IF_ERROR(batch.Validate());
  KeysHolder holder;
  RETURN_IF_ERROR(MakeChunkKeys(payload_key, batch.suite, &holder.keys));
  for (uint64_t i = batch.first_index; i < batch.first_index + batch.count; ++i) {
    const bool last = i + 1 == batch.file_chunk_count;
    const uint64_t len = batch.PlaintextSize(i);
    uint8_t* ct = out + batch.InputOffset(i);
    for (uint64_t u = 0; u * kUnitBytes < len; ++u) {
      ChunkDecryptUnit(holder.keys, kAesTable.t0, i, last, in + batch.OutputOffset(i), ct, len, u);
    }
    ChunkTag(holder.keys, kAesTable.t0, batch.header_digest.data(), i, last, ct, len, ct + len);
  }
  return OkStatus();
}

#if ENCLAVE_HAVE_CUDA
namespace {

// The batch as the CUDA translation unit takes it.
gpu::ChunkGeometry GeometryOf(const ChunkBatch& batch) {
  gpu::ChunkGeometry g{batch.first_index, batch.count, batch.file_chunk_count, batch.payload_length,
                       batch.chunk_size, {}};
  std::memcpy(g.aad, batch.header_digest.data(), 32);
  return g;
}

}  // namespace

bool GpuAvailable() { return gpu::DeviceAvailable(); }

Status OpenChunksOnGpu(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* device_in,
                       uint8_t* device_out) {
  RETURN_IF_ERROR(batch.Validate());
  KeysHolder holder;
  RETURN_IF_ERROR(MakeChunkKeys(payload_key, batch.suite, &holder.keys));
  const gpu::ChunkGeometry g = GeometryOf(batch);
  char error[256] = "";
  switch (gpu::OpenChunks(holder.keys, g, device_in, device_out, error, sizeof error)) {
    case gpu::OpenResult::kOk: return OkStatus();
    case gpu::OpenResult::kAuthFailed:
      return AuthFailed("a chunk in " + std::to_string(batch.first_index) + ".." +
                        std::to_string(batch.first_index + batch.count - 1) + " failed authentication");
    case gpu::OpenResult::kCudaError: return Unavailable(error);
  }
  return Internal("unreachable");
}

Status SealChunksOnGpu(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* device_in,
                       uint8_t* device_out) {
  RETURN_IF_ERROR(batch.Validate());
  KeysHolder holder;
  RETURN_IF_ERROR(MakeChunkKeys(payload_key, batch.suite, &holder.keys));
  const gpu::ChunkGeometry g = GeometryOf(batch);
  char error[256] = "";
  if (!gpu::SealChunks(holder.keys, g, device_in, device_out, error, sizeof error)) return Unavailable(error);
  return OkStatus();
}

#else
bool GpuAvailable() { return false; }

Status SealChunksOnGpu(const crypto::SecretBytes&, const ChunkBatch&, const uint8_t*, uint8_t*) {
  return Unsupported("this build has no CUDA kernels (nvcc was not found at configure time)");
}

#endif

}  // namespace enclave::kernels
