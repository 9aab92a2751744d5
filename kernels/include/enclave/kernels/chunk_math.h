// Per-chunk steps shared by the CPU and GPU paths of chunk_open.h.
#pragma once

#include <cstdint>

#include "enclave/kernels/chacha20_poly1305.h"
#include "enclave/kernels/hd.h"

namespace enclave::kernels {

// The sealed-file chunk nonce: u64 big-endian index, three zero bytes, last flag.
ENCLAVE_HD void SealedChunkNonce(uint64_t index, bool last, uint8_t nonce[12]) {
  for (int i = 0; i < 8; ++i) nonce[i] = static_cast<uint8_t>(index >> (56 - 8 * i));
  nonce[8] = nonce[9] = nonce[10] = 0;
  nonce[11] = last ? 1 : 0;
}

// Whether chunk `index` (ciphertext `ct` of `len` bytes, then its tag) is authentic.
ENCLAVE_HD bool ChunkTagValid(const uint8_t key[32], const uint8_t aad[32], uint64_t index, bool last,
                              const uint8_t* ct, uint64_t len) {
  uint8_t nonce[12], tag[16];
  SealedChunkNonce(index, last, nonce);
  ChaCha20Poly1305Tag(key, nonce, aad, 32, ct, static_cast<size_t>(len), tag);
  return TagsEqual(tag, ct + len);
}

// Decrypts 64-byte block `block` of a chunk (the AEAD's keystream starts at counter 1).
ENCLAVE_HD void ChunkDecryptBlock(const uint8_t key[32], uint64_t index, bool last, const uint8_t* ct, uint8_t* out,
                                  uint64_t len, uint64_t block) {
  uint8_t nonce[12];
  SealedChunkNonce(index, last, nonce);
  const uint64_t offset = block * 64;
  const uint64_t n = len - offset < 64 ? len - offset : 64;
  ChaCha20XorBlock(key, static_cast<uint32_t>(block + 1), nonce, ct + offset, out + offset, static_cast<size_t>(n));
}

}  // namespace enclave::kernels
