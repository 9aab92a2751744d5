// Host side of TPM 2.0 attestation, through tpm2-tss ESAPI: open a TPM by TCTI string,
// read EK certificates, create the EK from the TCG default template, create and load an
// attestation key (AK) under the EK, activate a credential, quote, read and extend PCRs.
//
// Every ESAPI call goes through one small wrapper that reports the call's name to the
// trace hook and turns a TSS2_RC into a Status whose message names the call and carries
// Tss2_RC_Decode's text ("Esys_Quote: tpm:parameter(1):value is out of range ...").
// Every transient object, session and ESYS_TR is released by an RAII guard on every path;
// CountLoadedHandles() lets a test prove it.
//
// Byte formats at this boundary are the TPM's own marshalled structures (big-endian,
// TPM 2.0 Part 2), so a verifier can parse them without this library:
//   public areas: TPM2B_PUBLIC; AK private blob: TPM2B_PRIVATE; names: TPM2B_NAME contents
//   (nameAlg || digest); quotes: TPMS_ATTEST (the contents of TPM2B_ATTEST) and TPMT_SIGNATURE;
//   credential challenges: TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET (each with its size).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::attest::host {

// NV indices of the EK certificates (TCG EK Credential Profile 2.0, "low range").
inline constexpr uint32_t kEkCertNvRsa2048 = 0x01C00002;
inline constexpr uint32_t kEkCertNvEccP256 = 0x01C0000A;
// High range, ECC NIST P-384 (template H-3): where swtpm 0.7 puts its ECC EK certificate.
// Readable with ReadNv; creating the matching H-3 EK is not implemented yet.
inline constexpr uint32_t kEkCertNvEccP384 = 0x01C00016;

enum class EkType { kRsa2048, kEccP256 };
enum class AkType { kEccP256, kRsa2048 };  // ECDSA-SHA256 / RSASSA-SHA256
std::string_view EkTypeName(EkType type);   // "RSA-2048", "ECC-P256"
std::string_view AkTypeName(AkType type);   // "ECC-P256/ECDSA-SHA256", ...

// TPMA_OBJECT of the AK this library creates:
// fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|restricted|sign.
inline constexpr uint32_t kAkAttributes = 0x00050072;
// TPMA_OBJECT of the TCG default EK templates L-1 and L-2:
// fixedTPM|fixedParent|sensitiveDataOrigin|adminWithPolicy|restricted|decrypt.
inline constexpr uint32_t kEkAttributes = 0x000300B2;

// The TCG default EK template (L-1 for RSA-2048, L-2 for ECC P-256) as a marshalled
// TPMT_PUBLIC (no size prefix), the input to TPM2_CreatePrimary.
std::vector<uint8_t> EkTemplate(EkType type);
// The AK template as a marshalled TPMT_PUBLIC.
std::vector<uint8_t> AkTemplate(AkType type);

// One PCR bank and the PCRs wanted in it (any order; reported ascending).
struct PcrBank {
  uint16_t hash = 0x000B;  // TPM_ALG_ID: 0x0004 sha1, 0x000B sha256, 0x000C sha384
  std::vector<uint32_t> pcrs;
};
using PcrSelection = std::vector<PcrBank>;

struct PcrValue {
  uint16_t hash = 0;
  uint32_t index = 0;
  std::vector<uint8_t> digest;
};

struct Quote {
  std::vector<uint8_t> attest;     // TPMS_ATTEST (the contents of TPM2B_ATTEST)
  std::vector<uint8_t> signature;  // TPMT_SIGNATURE
};

// A public key and its TPM name.
struct PublicKey {
  std::vector<uint8_t> public_area;  // TPM2B_PUBLIC
  std::vector<uint8_t> name;         // TPM2B_NAME contents: nameAlg (u16) || H(TPMT_PUBLIC)
};

// An AK created under the EK, to be stored by the host and loaded again with LoadAk.
// The private blob is wrapped by the EK's storage key: useless outside this TPM.
struct AkBlob {
  PublicKey pub;
  std::vector<uint8_t> private_area;  // TPM2B_PRIVATE
};

// Handles in use on the TPM, from TPM2_GetCapability(TPM_CAP_HANDLES).
struct HandleCounts {
  std::vector<uint32_t> transient;        // 0x80xxxxxx
  std::vector<uint32_t> loaded_sessions;  // 0x02xxxxxx
  std::vector<uint32_t> saved_sessions;   // 0x03xxxxxx (context-saved, still counted by the TPM)
  bool empty() const { return transient.empty() && loaded_sessions.empty() && saved_sessions.empty(); }
};

class Tpm;

// A transient object loaded in the TPM (EK or AK); flushed when destroyed. Must not outlive
// the Tpm that made it.
class LoadedKey {
 public:
  LoadedKey() = default;
  LoadedKey(LoadedKey&& other) noexcept;
  LoadedKey& operator=(LoadedKey&& other) noexcept;
  LoadedKey(const LoadedKey&) = delete;
  LoadedKey& operator=(const LoadedKey&) = delete;
  ~LoadedKey();

  const PublicKey& pub() const { return pub_; }
  bool loaded() const { return tpm_ != nullptr; }

 private:
  friend class Tpm;
  void Release();
  Tpm* tpm_ = nullptr;
  uint32_t esys_handle_ = 0;  // ESYS_TR
  PublicKey pub_;
};

// Called before each ESAPI/TCTI call returns: the call's name and its TSS2_RC (0 = success).
using TraceHook = std::function<void(std::string_view call, uint32_t rc)>;
// A hook that prints "tpm: Esys_Quote -> success" (or the decoded error) to stderr.
TraceHook StderrTrace();

// One connection to one TPM. Not thread-safe: use one Tpm per thread (a resource manager,
// /dev/tpmrm0, arbitrates between processes). The endorsement hierarchy's auth value is
// assumed empty (the default; a TPM whose owner set one needs an option not written yet).
class Tpm {
 public:
  // "swtpm:host=127.0.0.1,port=2321", "device:/dev/tpmrm0", ... (Tss2_TctiLdr_Initialize).
  static Result<std::unique_ptr<Tpm>> Open(std::string_view tcti, TraceHook trace = nullptr);
  ~Tpm();
  Tpm(const Tpm&) = delete;
  Tpm& operator=(const Tpm&) = delete;

  // Raw contents of an NV index (NV_ReadPublic then NV_Read in chunks). NotFound when the
  // index is not defined.
  Result<std::vector<uint8_t>> ReadNv(uint32_t nv_index);
  // The EK certificate as stored (DER; some vendors pad it or store non-strict DER: the bytes
  // are returned unchanged). NotFound, saying which index, when this TPM has none.
  Result<std::vector<uint8_t>> ReadEkCertificate(EkType type);

  // The EK from the TCG default template, as a transient primary in the endorsement hierarchy.
  Result<LoadedKey> CreateEk(EkType type);
  // A fresh AK under `ek` (a PolicySecret(TPM_RH_ENDORSEMENT) session authorizes the EK, as
  // tpm2_createak does).
  Result<AkBlob> CreateAk(const LoadedKey& ek, AkType type = AkType::kEccP256);
  Result<LoadedKey> LoadAk(const LoadedKey& ek, const AkBlob& ak);

  // TPM2_ActivateCredential: recovers the secret a verifier sealed to (EK, AK name).
  // `credential_blob` is a marshalled TPM2B_ID_OBJECT, `encrypted_secret` a marshalled
  // TPM2B_ENCRYPTED_SECRET. AuthFailed when the TPM rejects the challenge's integrity.
  Result<crypto::SecretBytes> ActivateCredential(const LoadedKey& ak, const LoadedKey& ek,
                                                 ByteSpan credential_blob, ByteSpan encrypted_secret);

  // TPM2_Quote with the AK's own scheme. `qualifying_data` at most 64 bytes (TPM2B_DATA;
  // a TPM may accept less: the size of its largest digest).
  Result<Quote> QuotePcrs(const LoadedKey& ak, const PcrSelection& selection, ByteSpan qualifying_data);

  // Values in bank order, ascending index. Fails when a bank or PCR is not allocated.
  Result<std::vector<PcrValue>> ReadPcrs(const PcrSelection& selection);
  // TPM2_PCR_Extend of one bank's digest (length must be that bank's digest size).
  Status ExtendPcr(uint32_t index, uint16_t hash, ByteSpan digest);

  Result<HandleCounts> CountLoadedHandles();

  // An RSA or ECC TPM2B_PUBLIC as a SubjectPublicKeyInfo PEM, via OpenSSL.
  // (Static: needs no TPM.)
  static Result<std::string> PublicKeyPem(ByteSpan tpm2b_public);

 private:
  friend class LoadedKey;
  struct Impl;
  explicit Tpm(std::unique_ptr<Impl> impl);
  void Flush(uint32_t esys_handle);
  std::unique_ptr<Impl> impl_;
};

}  // namespace enclave::attest::host
