// Chunk tags computed in parallel: both MACs of the sealed format are polynomials
// evaluated by Horner's rule (GHASH in GF(2^128) with key H, Poly1305 modulo 2^130-5 with
// key r), tag = sum of block_k * key^(n-k+1). A chunk's ciphertext is cut into segments
// of kTagSegmentBlocks blocks; each GPU thread evaluates one segment by Horner's rule from
// zero, and one thread per chunk combines the segments by Horner's rule again, with
// key^32 as the step (key^(its length) for a short last segment), then adds the
// associated data and the length block. The result is the same tag as the serial code in
// aes256_gcm.h / chacha20_poly1305.h (tests/kernels checks this on the CPU, where these
// functions also compile), so the GPU needs far fewer blocks per thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "enclave/kernels/chunk_math.h"

namespace enclave::kernels {

inline constexpr uint64_t kTagSegmentBlocks = 32;  // 512 bytes of ciphertext per thread
inline constexpr int kGhashPowers = 32;            // H^(2^i), i < 32: chunks up to 2^30 bytes

// One segment's partial sum: GHASH (hi, lo) in w[0..3], or Poly1305 limbs in w[0..4].
struct TagPartial {
  uint32_t w[8];
};

// H^(2^i) for the GCM key of one file (computed once on the host).
struct GhashPowers {
  Gf128 p[kGhashPowers];
};

ENCLAVE_HD void GhashPowersOf(Gf128 h, GhashPowers* out) {
  out->p[0] = h;
  for (int i = 1; i < kGhashPowers; ++i) out->p[i] = Gf128Mul(out->p[i - 1], out->p[i - 1]);
}

// x * H^e (e < 2^kGhashPowers); the exponent is public (a block position).
ENCLAVE_HD Gf128 GhashMulPow(Gf128 x, const GhashPowers& pw, uint64_t e) {
  for (int i = 0; i < kGhashPowers && e != 0; ++i, e >>= 1) {
    if (e & 1) x = Gf128Mul(x, pw.p[i]);
  }
  return x;
}

// Multiplication by the fixed H with Shoup's 4-bit tables (as in mbed TLS's gcm.c): 32
// table steps instead of 128 bit steps per block, for the segments' Horner loops, where
// nearly all of GHASH's work is. hh/hl[i] = i * H for a 4-bit i in GCM bit order; last4
// reduces the four bits shifted out. The lookups are indexed by secret-dependent values,
// like the AES S-box's; SECURITY.md's scope (no co-tenant on the GPU) allows this.
struct GhashTable {
  uint64_t hh[16], hl[16], last4[16];
};

ENCLAVE_HD void GhashTableOf(Gf128 h, GhashTable* t) {
  const uint64_t last4[16] = {0x0000, 0x1c20, 0x3840, 0x2460, 0x7080, 0x6ca0, 0x48c0, 0x54e0,
                              0xe100, 0xfd20, 0xd940, 0xc560, 0x9180, 0x8da0, 0xa9c0, 0xb5e0};
  for (int i = 0; i < 16; ++i) t->last4[i] = last4[i];
  uint64_t vh = h.hi, vl = h.lo;
  t->hh[0] = t->hl[0] = 0;
  t->hh[8] = vh;
  t->hl[8] = vl;
  for (int i = 4; i > 0; i >>= 1) {
    const uint64_t carry = (vl & 1) * 0xe1000000ull;
    vl = (vh << 63) | (vl >> 1);
    vh = (vh >> 1) ^ (carry << 32);
    t->hh[i] = vh;
    t->hl[i] = vl;
  }
  for (int i = 2; i <= 8; i *= 2) {
    for (int j = 1; j < i; ++j) {
      t->hh[i + j] = t->hh[i] ^ t->hh[j];
      t->hl[i + j] = t->hl[i] ^ t->hl[j];
    }
  }
}

// x * H with the table of H.
ENCLAVE_HD Gf128 GhashMulTable(Gf128 x, const GhashTable& t) {
  uint64_t zh = 0, zl = 0;
  for (int i = 15; i >= 0; --i) {
    const uint64_t word = i < 8 ? x.hi : x.lo;
    const unsigned byte = static_cast<unsigned>(word >> (56 - 8 * (i & 7))) & 0xff;
    const unsigned lo = byte & 0xf, hi = byte >> 4;
    unsigned rem;
    if (i != 15) {
      rem = static_cast<unsigned>(zl & 0xf);
      zl = (zh << 60) | (zl >> 4);
      zh = (zh >> 4) ^ (t.last4[rem] << 48);
      zh ^= t.hh[lo];
      zl ^= t.hl[lo];
    } else {
      zh = t.hh[lo];
      zl = t.hl[lo];
    }
    rem = static_cast<unsigned>(zl & 0xf);
    zl = (zh << 60) | (zl >> 4);
    zh = (zh >> 4) ^ (t.last4[rem] << 48);
    zh ^= t.hh[hi];
    zl ^= t.hl[hi];
  }
  return Gf128{zh, zl};
}

// GhashPadded with the table: whole 16-byte blocks read as words (words.h).
ENCLAVE_HD Gf128 GhashPaddedTable(Gf128 y, const GhashTable& t, const uint8_t* data, size_t len) {
  for (; len >= 16; data += 16, len -= 16) {
    uint32_t w[4];
    Load16Le(data, w);
    y.hi ^= static_cast<uint64_t>(Bswap32(w[0])) << 32 | Bswap32(w[1]);
    y.lo ^= static_cast<uint64_t>(Bswap32(w[2])) << 32 | Bswap32(w[3]);
    y = GhashMulTable(y, t);
  }
  if (len > 0) y = GhashMulTable(GhashAbsorb(y, data, len), t);  // the padded last block
  return y;
}

// Blocks of ciphertext in segment `seg` of a chunk of `blocks` blocks (0 past the end).
ENCLAVE_HD uint64_t TagSegmentBlocks(uint64_t blocks, uint64_t seg) {
  const uint64_t begin = seg * kTagSegmentBlocks;
  if (begin >= blocks) return 0;
  return blocks - begin < kTagSegmentBlocks ? blocks - begin : kTagSegmentBlocks;
}

ENCLAVE_HD uint64_t TagSegmentCount(uint64_t len) {
  const uint64_t blocks = (len + 15) / 16;
  return blocks == 0 ? 1 : (blocks + kTagSegmentBlocks - 1) / kTagSegmentBlocks;
}

// Poly1305 arithmetic in 26-bit limbs (as in Poly1305::Block): a * b mod 2^130-5, for
// limbs below 2^27; the result's limbs are below 2^26 except limb 1 (slightly above).
ENCLAVE_HD void Poly1305MulMod(const uint32_t a[5], const uint32_t b[5], uint32_t out[5]) {
  const uint32_t s1 = b[1] * 5, s2 = b[2] * 5, s3 = b[3] * 5, s4 = b[4] * 5;
  uint64_t d0 = (uint64_t)a[0] * b[0] + (uint64_t)a[1] * s4 + (uint64_t)a[2] * s3 + (uint64_t)a[3] * s2 +
                (uint64_t)a[4] * s1;
  uint64_t d1 = (uint64_t)a[0] * b[1] + (uint64_t)a[1] * b[0] + (uint64_t)a[2] * s4 + (uint64_t)a[3] * s3 +
                (uint64_t)a[4] * s2;
  uint64_t d2 = (uint64_t)a[0] * b[2] + (uint64_t)a[1] * b[1] + (uint64_t)a[2] * b[0] + (uint64_t)a[3] * s4 +
                (uint64_t)a[4] * s3;
  uint64_t d3 = (uint64_t)a[0] * b[3] + (uint64_t)a[1] * b[2] + (uint64_t)a[2] * b[1] + (uint64_t)a[3] * b[0] +
                (uint64_t)a[4] * s4;
  uint64_t d4 = (uint64_t)a[0] * b[4] + (uint64_t)a[1] * b[3] + (uint64_t)a[2] * b[2] + (uint64_t)a[3] * b[1] +
                (uint64_t)a[4] * b[0];
  uint64_t c = d0 >> 26;
  out[0] = (uint32_t)d0 & 0x3ffffff;
  d1 += c;
  c = d1 >> 26;
  out[1] = (uint32_t)d1 & 0x3ffffff;
  d2 += c;
  c = d2 >> 26;
  out[2] = (uint32_t)d2 & 0x3ffffff;
  d3 += c;
  c = d3 >> 26;
  out[3] = (uint32_t)d3 & 0x3ffffff;
  d4 += c;
  c = d4 >> 26;
  out[4] = (uint32_t)d4 & 0x3ffffff;
  const uint64_t t0 = out[0] + c * 5;
  out[0] = (uint32_t)t0 & 0x3ffffff;
  out[1] += (uint32_t)(t0 >> 26);
}

// x * r^e with r^(2^i) made by squaring as it goes (r differs per chunk: it comes from
// the chunk's first ChaCha20 block).
ENCLAVE_HD void Poly1305MulPow(uint32_t x[5], const uint32_t r[5], uint64_t e) {
  uint32_t base[5] = {r[0], r[1], r[2], r[3], r[4]};
  while (e != 0) {
    if (e & 1) Poly1305MulMod(x, base, x);
    e >>= 1;
    if (e != 0) Poly1305MulMod(base, base, base);
  }
}

// The sealed chunk's GCM and Poly1305 one-time values, shared by the segment and the
// finishing step: for ChaCha20-Poly1305 the Poly1305 key of this chunk's nonce.
ENCLAVE_HD void ChunkPolyKey(const ChunkKeys& k, uint64_t index, bool last, Poly1305* mac) {
  uint8_t nonce[12], block0[64];
  SealedChunkNonce(index, last, nonce);
  ChaCha20Block(k.chacha_key, 0, nonce, block0);
  mac->Init(block0);
  for (int i = 0; i < 64; ++i) block0[i] = 0;
}

// Where segment `seg` of `len` bytes of ciphertext lies: bytes [*from, *from + *n);
// false past the end.
ENCLAVE_HD bool TagSegmentSpan(uint64_t len, uint64_t seg, uint64_t* from, uint64_t* n) {
  const uint64_t blocks = (len + 15) / 16;
  const uint64_t begin = seg * kTagSegmentBlocks, count = TagSegmentBlocks(blocks, seg);
  if (count == 0) return false;
  *from = begin * 16;
  *n = ((begin + count) * 16 < len ? (begin + count) * 16 : len) - *from;
  return true;
}

// GHASH of segment `seg` of `ct` (`len` bytes) from zero: AES-GCM's part of a segment,
// for the sealed chunks and the transport's records (net_records.h) alike.
ENCLAVE_HD void GcmTagSegment(const GhashTable& ht, const uint8_t* ct, uint64_t len, uint64_t seg, TagPartial* out) {
  for (int i = 0; i < 8; ++i) out->w[i] = 0;
  uint64_t from = 0, n = 0;
  if (!TagSegmentSpan(len, seg, &from, &n)) return;
  const Gf128 y = GhashPaddedTable(Gf128{0, 0}, ht, ct + from, static_cast<size_t>(n));
  out->w[0] = (uint32_t)(y.hi >> 32);
  out->w[1] = (uint32_t)y.hi;
  out->w[2] = (uint32_t)(y.lo >> 32);
  out->w[3] = (uint32_t)y.lo;
}

// Segment `seg` of a chunk's ciphertext `ct` (`len` bytes): its Horner sum from zero.
ENCLAVE_HD void ChunkTagSegment(const ChunkKeys& k, const GhashTable& ht, uint64_t index, bool last,
                                const uint8_t* ct, uint64_t len, uint64_t seg, TagPartial* out) {
  if (k.aes) return GcmTagSegment(ht, ct, len, seg, out);
  for (int i = 0; i < 8; ++i) out->w[i] = 0;
  uint64_t from = 0, n = 0;
  if (!TagSegmentSpan(len, seg, &from, &n)) return;
  Poly1305 mac;
  ChunkPolyKey(k, index, last, &mac);
  mac.UpdatePadded(ct + from, static_cast<size_t>(n));
  for (int i = 0; i < 5; ++i) out->w[i] = mac.h[i];
  for (int i = 0; i < 5; ++i) mac.r[i] = mac.pad[i % 4] = 0;
}

// Segments [first, last) of `blocks` blocks of ciphertext, combined: the sum of
// part_s * H^(blocks after segment s) over them, which is their share of the GHASH sum.
// The shares of disjoint ranges add up (XOR) to the whole sum, so several GPU threads
// can combine one long message's segments (net_records_gpu.cu). `t32`: the table of H^32.
ENCLAVE_HD Gf128 GcmCombineSegments(const GhashPowers& hp, const GhashTable& t32, uint64_t blocks,
                                    const TagPartial* parts, uint64_t first, uint64_t last) {
  Gf128 acc{0, 0};
  for (uint64_t s = first; s < last; ++s) {
    const uint64_t step = TagSegmentBlocks(blocks, s);
    if (step == kTagSegmentBlocks) {
      acc = GhashMulTable(acc, t32);
    } else if (step != 0) {
      acc = GhashMulPow(acc, hp, step);
    }
    acc.hi ^= (uint64_t)parts[s].w[0] << 32 | parts[s].w[1];
    acc.lo ^= (uint64_t)parts[s].w[2] << 32 | parts[s].w[3];
  }
  const uint64_t end = last * kTagSegmentBlocks < blocks ? last * kTagSegmentBlocks : blocks;
  return GhashMulPow(acc, hp, blocks - end);
}

// The AES-GCM tag of `len` bytes of ciphertext from the GHASH sum of its segments
// (GcmCombineSegments over all of them), with 32 bytes of associated data (both users
// have 32) and the 12-byte `nonce`.
ENCLAVE_HD void GcmTagFromSum(const Aes256RoundKeys& rk, Gf128 h, const uint32_t* te, const GhashPowers& hp,
                              const uint8_t aad[32], const uint8_t nonce[12], uint64_t len, Gf128 sum,
                              uint8_t tag[16]) {
  const uint64_t blocks = (len + 15) / 16;
  Gf128 y = GhashPadded(Gf128{0, 0}, h, aad, 32);
  y = GhashMulPow(y, hp, blocks);
  y.hi ^= sum.hi;
  y.lo ^= sum.lo;
  GcmTagOfGhash(rk, te, h, nonce, y, 32, len, tag);
}

// The tag from all `n_parts` segments' partial sums on one thread.
ENCLAVE_HD void GcmTagFinish(const Aes256RoundKeys& rk, Gf128 h, const uint32_t* te, const GhashPowers& hp,
                             const GhashTable& t32, const uint8_t aad[32], const uint8_t nonce[12], uint64_t len,
                             const TagPartial* parts, uint64_t n_parts, uint8_t tag[16]) {
  const Gf128 sum = GcmCombineSegments(hp, t32, (len + 15) / 16, parts, 0, n_parts);
  GcmTagFromSum(rk, h, te, hp, aad, nonce, len, sum, tag);
}

// Combines the segments of one chunk of `len` bytes into its tag. `t32` is the 4-bit
// table of H^32 (unused for ChaCha20-Poly1305).
ENCLAVE_HD void ChunkTagFinish(const ChunkKeys& k, const uint32_t* te, const GhashPowers& hp, const GhashTable& t32,
                               const uint8_t aad[32], uint64_t index, bool last, uint64_t len,
                               const TagPartial* parts, uint64_t n_parts, uint8_t tag[16]) {
  const uint64_t blocks = (len + 15) / 16;
  uint8_t nonce[12];
  SealedChunkNonce(index, last, nonce);
  if (k.aes) return GcmTagFinish(k.aes_keys, k.aes_h, te, hp, t32, aad, nonce, len, parts, n_parts, tag);
  Poly1305 mac;
  ChunkPolyKey(k, index, last, &mac);
  uint32_t r32[5] = {mac.r[0], mac.r[1], mac.r[2], mac.r[3], mac.r[4]};
  for (int i = 0; i < 5; ++i) Poly1305MulMod(r32, r32, r32);  // r^32
  uint32_t acc[5] = {0, 0, 0, 0, 0};  // limbs stay below 2^27: safe inputs to Poly1305MulMod
  for (uint64_t s = 0; s < n_parts; ++s) {
    const uint64_t step = TagSegmentBlocks(blocks, s);
    if (step == kTagSegmentBlocks) {
      Poly1305MulMod(acc, r32, acc);
    } else if (step != 0) {
      Poly1305MulPow(acc, mac.r, step);
    }
    for (int i = 0; i < 5; ++i) acc[i] += parts[s].w[i];
  }
  mac.UpdatePadded(aad, 32);
  Poly1305MulPow(mac.h, mac.r, blocks);
  uint64_t sum[5];
  for (int i = 0; i < 5; ++i) sum[i] = static_cast<uint64_t>(mac.h[i]) + acc[i];
  for (int pass = 0; pass < 3; ++pass) {  // back to 26-bit limbs (mod 2^130-5)
    for (int i = 0; i < 4; ++i) {
      sum[i + 1] += sum[i] >> 26;
      sum[i] &= 0x3ffffff;
    }
    sum[0] += (sum[4] >> 26) * 5;
    sum[4] &= 0x3ffffff;
  }
  for (int i = 0; i < 5; ++i) mac.h[i] = (uint32_t)sum[i];
  uint8_t lengths[16];
  for (int i = 0; i < 8; ++i) {
    lengths[i] = static_cast<uint8_t>(32ull >> (8 * i));
    lengths[8 + i] = static_cast<uint8_t>(len >> (8 * i));
  }
  mac.Block(lengths, 1u << 24);
  mac.Final(tag);
  for (int i = 0; i < 5; ++i) mac.r[i] = r32[i] = mac.pad[i % 4] = 0;
}

// ChunkTagFinish, then whether the tag equals the 16 bytes after the ciphertext `ct`.
ENCLAVE_HD bool ChunkTagFinishValid(const ChunkKeys& k, const uint32_t* te, const GhashPowers& hp,
                                    const GhashTable& t32, const uint8_t aad[32], uint64_t index, bool last,
                                    const uint8_t* ct, uint64_t len, const TagPartial* parts, uint64_t n_parts) {
  uint8_t tag[16];
  ChunkTagFinish(k, te, hp, t32, aad, index, last, len, parts, n_parts, tag);
  return TagsEqual(tag, ct + len);
}

}  // namespace enclave::kernels
