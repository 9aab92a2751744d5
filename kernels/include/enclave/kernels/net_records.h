// The encrypted NCCL transport's records (docs/formats/net-transport.md, "Records") as
// host+device functions, for sealing and opening records of device buffers on the GPU
// (issue 21 §1) with the same bytes the CPU transport sends and expects: AES-256-GCM,
// nonce = the record's seq as a little-endian u64 then 00 00 00 00, associated data = the
// 32 header bytes, ciphertext || 16-byte tag. The per-unit shape (64 bytes of keystream
// per call) is the one the sealed-chunk kernels use, so one GPU thread per unit can do it.
// On the CPU these compile as plain inline functions: tests/kernels/net_records_test.cc
// checks them byte for byte against the transport's OpenSSL code (net/src/wire.h).
#pragma once

#include <cstdint>
#include <vector>

#include "enclave/kernels/aes256_gcm.h"
#include "enclave/kernels/chacha20_poly1305.h"  // TagsEqual
#include "enclave/kernels/chunk_math.h"         // kUnitBytes
#include "enclave/kernels/gpu_tag_split.h"
#include "enclave/kernels/hd.h"

namespace enclave::kernels {

inline constexpr uint64_t kNetRecordHeaderBytes = 32;
inline constexpr uint64_t kNetRecordTagBytes = 16;

// One direction's record key, expanded: AES-256 round keys and the GHASH key E_K(0).
struct NetRecordKey {
  Aes256RoundKeys rk;
  Gf128 h;
};

ENCLAVE_HD void NetRecordKeyOf(const uint8_t key[32], const uint32_t* te, NetRecordKey* out) {
  Aes256ExpandKey(key, te, &out->rk);
  const uint8_t zero[16] = {};
  uint8_t h[16];
  Aes256EncryptBlock(out->rk, te, zero, h);
  out->h = Gf128Load(h);
}

ENCLAVE_HD void NetRecordNonce(uint64_t seq, uint8_t nonce[12]) {
  for (int i = 0; i < 8; ++i) nonce[i] = static_cast<uint8_t>(seq >> (8 * i));
  nonce[8] = nonce[9] = nonce[10] = nonce[11] = 0;
}

// XORs the keystream of 64-byte unit `unit` of a record of `len` bytes into `out`:
// encrypts (in = plaintext) or decrypts (in = ciphertext).
ENCLAVE_HD void NetRecordXorUnit(const NetRecordKey& k, const uint32_t* te, uint64_t seq, const uint8_t* in,
                                 uint8_t* out, uint64_t len, uint64_t unit) {
  uint8_t nonce[12];
  NetRecordNonce(seq, nonce);
  const uint64_t offset = unit * kUnitBytes;
  const uint64_t n = len - offset < kUnitBytes ? len - offset : kUnitBytes;
  for (uint64_t b = 0; b * 16 < n; ++b) {
    const uint64_t m = n - b * 16 < 16 ? n - b * 16 : 16;
    Aes256GcmXorBlock(k.rk, te, nonce, static_cast<uint32_t>(unit * 4 + b), in + offset + b * 16,
                      out + offset + b * 16, static_cast<size_t>(m));
  }
}

// The tag over the header and `len` bytes of ciphertext.
ENCLAVE_HD void NetRecordTag(const NetRecordKey& k, const uint32_t* te, const uint8_t header[32], uint64_t seq,
                             const uint8_t* ct, uint64_t len, uint8_t tag[16]) {
  uint8_t nonce[12];
  NetRecordNonce(seq, nonce);
  Aes256GcmTag(k.rk, te, k.h, nonce, header, kNetRecordHeaderBytes, ct, static_cast<size_t>(len), tag);
}

// A whole record on one thread (the reference; tests): `out` gets len + 16 bytes.
ENCLAVE_HD void SealNetRecord(const NetRecordKey& k, const uint32_t* te, const uint8_t header[32], uint64_t seq,
                              const uint8_t* plain, uint64_t len, uint8_t* out) {
  for (uint64_t u = 0; u * kUnitBytes < len; ++u) NetRecordXorUnit(k, te, seq, plain, out, len, u);
  NetRecordTag(k, te, header, seq, out, len, out + len);
}

// Checks the tag of `record` (len bytes of ciphertext, then the tag) before anything is
// decrypted: false, and `out` untouched, when it does not match (constant-time compare).
ENCLAVE_HD bool OpenNetRecord(const NetRecordKey& k, const uint32_t* te, const uint8_t header[32], uint64_t seq,
                              const uint8_t* record, uint64_t len, uint8_t* out) {
  uint8_t tag[16];
  NetRecordTag(k, te, header, seq, record, len, tag);
  if (!TagsEqual(tag, record + len)) return false;
  for (uint64_t u = 0; u * kUnitBytes < len; ++u) NetRecordXorUnit(k, te, seq, record, out, len, u);
  return true;
}

// ---- The GPU's decomposition of a record (net_records_gpu.cu): one thread per 64-byte
// unit for the keystream, one per 512-byte segment for GHASH (gpu_tag_split.h), one
// thread to combine the segments into the tag. The same tag as NetRecordTag.

// One direction's key as the kernels take it (by value, as kernel parameters): the
// record key, the powers of H, and the 4-bit tables of H and H^32.
struct NetRecordDeviceKey {
  NetRecordKey key;
  GhashPowers powers;
  GhashTable table, table32;
};

inline void NetRecordDeviceKeyOf(const uint8_t key[32], NetRecordDeviceKey* out) {
  NetRecordKeyOf(key, kAesTable.t0, &out->key);
  GhashPowersOf(out->key.h, &out->powers);
  GhashTableOf(out->key.h, &out->table);
  GhashTableOf(out->powers.p[5], &out->table32);  // H^(2^5)
}

// The tag is combined by one block of kNetTagThreads threads: thread t combines its
// share of the segments (NetRecordSegmentShare), the shares are added, and one thread
// finishes the tag (NetRecordTagFromSum).
inline constexpr unsigned kNetTagThreads = 128;

ENCLAVE_HD Gf128 NetRecordSegmentShare(const NetRecordDeviceKey& k, const GhashTable& t32, uint64_t len,
                                       const TagPartial* parts, unsigned thread) {
  const uint64_t n = TagSegmentCount(len);
  const uint64_t first = n * thread / kNetTagThreads, last = n * (thread + 1) / kNetTagThreads;
  return GcmCombineSegments(k.powers, t32, (len + 15) / 16, parts, first, last);
}

ENCLAVE_HD void NetRecordTagFromSum(const NetRecordDeviceKey& k, const uint32_t* te, const uint8_t header[32],
                                    uint64_t seq, uint64_t len, Gf128 sum, uint8_t tag[16]) {
  uint8_t nonce[12];
  NetRecordNonce(seq, nonce);
  GcmTagFromSum(k.key.rk, k.key.h, te, k.powers, header, nonce, len, sum, tag);
}

// The tag from the segments' partial sums (TagSegmentCount(len) of them), combined in the
// kernel's shares.
inline void NetRecordTagFromSegments(const NetRecordDeviceKey& k, const uint8_t header[32], uint64_t seq, uint64_t len,
                                     const TagPartial* parts, uint8_t tag[16]) {
  Gf128 sum{0, 0};
  for (unsigned t = 0; t < kNetTagThreads; ++t) {
    const Gf128 share = NetRecordSegmentShare(k, k.table32, len, parts, t);
    sum.hi ^= share.hi;
    sum.lo ^= share.lo;
  }
  NetRecordTagFromSum(k, kAesTable.t0, header, seq, len, sum, tag);
}

// The kernels' steps, in their order, on one CPU thread: what CI runs of the GPU path
// (tests/kernels, and the stand-in device records of tests/net). Seal: keystream into
// `out`, segments over that ciphertext, the tag after it.
inline void SealNetRecordInSegments(const NetRecordDeviceKey& k, const uint8_t header[32], uint64_t seq,
                                    const uint8_t* plain, uint64_t len, uint8_t* out) {
  for (uint64_t u = 0; u * kUnitBytes < len; ++u) NetRecordXorUnit(k.key, kAesTable.t0, seq, plain, out, len, u);
  std::vector<TagPartial> parts(TagSegmentCount(len));
  for (uint64_t s = 0; s < parts.size(); ++s) GcmTagSegment(k.table, out, len, s, &parts[s]);
  NetRecordTagFromSegments(k, header, seq, len, parts.data(), out + len);
}

// Open: segments over the received ciphertext, the tag checked, and only then the
// keystream into `out`; false with `out` untouched when the tag does not match.
inline bool OpenNetRecordInSegments(const NetRecordDeviceKey& k, const uint8_t header[32], uint64_t seq,
                                    const uint8_t* record, uint64_t len, uint8_t* out) {
  std::vector<TagPartial> parts(TagSegmentCount(len));
  for (uint64_t s = 0; s < parts.size(); ++s) GcmTagSegment(k.table, record, len, s, &parts[s]);
  uint8_t tag[16];
  NetRecordTagFromSegments(k, header, seq, len, parts.data(), tag);
  if (!TagsEqual(tag, record + len)) return false;
  for (uint64_t u = 0; u * kUnitBytes < len; ++u) NetRecordXorUnit(k.key, kAesTable.t0, seq, record, out, len, u);
  return true;
}

}  // namespace enclave::kernels
