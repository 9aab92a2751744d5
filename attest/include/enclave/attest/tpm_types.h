// TPM 2.0 structures the verifier reads (TPM 2.0 Part 2, "Structures"), all big-endian:
// TPMS_ATTEST with TPMS_QUOTE_INFO, TPM2B_PUBLIC / TPMT_PUBLIC (RSA and ECC keys),
// TPMT_SIGNATURE (RSASSA, RSAPSS, ECDSA) and TPML_PCR_SELECTION.
//
// Parsers are strict: every length is bounds-checked against both the input and the
// structure's maximum, every error names the field ("TPMT_PUBLIC.unique.x.size at offset
// 94 ..."), and the input must be consumed exactly (no trailing bytes). Parsing says
// nothing about trust: appraisal.h decides that.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "enclave/attest/tpm_alg.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

inline constexpr uint32_t kTpmGeneratedValue = 0xFF544347;  // TPM_GENERATED_VALUE
inline constexpr uint16_t kTpmStAttestQuote = 0x8018;       // TPM_ST_ATTEST_QUOTE
inline constexpr uint32_t kMaxPcrs = 24;                    // PC Client: PCR 0..23
inline constexpr uint8_t kMaxSizeofSelect = 4;              // up to 32 PCRs per bank
inline constexpr size_t kMaxHashBanks = 16;                 // TPML_PCR_SELECTION.count

// TPMA_OBJECT bits.
namespace attr {
inline constexpr uint32_t kFixedTpm = 1u << 1;
inline constexpr uint32_t kStClear = 1u << 2;
inline constexpr uint32_t kFixedParent = 1u << 4;
inline constexpr uint32_t kSensitiveDataOrigin = 1u << 5;
inline constexpr uint32_t kUserWithAuth = 1u << 6;
inline constexpr uint32_t kAdminWithPolicy = 1u << 7;
inline constexpr uint32_t kNoDa = 1u << 10;
inline constexpr uint32_t kEncryptedDuplication = 1u << 11;
inline constexpr uint32_t kRestricted = 1u << 16;
inline constexpr uint32_t kDecrypt = 1u << 17;
inline constexpr uint32_t kSign = 1u << 18;
}  // namespace attr
// "fixedTPM|fixedParent|..." for messages.
std::string ObjectAttributesString(uint32_t attributes);

// TPML_PCR_SELECTION, as an ordered list of (hash, bitmap). Bit i of `select` is PCR i
// (byte i/8, bit i%8, as in TPMS_PCR_SELECTION.pcrSelect).
struct PcrBankSelection {
  uint16_t hash = 0;
  uint8_t size_of_select = 3;
  uint32_t select = 0;
  bool operator==(const PcrBankSelection&) const = default;
};
struct PcrSelection {
  std::vector<PcrBankSelection> banks;  // in structure order
  bool operator==(const PcrSelection&) const = default;
  // Indices selected in `bank`, ascending.
  static std::vector<uint32_t> Indices(const PcrBankSelection& bank);
  // "sha256:0,1,2,7+sha1:10"
  std::string ToString() const;
  // Parses the same form ("sha256:0,1,7+sha1:10"), the tpm2-tools PCR list syntax.
  static Result<PcrSelection> FromString(std::string_view text);
};

struct ClockInfo {
  uint64_t clock = 0;
  uint32_t reset_count = 0;
  uint32_t restart_count = 0;
  uint8_t safe = 0;
};

// TPMS_ATTEST. `quote_*` are set only for type TPM_ST_ATTEST_QUOTE; other types keep
// their TPMU_ATTEST bytes in `other_attested`. Magic and type are not checked here (the
// appraisal reports them as findings).
struct TpmsAttest {
  uint32_t magic = 0;
  uint16_t type = 0;
  std::vector<uint8_t> qualified_signer;  // TPM2B_NAME contents
  std::vector<uint8_t> extra_data;        // TPM2B_DATA contents
  ClockInfo clock_info;
  uint64_t firmware_version = 0;
  PcrSelection quote_selection;
  std::vector<uint8_t> quote_pcr_digest;
  std::vector<uint8_t> other_attested;
};
Result<TpmsAttest> ParseTpmsAttest(ByteSpan data);
// TPM2B_ATTEST: u16 size then TPMS_ATTEST (the tpm2-tools quote.msg files are the bare
// TPMS_ATTEST; TPM2_Quote's response carries the sized form).
Result<TpmsAttest> ParseTpm2bAttest(ByteSpan data);
std::vector<uint8_t> EncodeTpmsAttest(const TpmsAttest& attest);

Result<PcrSelection> ParsePcrSelection(ByteSpan data);  // one TPML_PCR_SELECTION, exact
void EncodePcrSelection(const PcrSelection& sel, BeWriter* w);

// TPMT_PUBLIC for RSA and ECC keys.
struct SymDef {  // TPMT_SYM_DEF_OBJECT
  uint16_t algorithm = alg::kNull;
  uint16_t key_bits = 0;
  uint16_t mode = 0;
};
struct Scheme {  // TPMT_RSA_SCHEME / TPMT_ECC_SCHEME / TPMT_KDF_SCHEME
  uint16_t scheme = alg::kNull;
  uint16_t hash = 0;   // absent (0) for TPM_ALG_NULL and RSAES
  uint16_t count = 0;  // ECDAA only
};
struct TpmtPublic {
  uint16_t type = 0;  // alg::kRsa or alg::kEcc
  uint16_t name_alg = 0;
  uint32_t object_attributes = 0;
  std::vector<uint8_t> auth_policy;
  SymDef symmetric;
  Scheme scheme;
  // RSA
  uint16_t rsa_key_bits = 0;
  uint32_t rsa_exponent = 0;  // 0 means 65537
  std::vector<uint8_t> rsa_modulus;
  // ECC
  uint16_t ecc_curve = 0;
  Scheme ecc_kdf;
  std::vector<uint8_t> ecc_x, ecc_y;
  // The exact marshalled TPMT_PUBLIC bytes: the name is computed over these.
  std::vector<uint8_t> encoded;
};
Result<TpmtPublic> ParseTpmtPublic(ByteSpan data);
Result<TpmtPublic> ParseTpm2bPublic(ByteSpan data);
// Marshals every field (ignores `encoded`).
std::vector<uint8_t> EncodeTpmtPublic(const TpmtPublic& pub);
// TPM2B_NAME contents: nameAlg (u16) || H_nameAlg(TPMT_PUBLIC).
Result<std::vector<uint8_t>> ComputeName(const TpmtPublic& pub);

// TPMT_SIGNATURE.
struct TpmtSignature {
  uint16_t sig_alg = 0;  // alg::kRsassa, kRsapss, kEcdsa
  uint16_t hash = 0;
  std::vector<uint8_t> rsa_signature;
  std::vector<uint8_t> ecc_r, ecc_s;
};
Result<TpmtSignature> ParseTpmtSignature(ByteSpan data);
std::vector<uint8_t> EncodeTpmtSignature(const TpmtSignature& sig);

}  // namespace enclave::attest
