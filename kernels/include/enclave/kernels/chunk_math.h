// Per-chunk steps shared by the CPU and GPU paths of chunk_open.h, for both suites.
// Decryption works in 64-byte units (one ChaCha20 block, four AES blocks), so one GPU
// thread per unit serves either suite.
#pragma once

#include <cstdint>

#include "enclave/kernels/aes256_gcm.h"
#include "enclave/kernels/chacha20_poly1305.h"
#include "enclave/kernels/hd.h"

namespace enclave::kernels {

inline constexpr uint64_t kUnitBytes = 64;

// The sealed-file chunk nonce: u64 big-endian index, three zero bytes, last flag.
ENCLAVE_HD void SealedChunkNonce(uint64_t index, bool last, uint8_t nonce[12]) {
  for (int i = 0; i < 8; ++i) nonce[i] = static_cast<uint8_t>(index >> (56 - 8 * i));
  nonce[8] = nonce[9] = nonce[10] = 0;
  nonce[11] = last ? 1 : 0;
}

// Everything a thread needs to open chunks of one file under one suite. Built on the
// host (MakeChunkKeys in chunk_open.cc), passed to kernels by value.
struct ChunkKeys {
  bool aes;                  // AES-256-GCM, else ChaCha20-Poly1305
  uint8_t chacha_key[32];    // ChaCha20-Poly1305 key
  Aes256RoundKeys aes_keys;  // AES-256 round keys
  Gf128 aes_h;               // GHASH key E_K(0)
};

// The tag of chunk `index` over its ciphertext `ct` (`len` bytes).
ENCLAVE_HD void ChunkTag(const ChunkKeys& k, const uint32_t* te, const uint8_t aad[32], uint64_t index, bool last,
                         const uint8_t* ct, uint64_t len, uint8_t tag[16]) {
  uint8_t nonce[12];
  SealedChunkNonce(index, last, nonce);
  if (k.aes) {
    Aes256GcmTag(k.aes_keys, te, k.aes_h, nonce, aad, 32, ct, static_cast<size_t>(len), tag);
  } else {
    ChaCha20Poly1305Tag(k.chacha_key, nonce, aad, 32, ct, static_cast<size_t>(len), tag);
  }
}

// Whether chunk `index` (ciphertext `ct` of `len` bytes, then its tag) is authentic.
ENCLAVE_HD bool ChunkTagValid(const ChunkKeys& k, const uint32_t* te, const uint8_t aad[32], uint64_t index,
                              bool last, const uint8_t* ct, uint64_t len) {
  uint8_t tag[16];
  ChunkTag(k, te, aad, index, last, ct, len, tag);
  return TagsEqual(tag, ct + len);
}

// Decrypts 64-byte unit `unit` of a chunk of `len` bytes. It XORs the keystream, so the
// same call encrypts (`ct` is then the plaintext and `out` the ciphertext).
ENCLAVE_HD void ChunkDecryptUnit(const ChunkKeys& k, const uint32_t* te, uint64_t index, bool last, const uint8_t* ct,
                                 uint8_t* out, uint64_t len, uint64_t unit) {
  uint8_t nonce[12];
  SealedChunkNonce(index, last, nonce);
  const uint64_t offset = unit * kUnitBytes;
  const uint64_t n = len - offset < kUnitBytes ? len - offset : kUnitBytes;
  if (!k.aes) {  // the AEAD's keystream starts at block counter 1
    ChaCha20XorBlock(k.chacha_key, static_cast<uint32_t>(unit + 1), nonce, ct + offset, out + offset,
                     static_cast<size_t>(n));
    return;
  }
  for (uint64_t b = 0; b * 16 < n; ++b) {
    const uint64_t m = n - b * 16 < 16 ? n - b * 16 : 16;
    Aes256GcmXorBlock(k.aes_keys, te, nonce, static_cast<uint32_t>(unit * 4 + b), ct + offset + b * 16,
                      out + offset + b * 16, static_cast<size_t>(m));
  }
}

}  // namespace enclave::kernels
