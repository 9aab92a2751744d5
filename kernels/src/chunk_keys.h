// Internal to kernels/: the per-file key material that the per-chunk code of both
// paths (chunk_open.cc, gpu_stream.cc) is built from.
#pragma once

#include "enclave/common/status.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/secret_bytes.h"
#include "enclave/kernels/chunk_math.h"

namespace enclave::kernels {

// Holds ChunkKeys and wipes them when it goes.
struct KeysHolder {
  ChunkKeys keys{};
  KeysHolder() = default;
  KeysHolder(const KeysHolder&) = delete;
  KeysHolder& operator=(const KeysHolder&) = delete;
  ~KeysHolder();
};

// AES round keys and GHASH key, or the ChaCha20 key, from a file's payload key.
Status MakeChunkKeys(const crypto::SecretBytes& payload_key, crypto::Suite suite, ChunkKeys* k);

}  // namespace enclave::kernels
