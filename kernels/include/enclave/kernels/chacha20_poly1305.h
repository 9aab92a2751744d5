// ChaCha20-Poly1305 (RFC 8439) as host+device functions: the GPU opens sealed-dataset
// chunks with exactly this code, and the CPU tests check it against OpenSSL and the
// RFC vectors. Constant time: no branch or index depends on key or data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "enclave/kernels/hd.h"
#include "enclave/kernels/words.h"

namespace enclave::kernels {

#define ENCLAVE_CHACHA_QR(a, b, c, d) \
  a += b;                             \
  d = Rotl32(d ^ a, 16);              \
  c += d;                             \
  b = Rotl32(b ^ c, 12);              \
  a += b;                             \
  d = Rotl32(d ^ a, 8);               \
  c += d;                             \
  b = Rotl32(b ^ c, 7)

// One 64-byte keystream block (RFC 8439 section 2.3) as 16 little-endian words.
ENCLAVE_HD void ChaCha20BlockWords(const uint8_t key[32], uint32_t counter, const uint8_t nonce[12], uint32_t out[16]) {
  uint32_t s[16];
  s[0] = 0x61707865;
  s[1] = 0x3320646e;
  s[2] = 0x79622d32;
  s[3] = 0x6b206574;
  for (int i = 0; i < 8; ++i) s[4 + i] = Load32Le(key + 4 * i);
  s[12] = counter;
  for (int i = 0; i < 3; ++i) s[13 + i] = Load32Le(nonce + 4 * i);
  uint32_t* x = out;
  for (int i = 0; i < 16; ++i) x[i] = s[i];
  for (int round = 0; round < 10; ++round) {
    ENCLAVE_CHACHA_QR(x[0], x[4], x[8], x[12]);
    ENCLAVE_CHACHA_QR(x[1], x[5], x[9], x[13]);
    ENCLAVE_CHACHA_QR(x[2], x[6], x[10], x[14]);
    ENCLAVE_CHACHA_QR(x[3], x[7], x[11], x[15]);
    ENCLAVE_CHACHA_QR(x[0], x[5], x[10], x[15]);
    ENCLAVE_CHACHA_QR(x[1], x[6], x[11], x[12]);
    ENCLAVE_CHACHA_QR(x[2], x[7], x[8], x[13]);
    ENCLAVE_CHACHA_QR(x[3], x[4], x[9], x[14]);
  }
  for (int i = 0; i < 16; ++i) x[i] += s[i];
}

// The same block as bytes.
ENCLAVE_HD void ChaCha20Block(const uint8_t key[32], uint32_t counter, const uint8_t nonce[12], uint8_t out[64]) {
  uint32_t w[16];
  ChaCha20BlockWords(key, counter, nonce, w);
  for (int i = 0; i < 16; ++i) Store32Le(out + 4 * i, w[i]);
  for (int i = 0; i < 16; ++i) w[i] = 0;
}
#undef ENCLAVE_CHACHA_QR

// XORs the keystream of block `counter` into up to 64 bytes.
ENCLAVE_HD void ChaCha20XorBlock(const uint8_t key[32], uint32_t counter, const uint8_t nonce[12], const uint8_t* in,
                                 uint8_t* out, size_t len) {
  uint32_t ks[16];
  ChaCha20BlockWords(key, counter, nonce, ks);
  if (len == 64) {  // the common case: word accesses
    for (int q = 0; q < 4; ++q) {
      uint32_t w[4];
      Load16Le(in + 16 * q, w);
      for (int i = 0; i < 4; ++i) w[i] ^= ks[4 * q + i];
      Store16Le(out + 16 * q, w);
    }
  } else {  // constant indices only (unrolled): ks stays in registers on the GPU
    for (int i = 0; i < 64; ++i) {
      if (static_cast<size_t>(i) < len) out[i] = static_cast<uint8_t>(in[i] ^ (ks[i / 4] >> (8 * (i % 4))));
    }
  }
  for (int i = 0; i < 16; ++i) ks[i] = 0;
}

// Poly1305 (RFC 8439 section 2.5) with 26-bit limbs: 32x32->64 multiplies only, which
// the GPU does natively.
struct Poly1305 {
  uint32_t r[5], h[5], pad[4];

  ENCLAVE_HD void Init(const uint8_t key[32]) {
    r[0] = Load32Le(key + 0) & 0x3ffffff;
    r[1] = (Load32Le(key + 3) >> 2) & 0x3ffff03;
    r[2] = (Load32Le(key + 6) >> 4) & 0x3ffc0ff;
    r[3] = (Load32Le(key + 9) >> 6) & 0x3f03fff;
    r[4] = (Load32Le(key + 12) >> 8) & 0x00fffff;
    for (int i = 0; i < 5; ++i) h[i] = 0;
    for (int i = 0; i < 4; ++i) pad[i] = Load32Le(key + 16 + 4 * i);
  }

  // One 16-byte block; `hibit` is 1 << 24 for a full block, 0 for the padded last one.
  ENCLAVE_HD void Block(const uint8_t m[16], uint32_t hibit) {
    uint32_t w[4];
    Load16Le(m, w);
    BlockWords(w, hibit);
  }

  // The block as four little-endian words, cut into 26-bit limbs.
  ENCLAVE_HD void BlockWords(const uint32_t w[4], uint32_t hibit) {
    const uint32_t s1 = r[1] * 5, s2 = r[2] * 5, s3 = r[3] * 5, s4 = r[4] * 5;
    h[0] += w[0] & 0x3ffffff;
    h[1] += ((w[0] >> 26) | (w[1] << 6)) & 0x3ffffff;
    h[2] += ((w[1] >> 20) | (w[2] << 12)) & 0x3ffffff;
    h[3] += ((w[2] >> 14) | (w[3] << 18)) & 0x3ffffff;
    h[4] += (w[3] >> 8) | hibit;
    uint64_t d0 = (uint64_t)h[0] * r[0] + (uint64_t)h[1] * s4 + (uint64_t)h[2] * s3 + (uint64_t)h[3] * s2 +
                  (uint64_t)h[4] * s1;
    uint64_t d1 = (uint64_t)h[0] * r[1] + (uint64_t)h[1] * r[0] + (uint64_t)h[2] * s4 + (uint64_t)h[3] * s3 +
                  (uint64_t)h[4] * s2;
    uint64_t d2 = (uint64_t)h[0] * r[2] + (uint64_t)h[1] * r[1] + (uint64_t)h[2] * r[0] + (uint64_t)h[3] * s4 +
                  (uint64_t)h[4] * s3;
    uint64_t d3 = (uint64_t)h[0] * r[3] + (uint64_t)h[1] * r[2] + (uint64_t)h[2] * r[1] + (uint64_t)h[3] * r[0] +
                  (uint64_t)h[4] * s4;
    uint64_t d4 = (uint64_t)h[0] * r[4] + (uint64_t)h[1] * r[3] + (uint64_t)h[2] * r[2] + (uint64_t)h[3] * r[1] +
                  (uint64_t)h[4] * r[0];
    uint32_t c = (uint32_t)(d0 >> 26);
    h[0] = (uint32_t)d0 & 0x3ffffff;
    d1 += c;
    c = (uint32_t)(d1 >> 26);
    h[1] = (uint32_t)d1 & 0x3ffffff;
    d2 += c;
    c = (uint32_t)(d2 >> 26);
    h[2] = (uint32_t)d2 & 0x3ffffff;
    d3 += c;
    c = (uint32_t)(d3 >> 26);
    h[3] = (uint32_t)d3 & 0x3ffffff;
    d4 += c;
    c = (uint32_t)(d4 >> 26);
    h[4] = (uint32_t)d4 & 0x3ffffff;
    h[0] += c * 5;
    c = h[0] >> 26;
    h[0] &= 0x3ffffff;
    h[1] += c;
  }

  // Absorbs `len` bytes as RFC 8439's AEAD does: whole blocks, then a zero-padded block.
  ENCLAVE_HD void UpdatePadded(const uint8_t* m, size_t len) {
    while (len >= 16) {
      Block(m, 1u << 24);
      m += 16;
      len -= 16;
    }
    if (len > 0) {  // zero padding to 16 bytes is part of the AEAD's MAC input
      uint32_t w[4] = {0, 0, 0, 0};  // built from bytes: no local array whose address is taken
      for (int i = 0; i < 16; ++i) {
        if (static_cast<size_t>(i) < len) w[i / 4] |= static_cast<uint32_t>(m[i]) << (8 * (i % 4));
      }
      BlockWords(w, 1u << 24);
    }
  }

  ENCLAVE_HD void Final(uint8_t tag[16]) {
    uint32_t c = h[1] >> 26;
    h[1] &= 0x3ffffff;
    h[2] += c;
    c = h[2] >> 26;
    h[2] &= 0x3ffffff;
    h[3] += c;
    c = h[3] >> 26;
    h[3] &= 0x3ffffff;
    h[4] += c;
    c = h[4] >> 26;
    h[4] &= 0x3ffffff;
    h[0] += c * 5;
    c = h[0] >> 26;
    h[0] &= 0x3ffffff;
    h[1] += c;
    // g = h + -p; select h or g without a branch.
    uint32_t g[5];
    g[0] = h[0] + 5;
    c = g[0] >> 26;
    g[0] &= 0x3ffffff;
    for (int i = 1; i < 4; ++i) {
      g[i] = h[i] + c;
      c = g[i] >> 26;
      g[i] &= 0x3ffffff;
    }
    g[4] = h[4] + c - (1u << 26);
    uint32_t mask = (g[4] >> 31) - 1;  // all ones when h >= p
    for (int i = 0; i < 5; ++i) h[i] = (h[i] & ~mask) | (g[i] & mask);
    uint32_t w0 = h[0] | (h[1] << 26);
    uint32_t w1 = (h[1] >> 6) | (h[2] << 20);
    uint32_t w2 = (h[2] >> 12) | (h[3] << 14);
    uint32_t w3 = (h[3] >> 18) | (h[4] << 8);
    uint64_t f = (uint64_t)w0 + pad[0];
    Store32Le(tag + 0, (uint32_t)f);
    f = (uint64_t)w1 + pad[1] + (f >> 32);
    Store32Le(tag + 4, (uint32_t)f);
    f = (uint64_t)w2 + pad[2] + (f >> 32);
    Store32Le(tag + 8, (uint32_t)f);
    f = (uint64_t)w3 + pad[3] + (f >> 32);
    Store32Le(tag + 12, (uint32_t)f);
  }
};

// The RFC 8439 AEAD tag over (aad, ciphertext) under `key` and `nonce`.
ENCLAVE_HD void ChaCha20Poly1305Tag(const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad,
                                    size_t aad_len, const uint8_t* ct, size_t ct_len, uint8_t tag[16]) {
  uint8_t block0[64];
  ChaCha20Block(key, 0, nonce, block0);
  Poly1305 mac;
  mac.Init(block0);
  mac.UpdatePadded(aad, aad_len);
  mac.UpdatePadded(ct, ct_len);
  uint8_t lengths[16];
  for (int i = 0; i < 8; ++i) {
    lengths[i] = static_cast<uint8_t>(static_cast<uint64_t>(aad_len) >> (8 * i));
    lengths[8 + i] = static_cast<uint8_t>(static_cast<uint64_t>(ct_len) >> (8 * i));
  }
  mac.Block(lengths, 1u << 24);
  mac.Final(tag);
  for (int i = 0; i < 64; ++i) block0[i] = 0;
}

// Constant-time equality of two 16-byte tags.
ENCLAVE_HD bool TagsEqual(const uint8_t a[16], const uint8_t b[16]) {
  uint8_t diff = 0;
  for (int i = 0; i < 16; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace enclave::kernels
