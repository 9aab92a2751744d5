#include "enclave/attest/ek_cert.h"

#include <dirent.h>
#include <sys/stat.h>

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "cert_chain.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/crypto/openssl_error.h"

namespace enclave::attest {
namespace {

using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
constexpr char kSubjectDirectoryAttributesOid[] = "2.5.29.9";

Status OsslError(std::string_view call) { return Internal("EK certificate: " + crypto::OpenSslError(call)); }

std::string SubjectOf(X509* cert) {
  char buf[512] = "";
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
  return buf;
}

Result<std::vector<uint8_t>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("EK trust store: cannot open " + path);
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) return IoError("EK trust store: reading " + path + " failed");
  return data;
}

// Every certificate of a PEM file, or the one DER certificate of a DER file, as DER.
Result<std::vector<std::vector<uint8_t>>> CertificatesInFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto data, ReadFile(path));
  std::vector<std::vector<uint8_t>> out;
  static constexpr char kPem[] = "-----BEGIN CERTIFICATE-----";
  if (std::search(data.begin(), data.end(), kPem, kPem + sizeof kPem - 1) != data.end()) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())),
                                                  BIO_free);
    if (!bio) return OsslError("BIO_new_mem_buf");
    while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      X509Ptr cert(c, X509_free);
      unsigned char* der = nullptr;
      int len = i2d_X509(cert.get(), &der);
      if (len <= 0) return OsslError("i2d_X509 (" + path + ")");
      out.emplace_back(der, der + len);
      OPENSSL_free(der);
    }
    ERR_clear_error();  // the loop ends on "no start line"
  } else {
    const uint8_t* p = data.data();
    X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(data.size())), X509_free);
    ERR_clear_error();
    if (cert && p == data.data() + data.size()) out.push_back(data);
  }
  if (out.empty()) return InvalidInput("EK trust store: " + path + " holds no PEM or DER X.509 certificate");
  return out;
}

bool SelfSigned(const std::vector<uint8_t>& der) {
  const uint8_t* p = der.data();
  X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())), X509_free);
  if (!cert) return false;
  bool ok = X509_NAME_cmp(X509_get_subject_name(cert.get()), X509_get_issuer_name(cert.get())) == 0 &&
            X509_verify(cert.get(), X509_get0_pubkey(cert.get())) == 1;
  ERR_clear_error();
  return ok;
}

// Accepts X509_V_ERR_UNHANDLED_CRITICAL_EXTENSION only when every unhandled critical
// extension of that certificate is subjectDirectoryAttributes (TCG EK profile).
int VerifyCallback(int ok, X509_STORE_CTX* ctx) {
  if (ok || X509_STORE_CTX_get_error(ctx) != X509_V_ERR_UNHANDLED_CRITICAL_EXTENSION) return ok;
  X509* cert = X509_STORE_CTX_get_current_cert(ctx);
  if (cert == nullptr) return 0;
  for (int i = 0; i < X509_get_ext_count(cert); ++i) {
    X509_EXTENSION* ext = X509_get_ext(cert, i);
    if (!X509_EXTENSION_get_critical(ext) || X509_supported_extension(ext)) continue;
    char oid[80] = "";
    OBJ_obj2txt(oid, sizeof oid, X509_EXTENSION_get_object(ext), 1);
    if (std::strcmp(oid, kSubjectDirectoryAttributesOid) != 0) return 0;
  }
  X509_STORE_CTX_set_error(ctx, X509_V_OK);
  return 1;
}

std::string Hex(ByteSpan b) { return HexEncode(b); }

std::vector<uint8_t> StripZeros(ByteSpan b) {
  size_t i = 0;
  while (i + 1 < b.size() && b[i] == 0) ++i;
  return {b.begin() + static_cast<long>(i), b.end()};
}

std::vector<uint8_t> BnBytes(const EVP_PKEY* key, const char* param, size_t pad) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(key, param, &bn) != 1) {
    ERR_clear_error();
    return {};
  }
  std::vector<uint8_t> out(pad == 0 ? static_cast<size_t>(BN_num_bytes(bn)) : pad);
  if (BN_bn2binpad(bn, out.data(), static_cast<int>(out.size())) < 0) out.clear();
  BN_free(bn);
  return out;
}

// "rsa-2048 n=..., e=65537" / "ecc prime256v1 x=..., y=..." for the expected/got fields.
std::string DescribeTpmKey(const TpmtPublic& ek) {
  if (ek.type == alg::kRsa) {
    return "rsa n=" + Hex(StripZeros(ek.rsa_modulus)) + " e=" +
           std::to_string(ek.rsa_exponent == 0 ? 65537 : ek.rsa_exponent);
  }
  return "ecc curve 0x" + Hex(std::vector<uint8_t>{static_cast<uint8_t>(ek.ecc_curve >> 8),
                                                     static_cast<uint8_t>(ek.ecc_curve)}) +
         " x=" + Hex(ek.ecc_x) + " y=" + Hex(ek.ecc_y);
}

const char* CurveGroupName(uint16_t tpm_curve) {
  switch (tpm_curve) {
    case curve::kNistP256: return "prime256v1";
    case curve::kNistP384: return "secp384r1";
    case curve::kNistP521: return "secp521r1";
    default: return nullptr;
  }
}

// Compares the certificate's key with the EK; "" when equal, else the certificate key's
// description (for the finding's "got").
std::string CompareKey(EVP_PKEY* cert_key, const TpmtPublic& ek) {
  int id = EVP_PKEY_get_base_id(cert_key);
  if (id == EVP_PKEY_RSA) {
    std::vector<uint8_t> n = BnBytes(cert_key, OSSL_PKEY_PARAM_RSA_N, 0);
    std::vector<uint8_t> e = BnBytes(cert_key, OSSL_PKEY_PARAM_RSA_E, 0);
    uint64_t e_val = 0;
    for (uint8_t b : e) e_val = (e_val << 8) | b;
    std::string got = "rsa n=" + Hex(n) + " e=" + std::to_string(e_val);
    if (ek.type != alg::kRsa || e.size() > 4) return got;
    uint32_t ek_e = ek.rsa_exponent == 0 ? 65537 : ek.rsa_exponent;
    return (StripZeros(n) == StripZeros(ek.rsa_modulus) && e_val == ek_e) ? "" : got;
  }
  if (id == EVP_PKEY_EC) {
    char group[64] = "";
    size_t glen = 0;
    if (EVP_PKEY_get_utf8_string_param(cert_key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &glen) != 1) {
      ERR_clear_error();
      return "ecc key with an unnamed curve";
    }
    size_t coord = static_cast<size_t>((EVP_PKEY_get_bits(cert_key) + 7) / 8);
    std::vector<uint8_t> x = BnBytes(cert_key, OSSL_PKEY_PARAM_EC_PUB_X, coord);
    std::vector<uint8_t> y = BnBytes(cert_key, OSSL_PKEY_PARAM_EC_PUB_Y, coord);
    std::string got = std::string("ecc ") + group + " x=" + Hex(x) + " y=" + Hex(y);
    const char* want = ek.type == alg::kEcc ? CurveGroupName(ek.ecc_curve) : nullptr;
    if (want == nullptr || std::strcmp(want, group) != 0) return got;
    return (x == ek.ecc_x && y == ek.ecc_y && !x.empty()) ? "" : got;
  }
  return "a key of type " + std::string(OBJ_nid2sn(id));
}

}  // namespace

std::string CheckStrictDer(ByteSpan der, size_t* consumed) {
  // Walks one TLV and, for constructed encodings, everything inside it.
  struct Walker {
    ByteSpan d;
    std::string error;
    bool Tlv(size_t pos, size_t end, size_t* next, int depth) {
      auto fail = [&](const std::string& what, size_t at) {
        error = what + " at offset " + std::to_string(at);
        return false;
      };
      if (depth > 32) return fail("nesting deeper than 32", pos);
      if (pos + 2 > end) return fail("truncated tag/length", pos);
      const size_t start = pos;
      uint8_t tag = d[pos++];
      if ((tag & 0x1F) == 0x1F) {  // high tag number form: minimal, and needed only for >= 31
        if (pos >= end || d[pos] == 0x80) return fail("non-minimal high tag number", start);
        size_t n = 0;
        uint32_t v = 0;
        while (pos < end && (d[pos] & 0x80)) {
          v = (v << 7) | (d[pos++] & 0x7F);
          if (++n > 4) return fail("tag number too large", start);
        }
        if (pos >= end) return fail("truncated tag", start);
        v = (v << 7) | d[pos++];
        if (v < 31) return fail("high tag number form for a low tag number", start);
      }
      if (pos >= end) return fail("truncated length", start);
      uint8_t l0 = d[pos++];
      size_t len = 0;
      if (l0 == 0x80) return fail("indefinite length (BER, not DER)", start);
      if (l0 & 0x80) {
        size_t n = l0 & 0x7F;
        if (n > 4) return fail("length of more than 4 bytes", start);
        if (pos + n > end) return fail("truncated length", start);
        if (d[pos] == 0) return fail("length with a leading zero byte (not minimal)", start);
        for (size_t i = 0; i < n; ++i) len = (len << 8) | d[pos++];
        if (len < 0x80) return fail("long-form length below 128 (not minimal)", start);
      } else {
        len = l0;
      }
      if (len > end - pos) return fail("length " + std::to_string(len) + " past the end", start);
      const size_t body = pos, body_end = pos + len;
      if (tag == 0x02) {  // INTEGER: minimal two's complement
        if (len == 0) return fail("empty INTEGER", start);
        if (len > 1 && ((d[body] == 0x00 && !(d[body + 1] & 0x80)) || (d[body] == 0xFF && (d[body + 1] & 0x80)))) {
          return fail("INTEGER not minimally encoded", start);
        }
      }
      if (tag == 0x01 && (len != 1 || (d[body] != 0x00 && d[body] != 0xFF))) {
        return fail("BOOLEAN not 00 or FF", start);
      }
      if (tag & 0x20) {  // constructed: the contents are TLVs that exactly fill it
        size_t p = body;
        while (p < body_end) {
          size_t n = 0;
          if (!Tlv(p, body_end, &n, depth + 1)) return false;
          p = n;
        }
      }
      *next = body_end;
      return true;
    }
  } w{der, {}};
  size_t next = 0;
  if (!w.Tlv(0, der.size(), &next, 0)) return w.error;
  *consumed = next;
  return "";
}

Result<EkTrustStore> LoadEkTrustFiles(const std::vector<std::string>& root_files,
                                      const std::vector<std::string>& intermediate_files) {
  EkTrustStore store;
  for (const auto& f : root_files) {
    ASSIGN_OR_RETURN(auto certs, CertificatesInFile(f));
    for (auto& c : certs) {
      if (!SelfSigned(c)) {
        return InvalidInput("EK trust store: " + f + " holds a certificate that is not self-signed; a root must be");
      }
      store.roots.push_back(std::move(c));
    }
  }
  for (const auto& f : intermediate_files) {
    ASSIGN_OR_RETURN(auto certs, CertificatesInFile(f));
    for (auto& c : certs) store.intermediates.push_back(std::move(c));
  }
  if (store.roots.empty()) return FailedPrecondition("EK trust store: no root certificate given");
  return store;
}

Result<EkTrustStore> LoadEkTrustDirectory(const std::string& dir) {
  struct DirClose {
    void operator()(DIR* d) const { closedir(d); }
  };
  std::unique_ptr<DIR, DirClose> d(opendir(dir.c_str()));
  if (!d) return ErrnoStatus("EK trust store: opendir " + dir, errno);
  std::vector<std::string> files;
  while (dirent* e = readdir(d.get())) {
    std::string path = dir + "/" + e->d_name;
    struct stat st {};
    if (e->d_name[0] == '.' || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  EkTrustStore store;
  for (const auto& f : files) {
    ASSIGN_OR_RETURN(auto certs, CertificatesInFile(f));
    for (auto& c : certs) (SelfSigned(c) ? store.roots : store.intermediates).push_back(std::move(c));
  }
  if (store.roots.empty()) {
    return FailedPrecondition("EK trust store: no self-signed root certificate in " + dir + " (" +
                              std::to_string(files.size()) + " files)");
  }
  return store;
}

Status CheckCertificateChain(X509* leaf, const EkTrustStore& trust, std::optional<int64_t> time,
                             std::string_view prefix, std::string_view what, Appraisal* out) {
  Appraisal& a = *out;
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  std::unique_ptr<STACK_OF(X509), void (*)(STACK_OF(X509)*)> untrusted(
      sk_X509_new_null(), [](STACK_OF(X509)* s) { sk_X509_pop_free(s, X509_free); });
  if (!store || !untrusted) return OsslError("X509_STORE_new");
  auto decode = [](const std::vector<uint8_t>& der) {
    const uint8_t* q = der.data();
    return X509Ptr(d2i_X509(nullptr, &q, static_cast<long>(der.size())), X509_free);
  };
  for (const auto& r : trust.roots) {
    X509Ptr root = decode(r);
    if (!root || X509_STORE_add_cert(store.get(), root.get()) != 1) return OsslError("X509_STORE_add_cert (root)");
  }
  for (const auto& i : trust.intermediates) {
    X509Ptr inter = decode(i);
    if (!inter || sk_X509_push(untrusted.get(), inter.get()) == 0) return OsslError("sk_X509_push (intermediate)");
    inter.release();  // owned by the stack
  }
  X509_STORE_set_verify_cb(store.get(), VerifyCallback);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted.get()) != 1) {
    return OsslError("X509_STORE_CTX_init");
  }
  if (time) X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(*time));
  int verified = X509_verify_cert(ctx.get());
  ERR_clear_error();
  if (verified == 1) {
    a.Pass(std::string(prefix) + ".chain");
  } else {
    int err = X509_STORE_CTX_get_error(ctx.get());
    int depth = X509_STORE_CTX_get_error_depth(ctx.get());
    X509* at = X509_STORE_CTX_get_current_cert(ctx.get());
    std::string where = std::string(what) + " chain depth " + std::to_string(depth) +
                        (at != nullptr ? " (" + SubjectOf(at) + ")" : "");
    std::string check = std::string(prefix) + (err == X509_V_ERR_CERT_HAS_EXPIRED       ? ".chain.expired"
                                               : err == X509_V_ERR_CERT_NOT_YET_VALID ? ".chain.not_yet_valid"
                                                                                      : ".chain.untrusted");
    a.Fail(check, where, "a valid chain to one of " + std::to_string(trust.roots.size()) + " trusted root(s)",
           X509_verify_cert_error_string(err));
  }

  return OkStatus();
}

Result<Appraisal> AppraiseEkCertificate(ByteSpan cert, ByteSpan ek_public, const EkTrustStore& trust,
                                        const EkCertOptions& options) {
  auto parsed = ParseTpm2bPublic(ek_public);
  if (!parsed.ok()) return parsed.status().Annotate("EK certificate appraisal: EK public (TPM2B_PUBLIC)");
  const TpmtPublic& ek = *parsed;
  if (ek.type != alg::kRsa && ek.type != alg::kEcc) {
    return InvalidInput("EK certificate appraisal: EK public type is " + AlgName(ek.type) + ", expected rsa or ecc");
  }
  if (trust.roots.empty()) return FailedPrecondition("EK certificate appraisal: the trust store has no root");

  Appraisal a;
  // 1. X.509, strict DER.
  const uint8_t* p = cert.data();
  X509Ptr leaf(d2i_X509(nullptr, &p, static_cast<long>(cert.size())), X509_free);
  if (!leaf) {
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    char buf[256] = "d2i_X509 failed";
    if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
    a.Fail("ek.cert.parse.invalid", "EK certificate (" + std::to_string(cert.size()) + " bytes)",
           "a DER X.509 certificate", buf);
    return a;
  }
  const size_t used = static_cast<size_t>(p - cert.data());
  size_t der_len = 0;
  std::string der_error = CheckStrictDer(cert.first(used), &der_len);
  bool der_ok = true;
  if (!der_error.empty()) {
    a.Fail("ek.cert.der.not_strict", "EK certificate", "strict DER", der_error);
    der_ok = false;
  }
  if (used != cert.size()) {
    bool zero_pad = std::all_of(cert.begin() + static_cast<long>(used), cert.end(), [](uint8_t b) { return b == 0; });
    std::string got = std::to_string(cert.size() - used) + " bytes after the " + std::to_string(used) +
                      "-byte certificate" + (zero_pad ? " (all zero)" : "");
    if (options.allow_trailing_bytes) {
      a.Pass("ek.cert.der.trailing_bytes_allowed");
    } else {
      a.Fail("ek.cert.der.trailing_bytes", "EK certificate", "nothing after the certificate", got);
      der_ok = false;
    }
  }
  if (der_ok) a.Pass("ek.cert.der");

  // 2. Chain to a trusted root.
  RETURN_IF_ERROR(CheckCertificateChain(leaf.get(), trust, options.verify_time, "ek.cert", "EK certificate", &a));

  // 3. The certified key is the EK.
  EVP_PKEY* cert_key = X509_get0_pubkey(leaf.get());
  ERR_clear_error();
  if (cert_key == nullptr) {
    a.Fail("ek.cert.key.mismatch", "EK certificate subjectPublicKeyInfo", DescribeTpmKey(ek),
           "a public key OpenSSL cannot decode");
  } else if (std::string got = CompareKey(cert_key, ek); !got.empty()) {
    a.Fail("ek.cert.key.mismatch", "EK certificate subjectPublicKeyInfo", DescribeTpmKey(ek), got);
  } else {
    a.Pass("ek.cert.key");
  }
  return a;
}

}  // namespace enclave::attest
