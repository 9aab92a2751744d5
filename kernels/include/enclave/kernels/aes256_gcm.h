// AES-256-GCM (FIPS 197, NIST SP 800-38D) as host+device functions, for opening sealed
// chunks on the GPU with the FIPS-approved suite. The CPU path of the product uses
// OpenSSL; this code runs on the CPU only in tests, which check it against OpenSSL.
// AES runs on 32-bit columns with one 1 KiB table (the S-box and MixColumns combined, the
// other three rows by rotation), passed in so a kernel can keep it in shared memory.
// GHASH multiplies bit by bit with masks (no data-dependent branch or index); the table
// lookups are data-dependent, which SECURITY.md's scope (no co-tenant on the GPU) allows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "enclave/kernels/hd.h"
#include "enclave/kernels/words.h"

namespace enclave::kernels {

// The AES S-box (FIPS 197 figure 7), for hosts and for copying into shared memory.
inline constexpr uint8_t kAesSbox[256] = {
    0x63, 0x7c, 0x77, 0x7b, 0xf2, 0x6b, 0x6f, 0xc5, 0x30, 0x01, 0x67, 0x2b, 0xfe, 0xd7, 0xab, 0x76, 0xca, 0x82, 0xc9,
    0x7d, 0xfa, 0x59, 0x47, 0xf0, 0xad, 0xd4, 0xa2, 0xaf, 0x9c, 0xa4, 0x72, 0xc0, 0xb7, 0xfd, 0x93, 0x26, 0x36, 0x3f,
    0xf7, 0xcc, 0x34, 0xa5, 0xe5, 0xf1, 0x71, 0xd8, 0x31, 0x15, 0x04, 0xc7, 0x23, 0xc3, 0x18, 0x96, 0x05, 0x9a, 0x07,
    0x12, 0x80, 0xe2, 0xeb, 0x27, 0xb2, 0x75, 0x09, 0x83, 0x2c, 0x1a, 0x1b, 0x6e, 0x5a, 0xa0, 0x52, 0x3b, 0xd6, 0xb3,
    0x29, 0xe3, 0x2f, 0x84, 0x53, 0xd1, 0x00, 0xed, 0x20, 0xfc, 0xb1, 0x5b, 0x6a, 0xcb, 0xbe, 0x39, 0x4a, 0x4c, 0x58,
    0xcf, 0xd0, 0xef, 0xaa, 0xfb, 0x43, 0x4d, 0x33, 0x85, 0x45, 0xf9, 0x02, 0x7f, 0x50, 0x3c, 0x9f, 0xa8, 0x51, 0xa3,
    0x40, 0x8f, 0x92, 0x9d, 0x38, 0xf5, 0xbc, 0xb6, 0xda, 0x21, 0x10, 0xff, 0xf3, 0xd2, 0xcd, 0x0c, 0x13, 0xec, 0x5f,
    0x97, 0x44, 0x17, 0xc4, 0xa7, 0x7e, 0x3d, 0x64, 0x5d, 0x19, 0x73, 0x60, 0x81, 0x4f, 0xdc, 0x22, 0x2a, 0x90, 0x88,
    0x46, 0xee, 0xb8, 0x14, 0xde, 0x5e, 0x0b, 0xdb, 0xe0, 0x32, 0x3a, 0x0a, 0x49, 0x06, 0x24, 0x5c, 0xc2, 0xd3, 0xac,
    0x62, 0x91, 0x95, 0xe4, 0x79, 0xe7, 0xc8, 0x37, 0x6d, 0x8d, 0xd5, 0x4e, 0xa9, 0x6c, 0x56, 0xf4, 0xea, 0x65, 0x7a,
    0xae, 0x08, 0xba, 0x78, 0x25, 0x2e, 0x1c, 0xa6, 0xb4, 0xc6, 0xe8, 0xdd, 0x74, 0x1f, 0x4b, 0xbd, 0x8b, 0x8a, 0x70,
    0x3e, 0xb5, 0x66, 0x48, 0x03, 0xf6, 0x0e, 0x61, 0x35, 0x57, 0xb9, 0x86, 0xc1, 0x1d, 0x9e, 0xe1, 0xf8, 0x98, 0x11,
    0x69, 0xd9, 0x8e, 0x94, 0x9b, 0x1e, 0x87, 0xe9, 0xce, 0x55, 0x28, 0xdf, 0x8c, 0xa1, 0x89, 0x0d, 0xbf, 0xe6, 0x42,
    0x68, 0x41, 0x99, 0x2d, 0x0f, 0xb0, 0x54, 0xbb, 0x16};

// The combined table: t0[x] is the column that byte x in row 0 contributes after SubBytes
// and MixColumns, bytes (2·S[x], S[x], S[x], 3·S[x]) little-endian; rows 1..3 contribute
// the same column rotated left by 8, 16 and 24 bits. S[x] itself is byte 1 of t0[x].
struct AesTable {
  uint32_t t0[256];
};

constexpr AesTable MakeAesTable() {
  AesTable t{};
  for (int x = 0; x < 256; ++x) {
    const uint32_t s = kAesSbox[x];
    const uint32_t s2 = ((s << 1) ^ ((s >> 7) * 0x1b)) & 0xff;
    t.t0[x] = s2 | s << 8 | s << 16 | (s2 ^ s) << 24;
  }
  return t;
}

inline constexpr AesTable kAesTable = MakeAesTable();

ENCLAVE_HD uint32_t AesSub(const uint32_t* te, uint32_t byte) { return (te[byte & 0xff] >> 8) & 0xff; }

ENCLAVE_HD uint32_t AesSubWord(const uint32_t* te, uint32_t w) {
  return AesSub(te, w) | AesSub(te, w >> 8) << 8 | AesSub(te, w >> 16) << 16 | AesSub(te, w >> 24) << 24;
}

// Expanded key: 15 round keys of four columns (FIPS 197 section 5.2, Nk = 8), each
// column a little-endian word (row r in bits 8r..8r+7).
struct Aes256RoundKeys {
  uint32_t w[60];
};

ENCLAVE_HD void Aes256ExpandKey(const uint8_t key[32], const uint32_t* te, Aes256RoundKeys* rk) {
  for (int i = 0; i < 8; ++i) rk->w[i] = Load32Le(key + 4 * i);
  uint32_t rcon = 1;
  for (int i = 8; i < 60; ++i) {
    uint32_t t = rk->w[i - 1];
    if (i % 8 == 0) {
      t = AesSubWord(te, (t >> 8) | (t << 24)) ^ rcon;  // RotWord, SubWord, Rcon
      rcon = ((rcon << 1) ^ ((rcon >> 7) * 0x1b)) & 0xff;
    } else if (i % 8 == 4) {
      t = AesSubWord(te, t);
    }
    rk->w[i] = rk->w[i - 8] ^ t;
  }
}

// One block as four columns (FIPS 197 section 5.1): 13 table rounds, then SubBytes and
// ShiftRows alone. Column c of a round takes row r from column c + r.
ENCLAVE_HD void Aes256EncryptWords(const Aes256RoundKeys& rk, const uint32_t* te, const uint32_t in[4],
                                   uint32_t out[4]) {
  uint32_t c0 = in[0] ^ rk.w[0], c1 = in[1] ^ rk.w[1], c2 = in[2] ^ rk.w[2], c3 = in[3] ^ rk.w[3];
  for (int round = 1; round < 14; ++round) {
    const uint32_t* k = rk.w + 4 * round;
    const uint32_t n0 = te[c0 & 0xff] ^ Rotl32(te[(c1 >> 8) & 0xff], 8) ^ Rotl32(te[(c2 >> 16) & 0xff], 16) ^
                        Rotl32(te[c3 >> 24], 24) ^ k[0];
    const uint32_t n1 = te[c1 & 0xff] ^ Rotl32(te[(c2 >> 8) & 0xff], 8) ^ Rotl32(te[(c3 >> 16) & 0xff], 16) ^
                        Rotl32(te[c0 >> 24], 24) ^ k[1];
    const uint32_t n2 = te[c2 & 0xff] ^ Rotl32(te[(c3 >> 8) & 0xff], 8) ^ Rotl32(te[(c0 >> 16) & 0xff], 16) ^
                        Rotl32(te[c1 >> 24], 24) ^ k[2];
    const uint32_t n3 = te[c3 & 0xff] ^ Rotl32(te[(c0 >> 8) & 0xff], 8) ^ Rotl32(te[(c1 >> 16) & 0xff], 16) ^
                        Rotl32(te[c2 >> 24], 24) ^ k[3];
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  const uint32_t* k = rk.w + 56;
  out[0] = (AesSub(te, c0) | AesSub(te, c1 >> 8) << 8 | AesSub(te, c2 >> 16) << 16 | AesSub(te, c3 >> 24) << 24) ^ k[0];
  out[1] = (AesSub(te, c1) | AesSub(te, c2 >> 8) << 8 | AesSub(te, c3 >> 16) << 16 | AesSub(te, c0 >> 24) << 24) ^ k[1];
  out[2] = (AesSub(te, c2) | AesSub(te, c3 >> 8) << 8 | AesSub(te, c0 >> 16) << 16 | AesSub(te, c1 >> 24) << 24) ^ k[2];
  out[3] = (AesSub(te, c3) | AesSub(te, c0 >> 8) << 8 | AesSub(te, c1 >> 16) << 16 | AesSub(te, c2 >> 24) << 24) ^ k[3];
}

// The same on 16 bytes.
ENCLAVE_HD void Aes256EncryptBlock(const Aes256RoundKeys& rk, const uint32_t* te, const uint8_t in[16],
                                   uint8_t out[16]) {
  uint32_t w[4], o[4];
  for (int i = 0; i < 4; ++i) w[i] = Load32Le(in + 4 * i);
  Aes256EncryptWords(rk, te, w, o);
  for (int i = 0; i < 4; ++i) Store32Le(out + 4 * i, o[i]);
}

// A GCM field element, big-endian halves: hi holds bytes 0..7 (bit 0 of GCM is the MSB).
struct Gf128 {
  uint64_t hi, lo;
};

ENCLAVE_HD Gf128 Gf128Load(const uint8_t b[16]) {
  Gf128 x{0, 0};
  for (int i = 0; i < 8; ++i) {
    x.hi = (x.hi << 8) | b[i];
    x.lo = (x.lo << 8) | b[8 + i];
  }
  return x;
}

ENCLAVE_HD void Gf128Store(Gf128 x, uint8_t b[16]) {
  for (int i = 7; i >= 0; --i) {
    b[i] = static_cast<uint8_t>(x.hi);
    b[8 + i] = static_cast<uint8_t>(x.lo);
    x.hi >>= 8;
    x.lo >>= 8;
  }
}

// X * Y in GF(2^128) with GCM's polynomial (SP 800-38D algorithm 1), branch-free.
ENCLAVE_HD Gf128 Gf128Mul(Gf128 x, Gf128 y) {
  Gf128 z{0, 0}, v = y;
  for (int i = 0; i < 128; ++i) {
    const uint64_t bit = i < 64 ? (x.hi >> (63 - i)) & 1 : (x.lo >> (127 - i)) & 1;
    const uint64_t mask = 0 - bit;
    z.hi ^= v.hi & mask;
    z.lo ^= v.lo & mask;
    const uint64_t carry = 0 - (v.lo & 1);
    v.lo = (v.lo >> 1) | (v.hi << 63);
    v.hi = (v.hi >> 1) ^ (0xe100000000000000ull & carry);
  }
  return z;
}

// y XOR the next block of `data` (`len` bytes left; zero-padded when fewer than 16).
ENCLAVE_HD Gf128 GhashAbsorb(Gf128 y, const uint8_t* data, size_t len) {
  uint8_t block[16];
  for (int i = 0; i < 16; ++i) block[i] = static_cast<size_t>(i) < len ? data[i] : 0;
  const Gf128 m = Gf128Load(block);
  return Gf128{y.hi ^ m.hi, y.lo ^ m.lo};
}

// GHASH over zero-padded blocks of `data`, continuing from `y`.
ENCLAVE_HD Gf128 GhashPadded(Gf128 y, Gf128 h, const uint8_t* data, size_t len) {
  for (size_t off = 0; off < len; off += 16) y = Gf128Mul(GhashAbsorb(y, data + off, len - off), h);
  return y;
}

// The counter block for block `i` of the keystream (i = 0 gives J0, the tag's mask) for a
// 96-bit nonce: nonce || (i + 1) as a big-endian u32.
ENCLAVE_HD void GcmCounterBlock(const uint8_t nonce[12], uint32_t i, uint8_t out[16]) {
  for (int k = 0; k < 12; ++k) out[k] = nonce[k];
  const uint32_t ctr = i + 1;
  out[12] = static_cast<uint8_t>(ctr >> 24);
  out[13] = static_cast<uint8_t>(ctr >> 16);
  out[14] = static_cast<uint8_t>(ctr >> 8);
  out[15] = static_cast<uint8_t>(ctr);
}

// GCM's last steps: `y`, the GHASH state after the padded aad and ciphertext blocks, takes
// the length block and one more multiplication by `h`, and is masked with E_K(J0).
ENCLAVE_HD void GcmTagOfGhash(const Aes256RoundKeys& rk, const uint32_t* te, Gf128 h, const uint8_t nonce[12],
                              Gf128 y, uint64_t aad_len, uint64_t ct_len, uint8_t tag[16]) {
  y.hi ^= aad_len * 8;
  y.lo ^= ct_len * 8;
  y = Gf128Mul(y, h);
  uint8_t j0[16], mask[16], s[16];
  GcmCounterBlock(nonce, 0, j0);
  Aes256EncryptBlock(rk, te, j0, mask);
  Gf128Store(y, s);
  for (int i = 0; i < 16; ++i) tag[i] = static_cast<uint8_t>(s[i] ^ mask[i]);
}

// The GCM tag over (aad, ciphertext); `h` is E_K(0^128).
ENCLAVE_HD void Aes256GcmTag(const Aes256RoundKeys& rk, const uint32_t* te, Gf128 h, const uint8_t nonce[12],
                             const uint8_t* aad, size_t aad_len, const uint8_t* ct, size_t ct_len, uint8_t tag[16]) {
  Gf128 y{0, 0};
  y = GhashPadded(y, h, aad, aad_len);
  y = GhashPadded(y, h, ct, ct_len);
  GcmTagOfGhash(rk, te, h, nonce, y, aad_len, ct_len, tag);
}

// XORs keystream block `block` (16 bytes; counter J0 + 1 + block) into up to 16 bytes.
ENCLAVE_HD void Aes256GcmXorBlock(const Aes256RoundKeys& rk, const uint32_t* te, const uint8_t nonce[12],
                                  uint32_t block, const uint8_t* in, uint8_t* out, size_t len) {
  // The counter block nonce || (block + 2) big-endian, as columns.
  const uint32_t ctr[4] = {Load32Le(nonce), Load32Le(nonce + 4), Load32Le(nonce + 8), Bswap32(block + 2)};
  uint32_t ks[4];
  Aes256EncryptWords(rk, te, ctr, ks);
  if (len == 16) {  // the common case: word accesses
    uint32_t w[4];
    Load16Le(in, w);
    for (int i = 0; i < 4; ++i) w[i] ^= ks[i];
    Store16Le(out, w);
  } else {  // constant indices only (unrolled): ks stays in registers on the GPU
    for (int i = 0; i < 16; ++i) {
      if (static_cast<size_t>(i) < len) out[i] = static_cast<uint8_t>(in[i] ^ (ks[i / 4] >> (8 * (i % 4))));
    }
  }
}

}  // namespace enclave::kernels
