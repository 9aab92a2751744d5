// An independent, slow model of AES-GCM tags (NIST SP 800-38D) for crafting messages in
// tests: GF(2^128) arithmetic in GCM's bit order, GHASH, and the construction of one
// ciphertext that authenticates under two keys ("invisible salamanders", Dodis et al.
// 2018; Len, Grubbs, Ristenpart 2021). Only AES-256-ECB comes from OpenSSL.
#pragma once

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace enclave::crypto::testing {

// A field element as GCM lays it out: byte 0's most significant bit is the coefficient of
// x^0, byte 15's least significant bit that of x^127. hi holds bytes 0..7 (big-endian),
// lo bytes 8..15, so x^0 is hi's top bit.
struct Gf128 {
  uint64_t hi = 0, lo = 0;
  friend bool operator==(const Gf128&, const Gf128&) = default;
  Gf128 operator^(const Gf128& o) const { return {hi ^ o.hi, lo ^ o.lo}; }
};

inline Gf128 GfLoad(const uint8_t* p) {
  Gf128 r;
  for (int i = 0; i < 8; ++i) r.hi = r.hi << 8 | p[i];
  for (int i = 8; i < 16; ++i) r.lo = r.lo << 8 | p[i];
  return r;
}

inline std::array<uint8_t, 16> GfStore(Gf128 x) {
  std::array<uint8_t, 16> b{};
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(x.hi >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<uint8_t>(x.lo >> (56 - 8 * i));
  return b;
}

inline Gf128 GfOne() { return {uint64_t{1} << 63, 0}; }

// SP 800-38D Algorithm 1: multiplication in GF(2^128) mod x^128 + x^7 + x^2 + x + 1, with
// the reflected bit order (R = 11100001 || 0^120).
inline Gf128 GfMul(Gf128 x, Gf128 y) {
  Gf128 z, v = y;
  for (int i = 0; i < 128; ++i) {
    const uint64_t bit = i < 64 ? (x.hi >> (63 - i)) & 1 : (x.lo >> (127 - i)) & 1;
    if (bit) z = z ^ v;
    const bool carry = v.lo & 1;
    v.lo = (v.lo >> 1) | (v.hi << 63);
    v.hi >>= 1;
    if (carry) v.hi ^= 0xe100000000000000ull;
  }
  return z;
}

inline Gf128 GfPow(Gf128 x, uint64_t e) {
  Gf128 r = GfOne();
  while (e > 0) {
    if (e & 1) r = GfMul(r, x);
    x = GfMul(x, x);
    e >>= 1;
  }
  return r;
}

// x^(2^128 - 2) = x^-1 for x != 0: the product of x^(2^i) for i = 1..127.
inline Gf128 GfInverse(Gf128 x) {
  Gf128 r = GfOne(), t = x;
  for (int i = 1; i < 128; ++i) {
    t = GfMul(t, t);
    r = GfMul(r, t);
  }
  return r;
}

inline std::array<uint8_t, 16> Aes256Block(std::span<const uint8_t> key, std::span<const uint8_t, 16> in) {
  std::array<uint8_t, 16> out{};
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0, fin = 0;
  bool ok = ctx != nullptr && key.size() == 32 &&
            EVP_EncryptInit_ex(ctx, EVP_aes_256_ecb(), nullptr, key.data(), nullptr) == 1 &&
            EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 && EVP_EncryptUpdate(ctx, out.data(), &len, in.data(), 16) == 1 &&
            EVP_EncryptFinal_ex(ctx, out.data() + len, &fin) == 1 && len + fin == 16;
  EVP_CIPHER_CTX_free(ctx);
  if (!ok) throw std::runtime_error("AES-256-ECB failed");
  return out;
}

// H = AES_K(0^128).
inline Gf128 GcmHashKey(std::span<const uint8_t> key) {
  const std::array<uint8_t, 16> zero{};
  return GfLoad(Aes256Block(key, zero).data());
}

// GHASH_H(A, C): blocks of A then C, each zero-padded, then len(A)||len(C) in bits.
inline Gf128 Ghash(Gf128 h, std::span<const uint8_t> aad, std::span<const uint8_t> ct) {
  Gf128 x;
  auto absorb = [&](std::span<const uint8_t> data) {
    for (size_t off = 0; off < data.size(); off += 16) {
      uint8_t block[16] = {0};
      for (size_t i = 0; i < 16 && off + i < data.size(); ++i) block[i] = data[off + i];
      x = GfMul(x ^ GfLoad(block), h);
    }
  };
  absorb(aad);
  absorb(ct);
  Gf128 len{static_cast<uint64_t>(aad.size()) * 8, static_cast<uint64_t>(ct.size()) * 8};
  return GfMul(x ^ len, h);
}

// The tag of (nonce, aad, ct) under key: GHASH_H(A, C) xor AES_K(J0), J0 = nonce || 0^31 || 1.
inline std::array<uint8_t, 16> GcmTag(std::span<const uint8_t> key, std::span<const uint8_t> nonce,
                                      std::span<const uint8_t> aad, std::span<const uint8_t> ct) {
  if (nonce.size() != 12) throw std::runtime_error("GCM model: 96-bit nonces only");
  std::array<uint8_t, 16> j0{};
  for (int i = 0; i < 12; ++i) j0[i] = nonce[i];
  j0[15] = 1;
  const Gf128 s = GfLoad(Aes256Block(key, j0).data());
  return GfStore(Ghash(GcmHashKey(key), aad, ct) ^ s);
}

// Sets ciphertext block `free_block` of `ct` (whole 16-byte blocks only) so that
// (nonce, aad, ct, tag) is a valid AES-256-GCM message under both key1 and key2, and
// returns that tag. GHASH is linear in each block: with C_j the free block at position p
// of the m GHASH blocks (AAD blocks, ciphertext blocks, length block), it contributes
// C_j * H^(m-p), so tag1 == tag2 is C_j * (H1^e + H2^e) = T1(0) + T2(0), with
// Tk(0) the tag under key k with C_j = 0.
inline std::array<uint8_t, 16> CraftTwoKeyGcm(std::span<const uint8_t> key1, std::span<const uint8_t> key2,
                                              std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
                                              std::vector<uint8_t>* ct, size_t free_block) {
  if (ct->size() % 16 != 0 || (free_block + 1) * 16 > ct->size()) throw std::runtime_error("bad block layout");
  std::fill(ct->begin() + static_cast<long>(free_block * 16), ct->begin() + static_cast<long>(free_block * 16 + 16), 0);
  const uint64_t aad_blocks = (aad.size() + 15) / 16;
  const uint64_t m = aad_blocks + ct->size() / 16 + 1;
  const uint64_t e = m - (aad_blocks + free_block);
  const Gf128 h1e = GfPow(GcmHashKey(key1), e), h2e = GfPow(GcmHashKey(key2), e);
  const Gf128 t1 = GfLoad(GcmTag(key1, nonce, aad, *ct).data());
  const Gf128 t2 = GfLoad(GcmTag(key2, nonce, aad, *ct).data());
  const Gf128 cj = GfMul(t1 ^ t2, GfInverse(h1e ^ h2e));
  const auto cj_bytes = GfStore(cj);
  std::copy(cj_bytes.begin(), cj_bytes.end(), ct->begin() + static_cast<long>(free_block * 16));
  return GfStore(t1 ^ GfMul(cj, h1e));
}

}  // namespace enclave::crypto::testing
