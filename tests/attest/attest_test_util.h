// Test-side encoders for TPM structures and event logs, written from TPM 2.0 Part 2 and
// the TCG PC Client PFP independently of attest/ (no library encoder is used), and a
// test-side "TPM" that signs a TPMS_ATTEST as TPM2_Quote does: H(attest bytes), then
// ECDSA P-256 or RSASSA-PKCS1-v1_5 / RSA-PSS, with a key OpenSSL made in the test.
#pragma once

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace attest_test {

using Bytes = std::vector<uint8_t>;

struct Be {
  Bytes b;
  Be& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Be& u16(uint16_t v) {
    b.push_back(uint8_t(v >> 8));
    b.push_back(uint8_t(v));
    return *this;
  }
  Be& u32(uint32_t v) {
    for (int i = 3; i >= 0; --i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Be& u64(uint64_t v) {
    for (int i = 7; i >= 0; --i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Be& raw(const Bytes& x) {
    b.insert(b.end(), x.begin(), x.end());
    return *this;
  }
  Be& tpm2b(const Bytes& x) {
    u16(uint16_t(x.size()));
    return raw(x);
  }
};
struct Le {
  Bytes b;
  Le& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Le& u16(uint16_t v) {
    for (int i = 0; i < 2; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Le& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Le& raw(const Bytes& x) {
    b.insert(b.end(), x.begin(), x.end());
    return *this;
  }
  Le& str(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

inline Bytes Digest(const EVP_MD* md, const Bytes& data) {
  Bytes out(EVP_MD_get_size(md));
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &n, md, nullptr) != 1) throw std::runtime_error("EVP_Digest");
  return out;
}
inline Bytes Sha256(const Bytes& d) { return Digest(EVP_sha256(), d); }
inline Bytes Sha1(const Bytes& d) { return Digest(EVP_sha1(), d); }
inline Bytes Cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// TPMA_OBJECT of a tpm2_createak key: fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|restricted|sign.
constexpr uint32_t kAkAttributes = 0x2 | 0x10 | 0x20 | 0x40 | 0x10000 | 0x40000;

// One bank of a TPML_PCR_SELECTION: hash, 3-byte bitmap.
struct Sel {
  uint16_t hash;
  std::vector<uint32_t> pcrs;
};
inline void EncodeSelection(Be& w, const std::vector<Sel>& sels) {
  w.u32(uint32_t(sels.size()));
  for (const auto& s : sels) {
    uint8_t bits[3] = {0, 0, 0};
    for (uint32_t i : s.pcrs) bits[i / 8] |= uint8_t(1u << (i % 8));
    w.u16(s.hash).u8(3).u8(bits[0]).u8(bits[1]).u8(bits[2]);
  }
}

struct AttestFields {
  uint32_t magic = 0xFF544347;
  uint16_t type = 0x8018;
  Bytes signer = Bytes(34, 0xAB);
  Bytes extra;
  uint64_t clock = 1000;
  uint32_t reset = 5, restart = 2;
  uint8_t safe = 1;
  uint64_t firmware = 0x2019081600000000ull;
  std::vector<Sel> sel;
  Bytes pcr_digest;
};
inline Bytes EncodeAttest(const AttestFields& f) {
  Be w;
  w.u32(f.magic).u16(f.type).tpm2b(f.signer).tpm2b(f.extra).u64(f.clock).u32(f.reset).u32(f.restart).u8(f.safe).u64(
      f.firmware);
  EncodeSelection(w, f.sel);
  w.tpm2b(f.pcr_digest);
  return w.b;
}

using Pkey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
inline Pkey MakeEcKey(const char* group = "P-256") {
  return Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", group), EVP_PKEY_free);
}
inline Pkey MakeRsaKey(unsigned bits = 2048) {
  return Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{bits}), EVP_PKEY_free);
}

inline Bytes BnBytes(const BIGNUM* bn, size_t len) {
  Bytes out(len);
  if (BN_bn2binpad(bn, out.data(), int(len)) != int(len)) throw std::runtime_error("BN_bn2binpad");
  return out;
}

struct AkOptions {
  uint32_t attributes = kAkAttributes;
  uint16_t name_alg = 0x000B;
  uint16_t scheme = 0;  // 0: the natural one (ECDSA / RSASSA)
  uint16_t scheme_hash = 0x000B;
  uint16_t curve = 0x0003;
};

// TPMT_PUBLIC of an AK holding `key`'s public part.
inline Bytes EncodeAkPublic(EVP_PKEY* key, const AkOptions& o = {}) {
  Be w;
  bool ec = EVP_PKEY_is_a(key, "EC");
  w.u16(ec ? 0x0023 : 0x0001).u16(o.name_alg).u32(o.attributes).tpm2b({});
  w.u16(0x0010);  // symmetric: TPM_ALG_NULL
  if (ec) {
    w.u16(o.scheme ? o.scheme : 0x0018).u16(o.scheme_hash).u16(o.curve).u16(0x0010);  // scheme, curve, kdf NULL
    BIGNUM *x = nullptr, *y = nullptr;
    EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_X, &x);
    EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_Y, &y);
    size_t len = size_t(EVP_PKEY_get_bits(key) + 7) / 8;
    w.tpm2b(BnBytes(x, len)).tpm2b(BnBytes(y, len));
    BN_free(x);
    BN_free(y);
  } else {
    BIGNUM* n = nullptr;
    EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_RSA_N, &n);
    int bits = EVP_PKEY_get_bits(key);
    w.u16(o.scheme ? o.scheme : 0x0014).u16(o.scheme_hash).u16(uint16_t(bits)).u32(0);
    w.tpm2b(BnBytes(n, size_t(bits) / 8));
    BN_free(n);
  }
  return w.b;
}

// TPMT_SIGNATURE over `attest`, as a TPM signs: digest = H(attest), then the scheme.
inline Bytes SignAttest(EVP_PKEY* key, const Bytes& attest, uint16_t sig_alg = 0, uint16_t hash = 0x000B) {
  const EVP_MD* md = hash == 0x0004 ? EVP_sha1() : hash == 0x000C ? EVP_sha384() : EVP_sha256();
  bool ec = EVP_PKEY_is_a(key, "EC");
  if (sig_alg == 0) sig_alg = ec ? 0x0018 : 0x0014;
  Bytes digest = Digest(md, attest);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(EVP_PKEY_CTX_new(key, nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY_sign_init(ctx.get());
  EVP_PKEY_CTX_set_signature_md(ctx.get(), md);
  if (sig_alg == 0x0014) EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_PADDING);
  if (sig_alg == 0x0016) {
    EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_PSS_PADDING);
    EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx.get(), RSA_PSS_SALTLEN_DIGEST);
  }
  size_t len = 0;
  EVP_PKEY_sign(ctx.get(), nullptr, &len, digest.data(), digest.size());
  Bytes sig(len);
  if (EVP_PKEY_sign(ctx.get(), sig.data(), &len, digest.data(), digest.size()) != 1) throw std::runtime_error("sign");
  sig.resize(len);
  Be w;
  w.u16(sig_alg).u16(hash);
  if (ec) {
    const uint8_t* p = sig.data();
    ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, long(sig.size()));
    size_t clen = size_t(EVP_PKEY_get_bits(key) + 7) / 8;
    w.tpm2b(BnBytes(ECDSA_SIG_get0_r(es), clen)).tpm2b(BnBytes(ECDSA_SIG_get0_s(es), clen));
    ECDSA_SIG_free(es);
  } else {
    w.tpm2b(sig);
  }
  return w.b;
}

// ---- event logs (little-endian) ----
struct LogEvent {
  uint32_t pcr;
  uint32_t type;
  Bytes data;
};

// Crypto-agile log with SHA-1 and SHA-256 banks; digests = H(data) unless overridden.
inline Bytes CryptoAgileLog(const std::vector<LogEvent>& events,
                            const std::vector<std::pair<uint16_t, uint16_t>>& algs = {{0x0004, 20}, {0x000B, 32}}) {
  Le spec;
  spec.str(std::string("Spec ID Event03", 16)).u32(0).u8(0).u8(2).u8(0).u8(2).u32(uint32_t(algs.size()));
  for (auto [id, size] : algs) spec.u16(id).u16(size);
  spec.u8(0);
  Le w;
  w.u32(0).u32(3).raw(Bytes(20, 0)).u32(uint32_t(spec.b.size())).raw(spec.b);
  for (const auto& e : events) {
    w.u32(e.pcr).u32(e.type).u32(uint32_t(algs.size()));
    for (auto [id, size] : algs) {
      const EVP_MD* md = id == 0x0004   ? EVP_sha1()
                         : id == 0x000B ? EVP_sha256()
                         : id == 0x000C ? EVP_sha384()
                                        : EVP_sha512();
      Bytes d = Digest(md, e.data);
      d.resize(size);
      w.u16(id).raw(d);
    }
    w.u32(uint32_t(e.data.size())).raw(e.data);
  }
  return w.b;
}

inline Bytes LegacyLog(const std::vector<LogEvent>& events) {
  Le w;
  for (const auto& e : events) w.u32(e.pcr).u32(e.type).raw(Sha1(e.data)).u32(uint32_t(e.data.size())).raw(e.data);
  return w.b;
}

// Independent replay for the test: bank md, events that extend, initial zero (0xFF for
// 17-22), optional PCR 0 locality.
inline std::map<uint32_t, Bytes> TinyReplay(const EVP_MD* md, const std::vector<LogEvent>& events, int locality = -1) {
  std::map<uint32_t, Bytes> pcrs;
  size_t size = size_t(EVP_MD_get_size(md));
  for (const auto& e : events) {
    if (e.type == 3) continue;
    if (!pcrs.count(e.pcr)) {
      Bytes init(size, (e.pcr >= 17 && e.pcr <= 22) ? 0xFF : 0);
      if (e.pcr == 0 && locality >= 0) init.back() = uint8_t(locality);
      pcrs[e.pcr] = init;
    }
    pcrs[e.pcr] = Digest(md, Cat(pcrs[e.pcr], Digest(md, e.data)));
  }
  return pcrs;
}

inline Bytes StrBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace attest_test
