// Test-only: the AEAD primitives of aes256_gcm.h and chacha20_poly1305.h run on the GPU
// on arbitrary (key, nonce, aad, ciphertext), so the device build can be checked against
// published vectors. A plain C++17 header: gpu_vectors.cu includes it too.
#pragma once

#include <cstddef>
#include <cstdint>

namespace enclave::kernels::testing {

// Computes the tag and the plaintext of `ct` on the GPU, one thread. Returns false with a
// line in `error` when a CUDA call fails.
bool GpuAeadOpen(bool aes, const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad, size_t aad_len,
                 const uint8_t* ct, size_t len, uint8_t tag[16], uint8_t* plain, char* error, size_t error_size);

}  // namespace enclave::kernels::testing
