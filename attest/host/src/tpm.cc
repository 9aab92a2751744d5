// Host side of TPM 2.0 attestation through tpm2-tss ESAPI. Layout:
//   1. TSS2_RC -> Status, and the RAII guards (Esys_Free'd outputs, flushed handles).
//   2. One wrapper per ESAPI call (named Call_<Esys function>): traces the name and the rc.
//   3. Templates and marshalling helpers.
//   4. Tpm: the operations, built only from the wrappers.
#include "enclave/attest/host/tpm.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace enclave::attest::host {
namespace {

// ---------------------------------------------------------------------------------------
// 1. Return codes and guards.

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// The TPM's own response code with the parameter/handle/session number masked off.
uint32_t TpmBaseRc(TSS2_RC rc) {
  if ((rc & TSS2_RC_LAYER_MASK) != TSS2_TPM_RC_LAYER &&
      (rc & TSS2_RC_LAYER_MASK) != TSS2_RESMGR_TPM_RC_LAYER) {
    return 0;
  }
  uint32_t r = rc & 0xFFFF;
  if (r & TPM2_RC_FMT1) return TPM2_RC_FMT1 | (r & 0x3F);
  return r & 0x97F;  // warning / version bits and the error number
}

Code CodeForRc(TSS2_RC rc) {
  uint32_t layer = rc & TSS2_RC_LAYER_MASK;
  if (layer == TSS2_TCTI_RC_LAYER) return Code::kUnavailable;
  uint32_t base_layer_rc = rc & 0xFFFF;
  if (layer != TSS2_TPM_RC_LAYER && layer != TSS2_RESMGR_TPM_RC_LAYER) {
    if (base_layer_rc == TSS2_BASE_RC_IO_ERROR || base_layer_rc == TSS2_BASE_RC_NO_CONNECTION ||
        base_layer_rc == TSS2_BASE_RC_TRY_AGAIN) {
      return Code::kUnavailable;
    }
    if (base_layer_rc == TSS2_BASE_RC_BAD_VALUE || base_layer_rc == TSS2_BASE_RC_BAD_SIZE ||
        base_layer_rc == TSS2_BASE_RC_INSUFFICIENT_BUFFER) {
      return Code::kInvalidInput;
    }
    return Code::kInternal;
  }
  switch (TpmBaseRc(rc)) {
    case TPM2_RC_HANDLE:
      return Code::kNotFound;
    case TPM2_RC_INTEGRITY:
      return Code::kAuthFailed;
    case TPM2_RC_AUTH_FAIL:
    case TPM2_RC_BAD_AUTH:
    case TPM2_RC_POLICY_FAIL:
    case TPM2_RC_LOCKOUT:
    case TPM2_RC_AUTH_UNAVAILABLE:
      return Code::kPermissionDenied;
    case TPM2_RC_VALUE:
    case TPM2_RC_SIZE:
    case TPM2_RC_HASH:
    case TPM2_RC_SCHEME:
    case TPM2_RC_KEY_SIZE:
    case TPM2_RC_CURVE:
    case TPM2_RC_ATTRIBUTES:
    case TPM2_RC_SELECTOR:
    case TPM2_RC_TYPE:
    case TPM2_RC_KEY:
    case TPM2_RC_ECC_POINT:
      return Code::kInvalidInput;
    case TPM2_RC_RETRY:
    case TPM2_RC_YIELDED:
    case TPM2_RC_TESTING:
    case TPM2_RC_CANCELED:
    case TPM2_RC_NV_RATE:
    case TPM2_RC_NV_UNAVAILABLE:
    case TPM2_RC_OBJECT_MEMORY:
    case TPM2_RC_SESSION_MEMORY:
    case TPM2_RC_MEMORY:
      return Code::kUnavailable;
    case TPM2_RC_COMMAND_CODE:
      return Code::kUnsupported;
    default:
      return Code::kInternal;
  }
}

// "Esys_Quote: 0x000001c4 tpm:parameter(1):value is out of range ...".
Status RcStatus(std::string_view call, TSS2_RC rc) {
  const char* text = Tss2_RC_Decode(rc);
  return Status(CodeForRc(rc), std::string(call) + ": " + Hex32(rc) + " " + (text ? text : "(undecoded)"));
}

// An ESAPI output buffer, released with Esys_Free.
struct EsysFree {
  void operator()(void* p) const { Esys_Free(p); }
};
template <typename T>
using EsysPtr = std::unique_ptr<T, EsysFree>;

// A TPM2B_DIGEST that may hold a secret: wiped before Esys_Free.
struct EsysWipeFree {
  void operator()(TPM2B_DIGEST* p) const {
    if (p) OPENSSL_cleanse(p, sizeof(*p));
    Esys_Free(p);
  }
};

template <typename T>
std::vector<uint8_t> MarshalAll(TSS2_RC (*fn)(const T*, uint8_t*, size_t, size_t*), const T& v,
                                std::string_view what, Status* status) {
  std::vector<uint8_t> out(sizeof(T) + 16);
  size_t offset = 0;
  TSS2_RC rc = fn(&v, out.data(), out.size(), &offset);
  if (rc != TSS2_RC_SUCCESS) {
    *status = RcStatus(std::string("Tss2_MU_") + std::string(what) + "_Marshal", rc);
    return {};
  }
  out.resize(offset);
  return out;
}

// Unmarshals exactly `data` (no trailing bytes) into *v.
template <typename T>
Status UnmarshalExact(TSS2_RC (*fn)(const uint8_t*, size_t, size_t*, T*), ByteSpan data,
                      std::string_view what, T* v) {
  size_t offset = 0;
  std::memset(v, 0, sizeof(T));
  TSS2_RC rc = fn(data.data(), data.size(), &offset, v);
  if (rc != TSS2_RC_SUCCESS) {
    return InvalidInput(std::string(what) + " (" + std::to_string(data.size()) +
                        " bytes) does not parse: " + RcStatus("Tss2_MU_Unmarshal", rc).message());
  }
  if (offset != data.size()) {
    return InvalidInput(std::string(what) + ": " + std::to_string(data.size() - offset) +
                        " trailing bytes after offset " + std::to_string(offset));
  }
  return OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// 2. One wrapper per ESAPI call.

struct Tpm::Impl {
  TSS2_TCTI_CONTEXT* tcti = nullptr;
  ESYS_CONTEXT* ctx = nullptr;
  TraceHook trace;
  std::set<LoadedKey*> live_keys;  // flushed by ~Tpm if their owners outlive it

  Status Check(std::string_view call, TSS2_RC rc) {
    if (trace) trace(call, rc);
    if (rc == TSS2_RC_SUCCESS) return OkStatus();
    return RcStatus(call, rc);
  }

  Status Call_Esys_CreatePrimary(ESYS_TR hierarchy, const TPM2B_PUBLIC& in_public, ESYS_TR* handle,
                                 EsysPtr<TPM2B_PUBLIC>* out_public) {
    TPM2B_SENSITIVE_CREATE sensitive{};
    TPM2B_DATA outside{};
    TPML_PCR_SELECTION creation_pcr{};
    TPM2B_PUBLIC* pub = nullptr;
    TSS2_RC rc = Esys_CreatePrimary(ctx, hierarchy, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
                                    &sensitive, &in_public, &outside, &creation_pcr, handle, &pub,
                                    nullptr, nullptr, nullptr);
    out_public->reset(pub);
    return Check("Esys_CreatePrimary", rc);
  }

  Status Call_Esys_Create(ESYS_TR parent, ESYS_TR parent_session, const TPM2B_PUBLIC& in_public,
                          EsysPtr<TPM2B_PRIVATE>* out_private, EsysPtr<TPM2B_PUBLIC>* out_public) {
    TPM2B_SENSITIVE_CREATE sensitive{};
    TPM2B_DATA outside{};
    TPML_PCR_SELECTION creation_pcr{};
    TPM2B_PRIVATE* priv = nullptr;
    TPM2B_PUBLIC* pub = nullptr;
    TSS2_RC rc = Esys_Create(ctx, parent, parent_session, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive,
                             &in_public, &outside, &creation_pcr, &priv, &pub, nullptr, nullptr, nullptr);
    out_private->reset(priv);
    out_public->reset(pub);
    return Check("Esys_Create", rc);
  }

  Status Call_Esys_Load(ESYS_TR parent, ESYS_TR parent_session, const TPM2B_PRIVATE& in_private,
                        const TPM2B_PUBLIC& in_public, ESYS_TR* handle) {
    return Check("Esys_Load", Esys_Load(ctx, parent, parent_session, ESYS_TR_NONE, ESYS_TR_NONE,
                                        &in_private, &in_public, handle));
  }

  Status Call_Esys_StartAuthSession(TPM2_SE type, ESYS_TR* session) {
    TPMT_SYM_DEF sym{};
    sym.algorithm = TPM2_ALG_AES;
    sym.keyBits.aes = 128;
    sym.mode.aes = TPM2_ALG_CFB;
    return Check("Esys_StartAuthSession",
                 Esys_StartAuthSession(ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                                       ESYS_TR_NONE, nullptr, type, &sym, TPM2_ALG_SHA256, session));
  }

  Status Call_Esys_PolicySecret(ESYS_TR auth_entity, ESYS_TR policy_session) {
    return Check("Esys_PolicySecret",
                 Esys_PolicySecret(ctx, auth_entity, policy_session, ESYS_TR_PASSWORD, ESYS_TR_NONE,
                                   ESYS_TR_NONE, nullptr, nullptr, nullptr, 0, nullptr, nullptr));
  }

  Status Call_Esys_ActivateCredential(ESYS_TR activate, ESYS_TR key, ESYS_TR key_session,
                                      const TPM2B_ID_OBJECT& blob, const TPM2B_ENCRYPTED_SECRET& secret,
                                      std::unique_ptr<TPM2B_DIGEST, EsysWipeFree>* cert_info) {
    TPM2B_DIGEST* out = nullptr;
    TSS2_RC rc = Esys_ActivateCredential(ctx, activate, key, ESYS_TR_PASSWORD, key_session,
                                         ESYS_TR_NONE, &blob, &secret, &out);
    cert_info->reset(out);
    return Check("Esys_ActivateCredential", rc);
  }

  Status Call_Esys_Quote(ESYS_TR key, const TPM2B_DATA& qualifying, const TPML_PCR_SELECTION& sel,
                         EsysPtr<TPM2B_ATTEST>* quoted, EsysPtr<TPMT_SIGNATURE>* signature) {
    TPMT_SIG_SCHEME scheme{};
    scheme.scheme = TPM2_ALG_NULL;  // the restricted key's own scheme
    TPM2B_ATTEST* q = nullptr;
    TPMT_SIGNATURE* s = nullptr;
    TSS2_RC rc = Esys_Quote(ctx, key, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &qualifying,
                            &scheme, &sel, &q, &s);
    quoted->reset(q);
    signature->reset(s);
    return Check("Esys_Quote", rc);
  }

  Status Call_Esys_PCR_Read(const TPML_PCR_SELECTION& in, EsysPtr<TPML_PCR_SELECTION>* sel_out,
                            EsysPtr<TPML_DIGEST>* values) {
    UINT32 counter = 0;
    TPML_PCR_SELECTION* s = nullptr;
    TPML_DIGEST* v = nullptr;
    TSS2_RC rc = Esys_PCR_Read(ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &in, &counter, &s, &v);
    sel_out->reset(s);
    values->reset(v);
    return Check("Esys_PCR_Read", rc);
  }

  Status Call_Esys_PCR_Extend(ESYS_TR pcr, const TPML_DIGEST_VALUES& digests) {
    return Check("Esys_PCR_Extend",
                 Esys_PCR_Extend(ctx, pcr, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &digests));
  }

  Status Call_Esys_GetCapability(TPM2_CAP cap, uint32_t property, uint32_t count, bool* more,
                                 EsysPtr<TPMS_CAPABILITY_DATA>* data) {
    TPMI_YES_NO more_data = TPM2_NO;
    TPMS_CAPABILITY_DATA* d = nullptr;
    TSS2_RC rc = Esys_GetCapability(ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, cap, property,
                                    count, &more_data, &d);
    data->reset(d);
    *more = more_data == TPM2_YES;
    return Check("Esys_GetCapability", rc);
  }

  Status Call_Esys_TR_FromTPMPublic(TPM2_HANDLE tpm_handle, ESYS_TR* object) {
    return Check("Esys_TR_FromTPMPublic", Esys_TR_FromTPMPublic(ctx, tpm_handle, ESYS_TR_NONE,
                                                                ESYS_TR_NONE, ESYS_TR_NONE, object));
  }

  Status Call_Esys_NV_ReadPublic(ESYS_TR nv, EsysPtr<TPM2B_NV_PUBLIC>* nv_public) {
    TPM2B_NV_PUBLIC* p = nullptr;
    TSS2_RC rc = Esys_NV_ReadPublic(ctx, nv, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &p, nullptr);
    nv_public->reset(p);
    return Check("Esys_NV_ReadPublic", rc);
  }

  Status Call_Esys_NV_Read(ESYS_TR auth, ESYS_TR nv, uint16_t size, uint16_t offset,
                           EsysPtr<TPM2B_MAX_NV_BUFFER>* data) {
    TPM2B_MAX_NV_BUFFER* d = nullptr;
    TSS2_RC rc = Esys_NV_Read(ctx, auth, nv, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, size,
                              offset, &d);
    data->reset(d);
    return Check("Esys_NV_Read", rc);
  }

  Status Call_Esys_TR_GetName(ESYS_TR handle, EsysPtr<TPM2B_NAME>* name) {
    TPM2B_NAME* n = nullptr;
    TSS2_RC rc = Esys_TR_GetName(ctx, handle, &n);
    name->reset(n);
    return Check("Esys_TR_GetName", rc);
  }

  Status Call_Esys_FlushContext(ESYS_TR handle) {
    return Check("Esys_FlushContext", Esys_FlushContext(ctx, handle));
  }

  Status Call_Esys_TR_Close(ESYS_TR* handle) { return Check("Esys_TR_Close", Esys_TR_Close(ctx, handle)); }

  // Guards: a transient object or session flushed, or an ESYS_TR for a persistent entity
  // closed, when the guard goes out of scope. Failures there are traced (nothing to return).
  class FlushGuard {
   public:
    FlushGuard(Impl* impl, ESYS_TR handle) : impl_(impl), handle_(handle) {}
    FlushGuard(const FlushGuard&) = delete;
    FlushGuard& operator=(const FlushGuard&) = delete;
    ~FlushGuard() {
      if (handle_ != ESYS_TR_NONE) (void)impl_->Call_Esys_FlushContext(handle_);
    }
    ESYS_TR get() const { return handle_; }
    ESYS_TR release() { return std::exchange(handle_, ESYS_TR_NONE); }

   private:
    Impl* impl_;
    ESYS_TR handle_;
  };

  class CloseGuard {
   public:
    CloseGuard(Impl* impl, ESYS_TR handle) : impl_(impl), handle_(handle) {}
    CloseGuard(const CloseGuard&) = delete;
    CloseGuard& operator=(const CloseGuard&) = delete;
    ~CloseGuard() {
      if (handle_ != ESYS_TR_NONE) (void)impl_->Call_Esys_TR_Close(&handle_);
    }
    ESYS_TR get() const { return handle_; }

   private:
    Impl* impl_;
    ESYS_TR handle_;
  };

  // A policy session satisfied by PolicySecret(TPM_RH_ENDORSEMENT): what the TCG default
  // EK's authPolicy asks for. One per command that uses the EK (a policy session's digest is
  // reset after it authorizes a command). Empty endorsement auth.
  Result<std::unique_ptr<FlushGuard>> EndorsementPolicySession() {
    ESYS_TR session = ESYS_TR_NONE;
    RETURN_IF_ERROR(Call_Esys_StartAuthSession(TPM2_SE_POLICY, &session));
    auto guard = std::make_unique<FlushGuard>(this, session);
    RETURN_IF_ERROR(Call_Esys_PolicySecret(ESYS_TR_RH_ENDORSEMENT, session));
    return guard;
  }

  Result<PublicKey> PublicOf(ESYS_TR handle, const TPM2B_PUBLIC& pub) {
    PublicKey out;
    Status status;
    out.public_area = MarshalAll(Tss2_MU_TPM2B_PUBLIC_Marshal, pub, "TPM2B_PUBLIC", &status);
    RETURN_IF_ERROR(status);
    EsysPtr<TPM2B_NAME> name;
    RETURN_IF_ERROR(Call_Esys_TR_GetName(handle, &name));
    out.name.assign(name->name, name->name + name->size);
    return out;
  }
};

// ---------------------------------------------------------------------------------------
// 3. Templates.

namespace {

// PolicySecret(TPM_RH_ENDORSEMENT) with SHA-256: the authPolicy of the TCG default EK
// templates L-1 and L-2 (TCG EK Credential Profile 2.0, B.3.3 and B.3.4).
constexpr uint8_t kEkPolicySha256[32] = {
    0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xB3, 0xF8, 0x1A, 0x90, 0xCC, 0x8D, 0x46, 0xA5, 0xD7, 0x24,
    0xFD, 0x52, 0xD7, 0x6E, 0x06, 0x52, 0x0B, 0x64, 0xF2, 0xA1, 0xDA, 0x1B, 0x33, 0x14, 0x69, 0xAA};

TPM2B_PUBLIC EkTemplateStruct(EkType type) {
  TPM2B_PUBLIC t{};
  TPMT_PUBLIC& p = t.publicArea;
  p.nameAlg = TPM2_ALG_SHA256;
  p.objectAttributes = kEkAttributes;
  p.authPolicy.size = sizeof(kEkPolicySha256);
  std::memcpy(p.authPolicy.buffer, kEkPolicySha256, sizeof(kEkPolicySha256));
  if (type == EkType::kRsa2048) {
    p.type = TPM2_ALG_RSA;
    p.parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_AES;
    p.parameters.rsaDetail.symmetric.keyBits.aes = 128;
    p.parameters.rsaDetail.symmetric.mode.aes = TPM2_ALG_CFB;
    p.parameters.rsaDetail.scheme.scheme = TPM2_ALG_NULL;
    p.parameters.rsaDetail.keyBits = 2048;
    p.parameters.rsaDetail.exponent = 0;
    p.unique.rsa.size = 256;  // 256 zero bytes
  } else {
    p.type = TPM2_ALG_ECC;
    p.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES;
    p.parameters.eccDetail.symmetric.keyBits.aes = 128;
    p.parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB;
    p.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL;
    p.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
    p.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
    p.unique.ecc.x.size = 32;  // 32 zero bytes each
    p.unique.ecc.y.size = 32;
  }
  return t;
}

TPM2B_PUBLIC AkTemplateStruct(AkType type) {
  TPM2B_PUBLIC t{};
  TPMT_PUBLIC& p = t.publicArea;
  p.nameAlg = TPM2_ALG_SHA256;
  p.objectAttributes = kAkAttributes;
  if (type == AkType::kEccP256) {
    p.type = TPM2_ALG_ECC;
    p.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_NULL;
    p.parameters.eccDetail.scheme.scheme = TPM2_ALG_ECDSA;
    p.parameters.eccDetail.scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA256;
    p.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
    p.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
  } else {
    p.type = TPM2_ALG_RSA;
    p.parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_NULL;
    p.parameters.rsaDetail.scheme.scheme = TPM2_ALG_RSASSA;
    p.parameters.rsaDetail.scheme.details.rsassa.hashAlg = TPM2_ALG_SHA256;
    p.parameters.rsaDetail.keyBits = 2048;
    p.parameters.rsaDetail.exponent = 0;
  }
  return t;
}

std::vector<uint8_t> MarshalTemplate(const TPM2B_PUBLIC& t) {
  Status ignored;  // marshalling a well-formed template into a large buffer cannot fail
  return MarshalAll(Tss2_MU_TPMT_PUBLIC_Marshal, t.publicArea, "TPMT_PUBLIC", &ignored);
}

size_t DigestSize(uint16_t hash) {
  switch (hash) {
    case TPM2_ALG_SHA1: return 20;
    case TPM2_ALG_SHA256: return 32;
    case TPM2_ALG_SHA384: return 48;
    case TPM2_ALG_SHA512: return 64;
    default: return 0;
  }
}

std::string BankName(uint16_t hash) {
  switch (hash) {
    case TPM2_ALG_SHA1: return "sha1";
    case TPM2_ALG_SHA256: return "sha256";
    case TPM2_ALG_SHA384: return "sha384";
    case TPM2_ALG_SHA512: return "sha512";
    default: {
      char buf[24];
      std::snprintf(buf, sizeof(buf), "alg 0x%04x", hash);
      return buf;
    }
  }
}

constexpr uint32_t kPcrCount = 24;  // PC Client: PCR 0..23, sizeofSelect 3

Status ToTpmlSelection(const PcrSelection& selection, TPML_PCR_SELECTION* out) {
  std::memset(out, 0, sizeof(*out));
  if (selection.empty()) return InvalidInput("PCR selection is empty");
  if (selection.size() > TPM2_NUM_PCR_BANKS) {
    return InvalidInput("PCR selection has " + std::to_string(selection.size()) + " banks, at most " +
                        std::to_string(TPM2_NUM_PCR_BANKS));
  }
  std::set<uint16_t> seen;
  for (const PcrBank& bank : selection) {
    if (DigestSize(bank.hash) == 0) return InvalidInput("PCR bank " + BankName(bank.hash) + " is not supported");
    if (!seen.insert(bank.hash).second) return InvalidInput("PCR bank " + BankName(bank.hash) + " selected twice");
    if (bank.pcrs.empty()) return InvalidInput("PCR bank " + BankName(bank.hash) + " selects no PCR");
    TPMS_PCR_SELECTION& s = out->pcrSelections[out->count++];
    s.hash = bank.hash;
    s.sizeofSelect = 3;
    for (uint32_t i : bank.pcrs) {
      if (i >= kPcrCount) {
        return InvalidInput("PCR " + BankName(bank.hash) + ":" + std::to_string(i) + " out of range 0.." +
                            std::to_string(kPcrCount - 1));
      }
      s.pcrSelect[i / 8] = static_cast<uint8_t>(s.pcrSelect[i / 8] | (1u << (i % 8)));
    }
  }
  return OkStatus();
}

}  // namespace

std::string_view EkTypeName(EkType type) { return type == EkType::kRsa2048 ? "RSA-2048" : "ECC-P256"; }
std::string_view AkTypeName(AkType type) {
  return type == AkType::kEccP256 ? "ECC-P256/ECDSA-SHA256" : "RSA-2048/RSASSA-SHA256";
}
std::vector<uint8_t> EkTemplate(EkType type) { return MarshalTemplate(EkTemplateStruct(type)); }
std::vector<uint8_t> AkTemplate(AkType type) { return MarshalTemplate(AkTemplateStruct(type)); }

// ---------------------------------------------------------------------------------------
// 4. Tpm.

LoadedKey::LoadedKey(LoadedKey&& other) noexcept { *this = std::move(other); }

LoadedKey& LoadedKey::operator=(LoadedKey&& other) noexcept {
  if (this == &other) return *this;
  Release();
  tpm_ = std::exchange(other.tpm_, nullptr);
  esys_handle_ = std::exchange(other.esys_handle_, 0);
  pub_ = std::move(other.pub_);
  if (tpm_) {
    tpm_->impl_->live_keys.erase(&other);
    tpm_->impl_->live_keys.insert(this);
  }
  return *this;
}

LoadedKey::~LoadedKey() { Release(); }

void LoadedKey::Release() {
  if (tpm_ == nullptr) return;
  tpm_->impl_->live_keys.erase(this);
  tpm_->Flush(esys_handle_);
  tpm_ = nullptr;
  esys_handle_ = 0;
}

Tpm::Tpm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tpm::~Tpm() {
  // Keys still held by callers are flushed now; their guards become empty.
  while (!impl_->live_keys.empty()) (*impl_->live_keys.begin())->Release();
  if (impl_->ctx) Esys_Finalize(&impl_->ctx);
  if (impl_->tcti) Tss2_TctiLdr_Finalize(&impl_->tcti);
}

void Tpm::Flush(uint32_t esys_handle) { (void)impl_->Call_Esys_FlushContext(esys_handle); }

Result<std::unique_ptr<Tpm>> Tpm::Open(std::string_view tcti, TraceHook trace) {
  auto impl = std::make_unique<Impl>();
  impl->trace = std::move(trace);
  std::string conf(tcti);
  TSS2_RC rc = Tss2_TctiLdr_Initialize(conf.c_str(), &impl->tcti);
  if (impl->trace) impl->trace("Tss2_TctiLdr_Initialize", rc);
  if (rc != TSS2_RC_SUCCESS) {
    impl->tcti = nullptr;
    Status s = RcStatus("Tss2_TctiLdr_Initialize", rc);
    return Status(Code::kUnavailable, "opening TPM through TCTI \"" + conf + "\": " + s.message());
  }
  // Build the Tpm before Esys_Initialize so its destructor finalizes the TCTI on failure.
  std::unique_ptr<Tpm> tpm(new Tpm(std::move(impl)));
  RETURN_IF_ERROR(tpm->impl_->Check("Esys_Initialize", Esys_Initialize(&tpm->impl_->ctx, tpm->impl_->tcti, nullptr))
                      .Annotate("opening TPM through TCTI \"" + conf + "\": "));
  return tpm;
}

Result<std::vector<uint8_t>> Tpm::ReadNv(uint32_t nv_index) {
  const std::string where = "NV index " + Hex32(nv_index);
  if ((nv_index >> 24) != TPM2_HT_NV_INDEX) return InvalidInput(where + " is not an NV index handle");
  ESYS_TR nv = ESYS_TR_NONE;
  Status s = impl_->Call_Esys_TR_FromTPMPublic(nv_index, &nv);
  if (!s.ok()) {
    if (s.code() == Code::kNotFound) return NotFound(where + " is not defined (" + s.message() + ")");
    return s.Annotate(where + ": ");
  }
  Impl::CloseGuard nv_guard(impl_.get(), nv);
  EsysPtr<TPM2B_NV_PUBLIC> pub;
  RETURN_IF_ERROR(impl_->Call_Esys_NV_ReadPublic(nv, &pub).Annotate(where + ": "));
  const TPMA_NV attrs = pub->nvPublic.attributes;
  if (!(attrs & TPMA_NV_WRITTEN)) return NotFound(where + " is defined but was never written");
  ESYS_TR auth = ESYS_TR_NONE;
  if (attrs & TPMA_NV_AUTHREAD) {
    auth = nv;
  } else if (attrs & TPMA_NV_OWNERREAD) {
    auth = ESYS_TR_RH_OWNER;
  } else {
    return FailedPrecondition(where + " is readable neither with its own auth nor the owner's (attributes " +
                              Hex32(attrs) + ")");
  }
  // Chunk size: TPM2_PT_NV_BUFFER_MAX, default 512 when the TPM does not report it.
  uint32_t chunk = 512;
  {
    bool more = false;
    EsysPtr<TPMS_CAPABILITY_DATA> cap;
    RETURN_IF_ERROR(impl_->Call_Esys_GetCapability(TPM2_CAP_TPM_PROPERTIES, TPM2_PT_NV_BUFFER_MAX, 1, &more, &cap));
    const auto& props = cap->data.tpmProperties;
    if (props.count >= 1 && props.tpmProperty[0].property == TPM2_PT_NV_BUFFER_MAX &&
        props.tpmProperty[0].value > 0) {
      chunk = std::min<uint32_t>(props.tpmProperty[0].value, TPM2_MAX_NV_BUFFER_SIZE);
    }
  }
  const uint16_t size = pub->nvPublic.dataSize;
  std::vector<uint8_t> out;
  out.reserve(size);
  while (out.size() < size) {
    uint16_t n = static_cast<uint16_t>(std::min<size_t>(chunk, size - out.size()));
    EsysPtr<TPM2B_MAX_NV_BUFFER> data;
    RETURN_IF_ERROR(impl_->Call_Esys_NV_Read(auth, nv, n, static_cast<uint16_t>(out.size()), &data)
                        .Annotate(where + " at offset " + std::to_string(out.size()) + ": "));
    if (data->size != n) {
      return Internal(where + ": NV_Read returned " + std::to_string(data->size) + " bytes, asked " +
                      std::to_string(n));
    }
    out.insert(out.end(), data->buffer, data->buffer + data->size);
  }
  return out;
}

Result<std::vector<uint8_t>> Tpm::ReadEkCertificate(EkType type) {
  uint32_t index = type == EkType::kRsa2048 ? kEkCertNvRsa2048 : kEkCertNvEccP256;
  auto cert = ReadNv(index);
  if (!cert.ok()) {
    if (cert.status().code() == Code::kNotFound) {
      return NotFound("this TPM holds no " + std::string(EkTypeName(type)) + " EK certificate: " +
                      cert.status().message() +
                      " (some TPMs ship none; some vendors publish it elsewhere, e.g. Intel PTT online)");
    }
    return cert.status().Annotate("reading the " + std::string(EkTypeName(type)) + " EK certificate: ");
  }
  if (cert->empty()) return NotFound("the " + std::string(EkTypeName(type)) + " EK certificate NV index is empty");
  return cert;
}

Result<LoadedKey> Tpm::CreateEk(EkType type) {
  TPM2B_PUBLIC tmpl = EkTemplateStruct(type);
  ESYS_TR handle = ESYS_TR_NONE;
  EsysPtr<TPM2B_PUBLIC> out_public;
  RETURN_IF_ERROR(impl_->Call_Esys_CreatePrimary(ESYS_TR_RH_ENDORSEMENT, tmpl, &handle, &out_public)
                      .Annotate("creating the " + std::string(EkTypeName(type)) + " EK: "));
  LoadedKey key;
  key.tpm_ = this;
  key.esys_handle_ = handle;
  impl_->live_keys.insert(&key);
  ASSIGN_OR_RETURN(key.pub_, impl_->PublicOf(handle, *out_public));
  return key;
}

Result<AkBlob> Tpm::CreateAk(const LoadedKey& ek, AkType type) {
  if (ek.tpm_ != this) return FailedPrecondition("CreateAk: the EK is not loaded in this TPM");
  TPM2B_PUBLIC tmpl = AkTemplateStruct(type);
  ASSIGN_OR_RETURN(auto session, impl_->EndorsementPolicySession());
  EsysPtr<TPM2B_PRIVATE> priv;
  EsysPtr<TPM2B_PUBLIC> pub;
  RETURN_IF_ERROR(impl_->Call_Esys_Create(ek.esys_handle_, session->get(), tmpl, &priv, &pub)
                      .Annotate("creating the " + std::string(AkTypeName(type)) + " AK under the EK: "));
  AkBlob blob;
  Status status;
  blob.pub.public_area = MarshalAll(Tss2_MU_TPM2B_PUBLIC_Marshal, *pub, "TPM2B_PUBLIC", &status);
  RETURN_IF_ERROR(status);
  blob.private_area = MarshalAll(Tss2_MU_TPM2B_PRIVATE_Marshal, *priv, "TPM2B_PRIVATE", &status);
  RETURN_IF_ERROR(status);
  // The name, nameAlg || SHA-256(TPMT_PUBLIC), is what the TPM reports when the AK is
  // loaded; LoadAk checks the two agree.
  std::vector<uint8_t> tpmt = MarshalAll(Tss2_MU_TPMT_PUBLIC_Marshal, pub->publicArea, "TPMT_PUBLIC", &status);
  RETURN_IF_ERROR(status);
  if (pub->publicArea.nameAlg != TPM2_ALG_SHA256) return Internal("AK nameAlg is not SHA-256");
  uint8_t md[32];
  unsigned int md_len = 0;
  if (EVP_Digest(tpmt.data(), tpmt.size(), md, &md_len, EVP_sha256(), nullptr) != 1 || md_len != 32) {
    return Internal("EVP_Digest(SHA-256) failed computing the AK name");
  }
  blob.pub.name = {static_cast<uint8_t>(TPM2_ALG_SHA256 >> 8), static_cast<uint8_t>(TPM2_ALG_SHA256 & 0xFF)};
  blob.pub.name.insert(blob.pub.name.end(), md, md + 32);
  return blob;
}

Result<LoadedKey> Tpm::LoadAk(const LoadedKey& ek, const AkBlob& ak) {
  if (ek.tpm_ != this) return FailedPrecondition("LoadAk: the EK is not loaded in this TPM");
  TPM2B_PUBLIC pub;
  TPM2B_PRIVATE priv;
  RETURN_IF_ERROR(UnmarshalExact(Tss2_MU_TPM2B_PUBLIC_Unmarshal, ak.pub.public_area, "AK TPM2B_PUBLIC", &pub));
  RETURN_IF_ERROR(UnmarshalExact(Tss2_MU_TPM2B_PRIVATE_Unmarshal, ak.private_area, "AK TPM2B_PRIVATE", &priv));
  ASSIGN_OR_RETURN(auto session, impl_->EndorsementPolicySession());
  ESYS_TR handle = ESYS_TR_NONE;
  RETURN_IF_ERROR(impl_->Call_Esys_Load(ek.esys_handle_, session->get(), priv, pub, &handle)
                      .Annotate("loading the AK under the EK: "));
  OPENSSL_cleanse(&priv, sizeof(priv));
  LoadedKey key;
  key.tpm_ = this;
  key.esys_handle_ = handle;
  impl_->live_keys.insert(&key);
  ASSIGN_OR_RETURN(key.pub_, impl_->PublicOf(handle, pub));
  if (!ak.pub.name.empty() && key.pub_.name != ak.pub.name) {
    return InvalidInput("loaded AK's name " + HexEncode(key.pub_.name) + " differs from the stored name " +
                        HexEncode(ak.pub.name));
  }
  return key;
}

Result<crypto::SecretBytes> Tpm::ActivateCredential(const LoadedKey& ak, const LoadedKey& ek,
                                                    ByteSpan credential_blob, ByteSpan encrypted_secret) {
  if (ak.tpm_ != this || ek.tpm_ != this) {
    return FailedPrecondition("ActivateCredential: AK or EK is not loaded in this TPM");
  }
  TPM2B_ID_OBJECT blob;
  TPM2B_ENCRYPTED_SECRET secret;
  RETURN_IF_ERROR(UnmarshalExact(Tss2_MU_TPM2B_ID_OBJECT_Unmarshal, credential_blob,
                                 "credential blob (TPM2B_ID_OBJECT)", &blob));
  RETURN_IF_ERROR(UnmarshalExact(Tss2_MU_TPM2B_ENCRYPTED_SECRET_Unmarshal, encrypted_secret,
                                 "encrypted secret (TPM2B_ENCRYPTED_SECRET)", &secret));
  ASSIGN_OR_RETURN(auto session, impl_->EndorsementPolicySession());
  std::unique_ptr<TPM2B_DIGEST, EsysWipeFree> cert_info;
  Status s = impl_->Call_Esys_ActivateCredential(ak.esys_handle_, ek.esys_handle_, session->get(), blob,
                                                 secret, &cert_info);
  if (!s.ok()) {
    // A challenge that was not made for this EK and AK name fails its integrity check (or
    // the seed does not decrypt): say so plainly, keeping the TPM's code.
    if (s.code() == Code::kAuthFailed || s.code() == Code::kInvalidInput) {
      return AuthFailed("credential activation refused: the challenge was not made for this TPM's EK and "
                        "this AK's name (" + s.message() + ")");
    }
    return s.Annotate("credential activation: ");
  }
  return crypto::SecretBytes::CopyFrom({cert_info->buffer, cert_info->size});
}

Result<Quote> Tpm::QuotePcrs(const LoadedKey& ak, const PcrSelection& selection, ByteSpan qualifying_data) {
  if (ak.tpm_ != this) return FailedPrecondition("Quote: the AK is not loaded in this TPM");
  TPML_PCR_SELECTION sel;
  RETURN_IF_ERROR(ToTpmlSelection(selection, &sel));
  TPM2B_DATA qualifying{};
  if (qualifying_data.size() > sizeof(qualifying.buffer)) {
    return InvalidInput("qualifying data is " + std::to_string(qualifying_data.size()) + " bytes, at most " +
                        std::to_string(sizeof(qualifying.buffer)));
  }
  qualifying.size = static_cast<uint16_t>(qualifying_data.size());
  if (!qualifying_data.empty()) std::memcpy(qualifying.buffer, qualifying_data.data(), qualifying_data.size());
  EsysPtr<TPM2B_ATTEST> quoted;
  EsysPtr<TPMT_SIGNATURE> signature;
  RETURN_IF_ERROR(impl_->Call_Esys_Quote(ak.esys_handle_, qualifying, sel, &quoted, &signature));
  Quote q;
  q.attest.assign(quoted->attestationData, quoted->attestationData + quoted->size);
  Status status;
  q.signature = MarshalAll(Tss2_MU_TPMT_SIGNATURE_Marshal, *signature, "TPMT_SIGNATURE", &status);
  RETURN_IF_ERROR(status);
  return q;
}

Result<std::vector<PcrValue>> Tpm::ReadPcrs(const PcrSelection& selection) {
  TPML_PCR_SELECTION all;
  RETURN_IF_ERROR(ToTpmlSelection(selection, &all));  // validates the whole selection first
  std::vector<PcrValue> out;
  for (uint32_t b = 0; b < all.count; ++b) {
    const TPMS_PCR_SELECTION& bank = all.pcrSelections[b];
    std::map<uint32_t, std::vector<uint8_t>> got;
    std::set<uint32_t> pending;
    for (uint32_t i = 0; i < kPcrCount; ++i) {
      if (bank.pcrSelect[i / 8] & (1u << (i % 8))) pending.insert(i);
    }
    // A TPM returns at most 8 digests per PCR_Read: ask again for what is still missing.
    while (!pending.empty()) {
      TPML_PCR_SELECTION req{};
      req.count = 1;
      req.pcrSelections[0].hash = bank.hash;
      req.pcrSelections[0].sizeofSelect = 3;
      for (uint32_t i : pending) {
        req.pcrSelections[0].pcrSelect[i / 8] = static_cast<uint8_t>(req.pcrSelections[0].pcrSelect[i / 8] | (1u << (i % 8)));
      }
      EsysPtr<TPML_PCR_SELECTION> sel_out;
      EsysPtr<TPML_DIGEST> values;
      RETURN_IF_ERROR(impl_->Call_Esys_PCR_Read(req, &sel_out, &values).Annotate("reading PCRs " + BankName(bank.hash) + ": "));
      std::vector<uint32_t> returned;
      for (uint32_t s = 0; s < sel_out->count; ++s) {
        const TPMS_PCR_SELECTION& r = sel_out->pcrSelections[s];
        if (r.hash != bank.hash) return Internal("PCR_Read returned bank " + BankName(r.hash) + ", asked " + BankName(bank.hash));
        for (uint32_t i = 0; i < 8u * r.sizeofSelect && i < 32; ++i) {
          if (r.pcrSelect[i / 8] & (1u << (i % 8))) returned.push_back(i);
        }
      }
      if (returned.empty()) {
        std::string list;
        for (uint32_t i : pending) list += (list.empty() ? "" : ",") + std::to_string(i);
        return NotFound("PCR bank " + BankName(bank.hash) + " returned no value for PCRs " + list +
                        " (bank not allocated on this TPM?)");
      }
      if (returned.size() != values->count) {
        return Internal("PCR_Read selected " + std::to_string(returned.size()) + " PCRs but returned " +
                        std::to_string(values->count) + " digests");
      }
      for (size_t k = 0; k < returned.size(); ++k) {
        uint32_t i = returned[k];
        if (!pending.count(i)) return Internal("PCR_Read returned PCR " + std::to_string(i) + " that was not asked");
        const TPM2B_DIGEST& d = values->digests[k];
        if (d.size != DigestSize(bank.hash)) {
          return Internal("PCR " + BankName(bank.hash) + ":" + std::to_string(i) + " has " + std::to_string(d.size) +
                          " bytes, expected " + std::to_string(DigestSize(bank.hash)));
        }
        got[i].assign(d.buffer, d.buffer + d.size);
        pending.erase(i);
      }
    }
    for (auto& [i, digest] : got) out.push_back(PcrValue{bank.hash, i, std::move(digest)});
  }
  return out;
}

Status Tpm::ExtendPcr(uint32_t index, uint16_t hash, ByteSpan digest) {
  const std::string where = "PCR " + BankName(hash) + ":" + std::to_string(index);
  if (index >= kPcrCount) return InvalidInput(where + " out of range 0.." + std::to_string(kPcrCount - 1));
  size_t want = DigestSize(hash);
  if (want == 0) return InvalidInput(where + ": bank not supported");
  if (digest.size() != want) {
    return InvalidInput(where + ": digest is " + std::to_string(digest.size()) + " bytes, expected " + std::to_string(want));
  }
  TPML_DIGEST_VALUES values{};
  values.count = 1;
  values.digests[0].hashAlg = hash;
  std::memcpy(&values.digests[0].digest, digest.data(), digest.size());
  return impl_->Call_Esys_PCR_Extend(ESYS_TR_PCR0 + index, values).Annotate("extending " + where + ": ");
}

Result<HandleCounts> Tpm::CountLoadedHandles() {
  HandleCounts counts;
  struct Range {
    uint32_t first;
    std::vector<uint32_t>* out;
  };
  for (Range r : {Range{TPM2_TRANSIENT_FIRST, &counts.transient}, Range{TPM2_LOADED_SESSION_FIRST, &counts.loaded_sessions},
                  Range{TPM2_ACTIVE_SESSION_FIRST, &counts.saved_sessions}}) {
    uint32_t property = r.first;
    for (int guard = 0; guard < 64; ++guard) {
      bool more = false;
      EsysPtr<TPMS_CAPABILITY_DATA> cap;
      RETURN_IF_ERROR(impl_->Call_Esys_GetCapability(TPM2_CAP_HANDLES, property, TPM2_MAX_CAP_HANDLES, &more, &cap));
      const TPML_HANDLE& h = cap->data.handles;
      for (uint32_t k = 0; k < h.count; ++k) {
        if ((h.handle[k] >> 24) == (r.first >> 24)) r.out->push_back(h.handle[k]);
      }
      if (!more || h.count == 0) break;
      property = h.handle[h.count - 1] + 1;
    }
  }
  return counts;
}

Result<std::string> Tpm::PublicKeyPem(ByteSpan tpm2b_public) {
  TPM2B_PUBLIC pub;
  RETURN_IF_ERROR(UnmarshalExact(Tss2_MU_TPM2B_PUBLIC_Unmarshal, tpm2b_public, "TPM2B_PUBLIC", &pub));
  const TPMT_PUBLIC& p = pub.publicArea;
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(), OSSL_PARAM_BLD_free);
  std::unique_ptr<BIGNUM, decltype(&BN_free)> n(nullptr, BN_free), e(nullptr, BN_free);
  std::vector<uint8_t> point;
  const char* key_type = nullptr;
  if (!bld) return Internal("OSSL_PARAM_BLD_new failed");
  if (p.type == TPM2_ALG_RSA) {
    key_type = "RSA";
    uint32_t exponent = p.parameters.rsaDetail.exponent ? p.parameters.rsaDetail.exponent : 65537;
    if (p.unique.rsa.size == 0) return InvalidInput("TPM2B_PUBLIC: RSA modulus is empty");
    n.reset(BN_bin2bn(p.unique.rsa.buffer, p.unique.rsa.size, nullptr));
    e.reset(BN_new());
    if (!n || !e || BN_set_word(e.get(), exponent) != 1 ||
        OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) != 1 ||
        OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get()) != 1) {
      return Internal("OpenSSL: building RSA public key parameters failed");
    }
  } else if (p.type == TPM2_ALG_ECC) {
    key_type = "EC";
    const char* group = nullptr;
    size_t field = 0;
    switch (p.parameters.eccDetail.curveID) {
      case TPM2_ECC_NIST_P256: group = "P-256"; field = 32; break;
      case TPM2_ECC_NIST_P384: group = "P-384"; field = 48; break;
      case TPM2_ECC_NIST_P521: group = "P-521"; field = 66; break;
      default:
        return Unsupported("TPM2B_PUBLIC: ECC curve " + Hex32(p.parameters.eccDetail.curveID) + " is not supported");
    }
    const TPM2B_ECC_PARAMETER& x = p.unique.ecc.x;
    const TPM2B_ECC_PARAMETER& y = p.unique.ecc.y;
    if (x.size == 0 || x.size > field || y.size == 0 || y.size > field) {
      return InvalidInput("TPM2B_PUBLIC: ECC point coordinates of " + std::to_string(x.size) + "/" +
                          std::to_string(y.size) + " bytes for a " + std::to_string(field) + "-byte field");
    }
    point.assign(1 + 2 * field, 0);
    point[0] = 0x04;  // uncompressed
    std::memcpy(point.data() + 1 + field - x.size, x.buffer, x.size);
    std::memcpy(point.data() + 1 + 2 * field - y.size, y.buffer, y.size);
    if (OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0) != 1 ||
        OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()) != 1) {
      return Internal("OpenSSL: building EC public key parameters failed");
    }
  } else {
    return Unsupported("TPM2B_PUBLIC: key type " + Hex32(p.type) + " is neither RSA nor ECC");
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(bld.get()), OSSL_PARAM_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(EVP_PKEY_CTX_new_from_name(nullptr, key_type, nullptr),
                                                                  EVP_PKEY_CTX_free);
  EVP_PKEY* raw = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return InvalidInput("OpenSSL EVP_PKEY_fromdata rejected the " + std::string(key_type) + " public key");
  }
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(raw, EVP_PKEY_free);
  if (p.type == TPM2_ALG_ECC) {
    // fromdata does not check that the point is on the curve.
    std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> check(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey.get(), nullptr),
                                                                      EVP_PKEY_CTX_free);
    if (!check || EVP_PKEY_public_check(check.get()) != 1) {
      return InvalidInput("TPM2B_PUBLIC: ECC point is not on the curve");
    }
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), pkey.get()) != 1) return Internal("OpenSSL PEM_write_bio_PUBKEY failed");
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

TraceHook StderrTrace() {
  return [](std::string_view call, uint32_t rc) {
    std::fprintf(stderr, "tpm: %.*s -> %s\n", static_cast<int>(call.size()), call.data(),
                 rc == 0 ? "success" : Tss2_RC_Decode(rc));
  };
}

}  // namespace enclave::attest::host
