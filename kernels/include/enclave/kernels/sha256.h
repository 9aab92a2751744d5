// SHA-256 (FIPS 180-4) as host+device functions, so that a digest of data that lives in
// GPU memory (the model file's closing digest, the report's parameter digest) is computed
// on the device without the data leaving it. The CPU path of the product uses OpenSSL;
// this code runs on the CPU only in tests, which check it against OpenSSL. One thread
// hashes serially: the inputs it is for are models, not datasets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "enclave/kernels/hd.h"

namespace enclave::kernels {

// The round constants (FIPS 180-4 section 4.2.2), passed in so that a kernel can take
// them as a parameter (device code cannot read a host constexpr array).
struct Sha256Constants {
  uint32_t k[64];
};

inline constexpr Sha256Constants kSha256 = {{
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}};

struct Sha256State {
  uint32_t h[8];
  uint8_t buf[64];
  uint64_t total;  // bytes absorbed
  uint32_t fill;   // bytes in buf
};

ENCLAVE_HD uint32_t Sha256Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

ENCLAVE_HD void Sha256Init(Sha256State* s) {
  const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                          0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  for (int i = 0; i < 8; ++i) s->h[i] = iv[i];
  s->total = 0;
  s->fill = 0;
}

// One 64-byte block into the state (FIPS 180-4 section 6.2.2), with a rolling 16-word schedule.
ENCLAVE_HD void Sha256Block(uint32_t h[8], const Sha256Constants& c, const uint8_t* block) {
  uint32_t w[16];
  for (int i = 0; i < 16; ++i) {
    w[i] = static_cast<uint32_t>(block[4 * i]) << 24 | static_cast<uint32_t>(block[4 * i + 1]) << 16 |
           static_cast<uint32_t>(block[4 * i + 2]) << 8 | block[4 * i + 3];
  }
  uint32_t a = h[0], b = h[1], cc = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; ++t) {
    if (t >= 16) {
      const uint32_t w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
      const uint32_t s0 = Sha256Rotr(w15, 7) ^ Sha256Rotr(w15, 18) ^ (w15 >> 3);
      const uint32_t s1 = Sha256Rotr(w2, 17) ^ Sha256Rotr(w2, 19) ^ (w2 >> 10);
      w[t & 15] += s0 + w[(t - 7) & 15] + s1;
    }
    const uint32_t t1 = hh + (Sha256Rotr(e, 6) ^ Sha256Rotr(e, 11) ^ Sha256Rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                        c.k[t] + w[t & 15];
    const uint32_t t2 = (Sha256Rotr(a, 2) ^ Sha256Rotr(a, 13) ^ Sha256Rotr(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = cc;
    cc = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += cc;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

ENCLAVE_HD void Sha256Update(Sha256State* s, const Sha256Constants& c, const uint8_t* data, size_t len) {
  s->total += len;
  if (s->fill > 0) {
    while (len > 0 && s->fill < 64) {
      s->buf[s->fill++] = *data++;
      --len;
    }
    if (s->fill < 64) return;
    Sha256Block(s->h, c, s->buf);
    s->fill = 0;
  }
  for (; len >= 64; data += 64, len -= 64) Sha256Block(s->h, c, data);
  for (size_t i = 0; i < len; ++i) s->buf[i] = data[i];
  s->fill = static_cast<uint32_t>(len);
}

// The padding (a 1 bit, zeros, the length in bits big-endian), then the digest; wipes the state.
ENCLAVE_HD void Sha256Final(Sha256State* s, const Sha256Constants& c, uint8_t out[32]) {
  const uint64_t bits = s->total * 8;
  s->buf[s->fill++] = 0x80;
  if (s->fill > 56) {
    while (s->fill < 64) s->buf[s->fill++] = 0;
    Sha256Block(s->h, c, s->buf);
    s->fill = 0;
  }
  while (s->fill < 56) s->buf[s->fill++] = 0;
  for (int i = 0; i < 8; ++i) s->buf[56 + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  Sha256Block(s->h, c, s->buf);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(s->h[i] >> (24 - 8 * j));
  }
  for (int i = 0; i < 8; ++i) s->h[i] = 0;
  for (int i = 0; i < 64; ++i) s->buf[i] = 0;
}

}  // namespace enclave::kernels
