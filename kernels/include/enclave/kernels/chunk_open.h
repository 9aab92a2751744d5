// Opening sealed-file chunks in bulk (docs/formats/sealed-dataset.md), both suites,
// authenticated and decrypted by the same per-chunk code on the CPU and, when built with
// CUDA and a GPU is present, on the GPU. All tags of a batch are checked before any
// chunk is decrypted, so a batch with one bad chunk releases no plaintext.
#pragma once

#include <array>
#include <cstdint>

#include "enclave/common/status.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::kernels {

// A run of consecutive chunks of one sealed file, laid out as in the file: each chunk's
// ciphertext followed by its 16-byte tag.
struct ChunkBatch {
  crypto::Suite suite = crypto::Suite::kAes256Gcm;
  uint64_t first_index = 0;       // index of the first chunk in the file
  uint64_t count = 0;             // chunks in this batch
  uint64_t file_chunk_count = 0;  // chunks in the whole file (decides the last flag)
  uint32_t chunk_size = 0;        // plaintext bytes of every chunk but the file's last
  uint64_t payload_length = 0;    // plaintext bytes of the whole file
  std::array<uint8_t, 32> header_digest{};  // every chunk's associated data

  uint64_t PlaintextSize(uint64_t index) const;  // of chunk `index` of the file
  uint64_t InputOffset(uint64_t index) const;    // within this batch's input
  uint64_t OutputOffset(uint64_t index) const;   // within this batch's output
  uint64_t InputBytes() const;
  uint64_t OutputBytes() const;
  Status Validate() const;
};

// A sealed file's chunk geometry as a batch description: suite, chunk count, chunk size,
// payload length and header digest; first_index and count left 0 for the caller.
ChunkBatch FileChunks(const crypto::SealedHeader& h);

// CPU: `in` holds batch.InputBytes(), `out` receives batch.OutputBytes().
Status OpenChunks(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* in, uint8_t* out);

// Sealing, the inverse: `in` holds batch.OutputBytes() of plaintext (chunk i at
// OutputOffset(i)), `out` receives batch.InputBytes(): each chunk's ciphertext followed by
// its tag, byte for byte the chunks crypto::SealedFileWriter writes for the same payload
// key and header digest. The CPU version is the reference for the GPU one (tests); the
// product seals on the CPU with OpenSSL (crypto/).
Status SealChunks(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* in, uint8_t* out);

// True when this build has CUDA and a GPU is visible.
bool GpuAvailable();

// GPU: `device_in` and `device_out` are device pointers; runs on the default stream and
// waits. On an authentication failure `device_out` is left untouched (never decrypted).
Status OpenChunksOnGpu(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* device_in,
                       uint8_t* device_out);

// GPU: SealChunks with device pointers (plaintext in, ciphertext and tags out); runs on
// the default stream and waits.
Status SealChunksOnGpu(const crypto::SecretBytes& payload_key, const ChunkBatch& batch, const uint8_t* device_in,
                       uint8_t* device_out);

}  // namespace enclave::kernels
