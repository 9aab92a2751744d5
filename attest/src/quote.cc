#include "enclave/attest/quote.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace enclave::attest {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using ParamBldPtr = std::unique_ptr<OSSL_PARAM_BLD, Deleter<OSSL_PARAM_BLD, OSSL_PARAM_BLD_free>>;
using ParamPtr = std::unique_ptr<OSSL_PARAM, Deleter<OSSL_PARAM, OSSL_PARAM_free>>;
using EcdsaSigPtr = std::unique_ptr<ECDSA_SIG, Deleter<ECDSA_SIG, ECDSA_SIG_free>>;

const char* CurveGroupName(uint16_t c) {
  switch (c) {
    case curve::kNistP256:
      return "prime256v1";
    case curve::kNistP384:
      return "secp384r1";
    case curve::kNistP521:
      return "secp521r1";
    default:
      return nullptr;
  }
}
size_t CurveBytes(uint16_t c) {
  switch (c) {
    case curve::kNistP256:
      return 32;
    case curve::kNistP384:
      return 48;
    case curve::kNistP521:
      return 66;
    default:
      return 0;
  }
}
std::string CurveName(uint16_t c) {
  switch (c) {
    case curve::kNistP256:
      return "nist_p256";
    case curve::kNistP384:
      return "nist_p384";
    case curve::kNistP521:
      return "nist_p521";
    default:
      return "curve 0x" + HexEncode(std::vector<uint8_t>{static_cast<uint8_t>(c >> 8), static_cast<uint8_t>(c)});
  }
}

const EVP_MD* Md(uint16_t hash) {
  switch (hash) {
    case alg::kSha1:
      return EVP_sha1();
    case alg::kSha256:
      return EVP_sha256();
    case alg::kSha384:
      return EVP_sha384();
    case alg::kSha512:
      return EVP_sha512();
    default:
      return nullptr;
  }
}

// The AK public as an OpenSSL key (the one wrapper around EVP_PKEY_fromdata).
Result<PkeyPtr> BuildPkey(const TpmtPublic& pub) {
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (!bld) return Internal("OSSL_PARAM_BLD_new failed");
  const char* type = nullptr;
  BnPtr n, e;
  std::vector<uint8_t> point;
  if (pub.type == alg::kRsa) {
    type = "RSA";
    if (pub.rsa_modulus.empty()) return InvalidInput("RSA modulus is empty");
    n.reset(BN_bin2bn(pub.rsa_modulus.data(), static_cast<int>(pub.rsa_modulus.size()), nullptr));
    e.reset(BN_new());
    if (!n || !e || BN_set_word(e.get(), pub.rsa_exponent == 0 ? 65537 : pub.rsa_exponent) != 1 ||
        OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) != 1 ||
        OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get()) != 1) {
      return Internal("building RSA key parameters failed");
    }
  } else if (pub.type == alg::kEcc) {
    type = "EC";
    const char* group = CurveGroupName(pub.ecc_curve);
    size_t len = CurveBytes(pub.ecc_curve);
    if (group == nullptr) return Unsupported("ECC " + CurveName(pub.ecc_curve) + " is not supported");
    if (pub.ecc_x.empty() || pub.ecc_y.empty() || pub.ecc_x.size() > len || pub.ecc_y.size() > len) {
      return InvalidInput("ECC point coordinates do not fit " + CurveName(pub.ecc_curve));
    }
    point.assign(1 + 2 * len, 0);
    point[0] = 0x04;  // uncompressed
    std::copy(pub.ecc_x.begin(), pub.ecc_x.end(), point.begin() + 1 + (len - pub.ecc_x.size()));
    std::copy(pub.ecc_y.begin(), pub.ecc_y.end(), point.begin() + 1 + len + (len - pub.ecc_y.size()));
    if (OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0) != 1 ||
        OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()) != 1) {
      return Internal("building EC key parameters failed");
    }
  } else {
    return Unsupported("key type " + AlgName(pub.type));
  }
  ParamPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1) return Internal("EVP_PKEY_fromdata_init failed");
  EVP_PKEY* raw = nullptr;
  if (EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1 || raw == nullptr) {
    return InvalidInput(std::string("EVP_PKEY_fromdata refused the ") + type + " public key");
  }
  PkeyPtr key(raw);
  PkeyCtxPtr check(EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
  if (!check || EVP_PKEY_public_check(check.get()) != 1) {
    return InvalidInput(std::string("EVP_PKEY_public_check rejected the ") + type + " public key");
  }
  return key;
}

// The key of a TPM public area, checked (EVP_PKEY_public_check: for EC a point
// multiplication). Keys that passed are kept (at most 1024; then the cache starts over):
// a broker checks the same few hundred AKs for every quote. EVP_PKEYs are reference-counted
// and safe to share between threads for verification.
Result<PkeyPtr> ToPkey(const TpmtPublic& pub) {
  std::string id(1, static_cast<char>(pub.type));
  auto add = [&](const std::vector<uint8_t>& b) {
    id += std::to_string(b.size()) + ":";
    id.append(b.begin(), b.end());
  };
  add(pub.rsa_modulus);
  id += std::to_string(pub.rsa_exponent) + "/" + std::to_string(pub.ecc_curve) + "/";
  add(pub.ecc_x);
  add(pub.ecc_y);
  static std::mutex mu;
  static std::map<std::string, PkeyPtr> checked;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (auto it = checked.find(id); it != checked.end() && EVP_PKEY_up_ref(it->second.get()) == 1)
      return PkeyPtr(it->second.get());
  }
  ASSIGN_OR_RETURN(PkeyPtr key, BuildPkey(pub));
  std::lock_guard<std::mutex> lk(mu);
  if (checked.size() >= 1024) checked.clear();
  if (EVP_PKEY_up_ref(key.get()) == 1) checked.emplace(id, PkeyPtr(key.get()));
  return key;
}

std::string Hex(ByteSpan b) { return b.empty() ? "(empty)" : HexEncode(b); }

bool HashAtLeast(uint16_t hash, uint16_t min_hash) {
  return IsSupportedHash(hash) && HashSize(hash) >= HashSize(min_hash);
}

// hash -> bitmap, empty banks dropped: the set a selection denotes.
std::map<uint16_t, uint32_t> SelectionSet(const PcrSelection& s) {
  std::map<uint16_t, uint32_t> m;
  for (const auto& b : s.banks) {
    if (b.select != 0) m[b.hash] |= b.select;
  }
  return m;
}

}  // namespace

namespace {

// CheckAkPublic, also handing out the loaded key so that AppraiseQuote loads (and
// public-checks, a scalar multiplication for EC) the AK once, not twice.
// Key only (a bare public key): the key's own checks (size, curve, validity) run; those
// that need the TPMT_PUBLIC are not evaluated.
Appraisal CheckAkKeyOnly(const TpmtPublic& ak, const AkPolicy& policy, PkeyPtr* key_out) {
  Appraisal a;
  const std::string why = "the AK is known by its public key only (no TPMT_PUBLIC)";
  for (const char* c : {"ak.attributes", "ak.name_alg", "ak.symmetric", "ak.scheme", "ak.scheme.hash"})
    a.NotEvaluated(c, why);
  if (ak.type == alg::kRsa) {
    if (ak.rsa_key_bits >= policy.min_rsa_bits) {
      a.Pass("ak.rsa.key_bits");
    } else {
      a.Fail("ak.rsa.key_bits.too_small", "public key", ">= " + std::to_string(policy.min_rsa_bits),
             std::to_string(ak.rsa_key_bits));
    }
  } else if (ak.type == alg::kEcc) {
    bool allowed = false;
    for (uint16_t c : policy.ecc_curves) allowed |= c == ak.ecc_curve;
    if (allowed && CurveGroupName(ak.ecc_curve) != nullptr) {
      a.Pass("ak.ecc.curve");
    } else {
      a.Fail("ak.ecc.curve.not_allowed", "public key", "one of the policy's ak.ecc_curves", CurveName(ak.ecc_curve));
    }
  } else {
    a.Fail("ak.type.unsupported", "public key", "rsa or ecc", AlgName(ak.type));
    return a;
  }
  auto key = ToPkey(ak);
  if (key.ok()) {
    a.Pass("ak.public");
    if (key_out != nullptr) *key_out = std::move(*key);
  } else {
    a.Fail("ak.public.invalid", "public key", "a valid public key", key.status().message());
  }
  return a;
}

Appraisal CheckAkImpl(const TpmtPublic& ak, const AkPolicy& policy, PkeyPtr* key_out) {
  Appraisal a;
  const std::string attrs = ObjectAttributesString(ak.object_attributes);
  static const std::pair<uint32_t, const char*> kRequired[] = {{attr::kFixedTpm, "fixed_tpm"},
                                                               {attr::kFixedParent, "fixed_parent"},
                                                               {attr::kSensitiveDataOrigin, "sensitive_data_origin"},
                                                               {attr::kRestricted, "restricted"},
                                                               {attr::kSign, "sign"}};
  size_t before = a.failures().size();
  for (auto [bit, name] : kRequired) {
    if (!(ak.object_attributes & bit))
      a.Fail(std::string("ak.attributes.") + name + ".missing", "objectAttributes", "set", attrs);
  }
  if (ak.object_attributes & attr::kDecrypt) a.Fail("ak.attributes.decrypt.set", "objectAttributes", "clear", attrs);
  if (a.failures().size() == before) a.Pass("ak.attributes");

  if (HashAtLeast(ak.name_alg, policy.min_hash)) {
    a.Pass("ak.name_alg");
  } else {
    a.Fail("ak.name_alg.weak", "nameAlg", AlgName(policy.min_hash) + " or stronger", AlgName(ak.name_alg));
  }
  if (ak.symmetric.algorithm == alg::kNull) {
    a.Pass("ak.symmetric");
  } else {
    a.Fail("ak.symmetric.not_null", "parameters.symmetric", "null", AlgName(ak.symmetric.algorithm));
  }

  if (ak.type == alg::kRsa) {
    if (ak.rsa_key_bits >= policy.min_rsa_bits) {
      a.Pass("ak.rsa.key_bits");
    } else {
      a.Fail("ak.rsa.key_bits.too_small", "parameters.rsaDetail.keyBits", ">= " + std::to_string(policy.min_rsa_bits),
             std::to_string(ak.rsa_key_bits));
    }
    if (ak.rsa_modulus.size() * 8 == ak.rsa_key_bits) {
      a.Pass("ak.rsa.modulus");
    } else {
      a.Fail("ak.rsa.modulus.size_mismatch", "unique.rsa", std::to_string(ak.rsa_key_bits / 8) + " bytes",
             std::to_string(ak.rsa_modulus.size()) + " bytes");
    }
    if (ak.scheme.scheme == alg::kRsassa || ak.scheme.scheme == alg::kRsapss) {
      a.Pass("ak.scheme");
    } else {
      a.Fail("ak.scheme.invalid", "parameters.rsaDetail.scheme", "rsassa or rsapss", AlgName(ak.scheme.scheme));
    }
  } else if (ak.type == alg::kEcc) {
    bool allowed = false;
    for (uint16_t c : policy.ecc_curves) allowed |= c == ak.ecc_curve;
    if (allowed && CurveGroupName(ak.ecc_curve) != nullptr) {
      a.Pass("ak.ecc.curve");
    } else {
      a.Fail("ak.ecc.curve.not_allowed", "parameters.eccDetail.curveID", "nist_p256 or larger",
             CurveName(ak.ecc_curve));
    }
    if (ak.scheme.scheme == alg::kEcdsa) {
      a.Pass("ak.scheme");
    } else {
      a.Fail("ak.scheme.invalid", "parameters.eccDetail.scheme", "ecdsa", AlgName(ak.scheme.scheme));
    }
  } else {
    a.Fail("ak.type.unsupported", "type", "rsa or ecc", AlgName(ak.type));
    return a;
  }
  if (ak.scheme.scheme != alg::kNull) {
    if (HashAtLeast(ak.scheme.hash, policy.min_hash)) {
      a.Pass("ak.scheme.hash");
    } else {
      a.Fail("ak.scheme.hash.weak", "scheme.details.hashAlg", AlgName(policy.min_hash) + " or stronger",
             AlgName(ak.scheme.hash));
    }
  }
  auto key = ToPkey(ak);
  if (key.ok()) {
    a.Pass("ak.public");
    if (key_out != nullptr) *key_out = std::move(*key);
  } else {
    a.Fail("ak.public.invalid", "unique", "a valid public key", key.status().message());
  }
  return a;
}

// VerifyQuoteSignature with the AK already loaded (`key`), or loading it (null). With
// `key_only`, the AK's scheme is unknown: the no-downgrade check is not evaluated, and any
// scheme of the key's type with a hash of at least `min_hash` is accepted.
Appraisal VerifySignatureImpl(const TpmtPublic& ak, EVP_PKEY* key, ByteSpan attest_bytes, const TpmtSignature& sig,
                              uint16_t min_hash, bool key_only = false);

}  // namespace

Appraisal CheckAkPublic(const TpmtPublic& ak, const AkPolicy& policy) { return CheckAkImpl(ak, policy, nullptr); }

Appraisal VerifyQuoteSignature(const TpmtPublic& ak, ByteSpan attest_bytes, const TpmtSignature& sig,
                               uint16_t min_hash) {
  return VerifySignatureImpl(ak, nullptr, attest_bytes, sig, min_hash);
}

namespace {
Appraisal VerifySignatureImpl(const TpmtPublic& ak, EVP_PKEY* prebuilt, ByteSpan attest_bytes,
                              const TpmtSignature& sig, uint16_t min_hash, bool key_only) {
  Appraisal a;
  if (key_only) {
    a.NotEvaluated("quote.signature.scheme",
                   "the AK's signing scheme is unknown for a bare public key (no downgrade check)");
  } else {
    // No downgrade: the signature must use exactly the AK's (restricted) scheme and hash.
    if (ak.scheme.scheme == alg::kNull || sig.sig_alg != ak.scheme.scheme) {
      a.Fail("quote.signature.scheme.mismatch", "TPMT_SIGNATURE.sigAlg", AlgName(ak.scheme.scheme),
             AlgName(sig.sig_alg));
    }
    if (sig.hash != ak.scheme.hash) {
      a.Fail("quote.signature.hash.mismatch", "TPMT_SIGNATURE.hash", AlgName(ak.scheme.hash), AlgName(sig.hash));
    }
  }
  if (!HashAtLeast(sig.hash, min_hash)) {
    a.Fail("quote.signature.hash.weak", "TPMT_SIGNATURE.hash", AlgName(min_hash) + " or stronger", AlgName(sig.hash));
  }
  bool key_fits = (ak.type == alg::kRsa && (sig.sig_alg == alg::kRsassa || sig.sig_alg == alg::kRsapss)) ||
                  (ak.type == alg::kEcc && sig.sig_alg == alg::kEcdsa);
  if (!key_fits)
    a.Fail("quote.signature.key_type.mismatch", "TPMT_SIGNATURE.sigAlg", AlgName(ak.type), AlgName(sig.sig_alg));
  if (!a.failures().empty()) return a;

  auto fail_invalid = [&](const std::string& why) {
    a.Fail("quote.signature.invalid", "TPMT_SIGNATURE", "a valid signature by the AK", why);
    return a;
  };
  PkeyPtr loaded;
  EVP_PKEY* key = prebuilt;
  if (key == nullptr) {
    auto k = ToPkey(ak);
    if (!k.ok()) return fail_invalid("AK public unusable: " + k.status().message());
    loaded = std::move(*k);
    key = loaded.get();
  }
  auto digest = Hash(sig.hash, {attest_bytes});
  if (!digest.ok()) return fail_invalid(digest.status().message());

  std::vector<uint8_t> der;
  ByteSpan sig_bytes;
  if (sig.sig_alg == alg::kEcdsa) {
    EcdsaSigPtr es(ECDSA_SIG_new());
    BIGNUM* r = BN_bin2bn(sig.ecc_r.data(), static_cast<int>(sig.ecc_r.size()), nullptr);
    BIGNUM* s = BN_bin2bn(sig.ecc_s.data(), static_cast<int>(sig.ecc_s.size()), nullptr);
    if (!es || !r || !s || ECDSA_SIG_set0(es.get(), r, s) != 1) {
      BN_free(r);
      BN_free(s);
      return fail_invalid("ECDSA_SIG_set0 failed");
    }
    int len = i2d_ECDSA_SIG(es.get(), nullptr);
    if (len <= 0) return fail_invalid("i2d_ECDSA_SIG failed");
    der.resize(static_cast<size_t>(len));
    uint8_t* p = der.data();
    if (i2d_ECDSA_SIG(es.get(), &p) != len) return fail_invalid("i2d_ECDSA_SIG failed");
    sig_bytes = der;
  } else {
    sig_bytes = sig.rsa_signature;
  }
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key, nullptr));
  if (!ctx || EVP_PKEY_verify_init(ctx.get()) != 1 || EVP_PKEY_CTX_set_signature_md(ctx.get(), Md(sig.hash)) != 1) {
    return fail_invalid("EVP_PKEY_verify_init failed");
  }
  if (sig.sig_alg == alg::kRsassa && EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_PADDING) != 1) {
    return fail_invalid("EVP_PKEY_CTX_set_rsa_padding failed");
  }
  if (sig.sig_alg == alg::kRsapss) {
    // TPMs use a salt of the hash size or the largest that fits (older revisions):
    // accept any salt length, MGF1 with the same hash.
    if (EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_PSS_PADDING) != 1 ||
        EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx.get(), RSA_PSS_SALTLEN_AUTO) != 1 ||
        EVP_PKEY_CTX_set_rsa_mgf1_md(ctx.get(), Md(sig.hash)) != 1) {
      return fail_invalid("setting RSA-PSS parameters failed");
    }
  }
  int rc = EVP_PKEY_verify(ctx.get(), sig_bytes.data(), sig_bytes.size(), digest->data(), digest->size());
  if (rc != 1) return fail_invalid("EVP_PKEY_verify: signature does not verify");
  a.Pass("quote.signature");
  return a;
}
}  // namespace

Result<std::vector<uint8_t>> ComputePcrDigest(uint16_t hash, const PcrSelection& sel, const PcrValues& values) {
  if (!IsSupportedHash(hash)) return Unsupported("PCR digest hash " + AlgName(hash));
  std::vector<uint8_t> concat;
  for (const auto& bank : sel.banks) {
    size_t size = HashSize(bank.hash);
    if (size == 0) return Unsupported("PCR bank " + AlgName(bank.hash));
    auto it = values.find(bank.hash);
    for (uint32_t i : PcrSelection::Indices(bank)) {
      const std::vector<uint8_t>* v = nullptr;
      if (it != values.end()) {
        auto jt = it->second.find(i);
        if (jt != it->second.end()) v = &jt->second;
      }
      if (v == nullptr) return InvalidInput("no value for " + AlgName(bank.hash) + " PCR " + std::to_string(i));
      if (v->size() != size) {
        return InvalidInput(AlgName(bank.hash) + " PCR " + std::to_string(i) + " has " + std::to_string(v->size()) +
                            " bytes, not " + std::to_string(size));
      }
      concat.insert(concat.end(), v->begin(), v->end());
    }
  }
  return Hash(hash, {concat});
}

Result<TpmsAttest> QuotedAttest(const QuoteEvidence& evidence) { return ParseTpmsAttest(evidence.attest); }

namespace {
// The PCR selection, reported values and digest of a TPMS_QUOTE_INFO; the clock rules.
void CheckQuotedPcrs(const TpmsAttest& quote, const QuoteEvidence& ev, const QuoteExpectations& expect,
                     uint16_t digest_hash, Appraisal* out);
void CheckClock(const ClockInfo& c, const QuoteExpectations& expect, Appraisal* out);
}  // namespace

Appraisal AppraiseQuote(const TpmtPublic& ak, const QuoteEvidence& ev, const QuoteExpectations& expect) {
  PkeyPtr key;
  const bool key_only = expect.ak_known == AkKnowledge::kKeyOnly;
  Appraisal a = key_only ? CheckAkKeyOnly(ak, expect.ak_policy, &key) : CheckAkImpl(ak, expect.ak_policy, &key);
  // Every check that does not depend on another runs, so that the verdict lists every
  // failure: the signature is over the bytes, whatever they parse to, and a TPMS_ATTEST of
  // another type still has the header's qualifying data and clock.
  auto hex = [](uint64_t v, int bytes) {
    std::vector<uint8_t> b;
    for (int i = bytes - 1; i >= 0; --i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return HexEncode(b);
  };
  auto attest = ParseTpmsAttest(ev.attest);
  bool is_quote = false;
  if (!attest.ok()) {
    a.Fail("quote.attest.malformed", "TPMS_ATTEST", "a well-formed TPMS_ATTEST", attest.status().message());
  } else {
    a.Pass("quote.attest.parse");
    if (attest->magic == kTpmGeneratedValue) {
      a.Pass("quote.magic");
    } else {
      a.Fail("quote.magic.mismatch", "TPMS_ATTEST.magic", "ff544347", hex(attest->magic, 4));
    }
    // Another type has no TPMS_QUOTE_INFO: only the PCR checks below would mean nothing.
    is_quote = attest->type == kTpmStAttestQuote;
    if (is_quote) {
      a.Pass("quote.type");
    } else {
      a.Fail("quote.type.mismatch", "TPMS_ATTEST.type", "8018 (TPM_ST_ATTEST_QUOTE)", hex(attest->type, 2));
    }
  }

  uint16_t digest_hash = ak.scheme.hash;
  auto sig = ParseTpmtSignature(ev.signature);
  if (!sig.ok()) {
    a.Fail("quote.signature.malformed", "TPMT_SIGNATURE", "a well-formed TPMT_SIGNATURE", sig.status().message());
  } else {
    a.Merge(VerifySignatureImpl(ak, key.get(), ev.attest, *sig, expect.ak_policy.min_hash, key_only));
    digest_hash = sig->hash;
  }
  if (!attest.ok()) return a;

  if (expect.extra_data.empty()) {
    a.Fail("quote.extra_data.unset", "expectations", "a nonce-bound qualifying data", "(empty)");
  } else if (attest->extra_data == expect.extra_data) {
    a.Pass("quote.extra_data");
  } else {
    a.Fail("quote.extra_data.mismatch", "TPMS_ATTEST.extraData", Hex(expect.extra_data), Hex(attest->extra_data));
  }

  if (is_quote) CheckQuotedPcrs(*attest, ev, expect, digest_hash, &a);
  CheckClock(attest->clock_info, expect, &a);
  return a;
}

namespace {

void CheckQuotedPcrs(const TpmsAttest& quote, const QuoteEvidence& ev, const QuoteExpectations& expect,
                     uint16_t digest_hash, Appraisal* out) {
  Appraisal& a = *out;
  const TpmsAttest* attest = &quote;
  const auto quoted_set = SelectionSet(attest->quote_selection);
  if (SelectionSet(expect.selection).empty()) {
    a.Fail("quote.pcr_selection.unset", "expectations", "a non-empty PCR selection", "(empty)");
  } else if (quoted_set == SelectionSet(expect.selection)) {
    a.Pass("quote.pcr_selection");
  } else {
    a.Fail("quote.pcr_selection.mismatch", "TPMS_QUOTE_INFO.pcrSelect", expect.selection.ToString(),
           attest->quote_selection.ToString());
  }

  // The reported values must be exactly the quoted set, each of its bank's size.
  bool values_ok = true;
  for (const auto& [bank, pcrs] : ev.pcrs) {
    auto it = quoted_set.find(bank);
    for (const auto& [idx, value] : pcrs) {
      std::string where = AlgName(bank) + " PCR " + std::to_string(idx);
      if (it == quoted_set.end() || idx >= 32 || !(it->second & (1u << idx))) {
        a.Fail("quote.pcr_values.unselected", where, "only quoted PCRs", "a value for an unquoted PCR");
        values_ok = false;
      } else if (value.size() != HashSize(bank)) {
        a.Fail("quote.pcr_values.size", where, std::to_string(HashSize(bank)) + " bytes",
               std::to_string(value.size()) + " bytes");
        values_ok = false;
      }
    }
  }
  for (const auto& [bank, bits] : quoted_set) {
    if (!IsSupportedHash(bank)) {
      a.Fail("quote.pcr_selection.bank_unsupported", AlgName(bank), "sha1, sha256, sha384 or sha512", AlgName(bank));
      values_ok = false;
      continue;
    }
    auto it = ev.pcrs.find(bank);
    for (uint32_t i = 0; i < 32; ++i) {
      if (!(bits & (1u << i))) continue;
      if (it == ev.pcrs.end() || !it->second.count(i)) {
        a.Fail("quote.pcr_values.missing", AlgName(bank) + " PCR " + std::to_string(i), "a value", "none");
        values_ok = false;
      }
    }
  }
  if (values_ok) {
    a.Pass("quote.pcr_values");
    auto digest = ComputePcrDigest(digest_hash, attest->quote_selection, ev.pcrs);
    if (!digest.ok()) {
      a.Fail("quote.pcr_digest.uncomputable", "TPMS_QUOTE_INFO.pcrDigest", "a computable digest",
             digest.status().message());
    } else if (*digest == attest->quote_pcr_digest) {
      a.Pass("quote.pcr_digest");
    } else {
      a.Fail("quote.pcr_digest.mismatch", "TPMS_QUOTE_INFO.pcrDigest", Hex(*digest), Hex(attest->quote_pcr_digest));
    }
  }

}

void CheckClock(const ClockInfo& c, const QuoteExpectations& expect, Appraisal* out) {
  Appraisal& a = *out;
  if (c.safe == 1) {
    a.Pass("quote.clock.safe");
  } else {
    a.Fail("quote.clock.unsafe", "TPMS_ATTEST.clockInfo.safe", "1", std::to_string(c.safe));
  }
  if (expect.previous) {
    const ClockInfo& p = *expect.previous;
    size_t before = a.failures().size();
    if (c.reset_count < p.reset_count) {
      a.Fail("quote.clock.reset_count.decreased", "TPMS_ATTEST.clockInfo.resetCount",
             ">= " + std::to_string(p.reset_count), std::to_string(c.reset_count));
    } else if (c.reset_count == p.reset_count && c.restart_count < p.restart_count) {
      a.Fail("quote.clock.restart_count.decreased", "TPMS_ATTEST.clockInfo.restartCount",
             ">= " + std::to_string(p.restart_count), std::to_string(c.restart_count));
    }
    if (c.clock <= p.clock) {
      a.Fail("quote.clock.not_increasing", "TPMS_ATTEST.clockInfo.clock", "> " + std::to_string(p.clock),
             std::to_string(c.clock));
    }
    if (a.failures().size() == before) a.Pass("quote.clock.monotonic");
  }
}

}  // namespace

}  // namespace enclave::attest
