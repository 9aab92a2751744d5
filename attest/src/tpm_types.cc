#include "enclave/attest/tpm_types.h"

#include <charconv>
#include <set>

#include "be_reader.h"

namespace enclave::attest {

using internal::BeReader;
using internal::FieldError;

namespace {

// Maximum sizes of the TPM2B buffers (TPM 2.0 Part 2 with SHA-512, RSA-4096, P-521).
constexpr size_t kMaxName = 2 + 64;      // TPMU_NAME: TPMT_HA
constexpr size_t kMaxData = 2 + 64;      // TPM2B_DATA: sizeof(TPMT_HA)
constexpr size_t kMaxDigest = 64;        // TPM2B_DIGEST
constexpr size_t kMaxRsaBytes = 512;     // TPM2B_PUBLIC_KEY_RSA
constexpr size_t kMaxEccParameter = 66;  // TPM2B_ECC_PARAMETER (P-521)

Status ParseSymDef(BeReader& r, const std::string& f, SymDef* s) {
  RETURN_IF_ERROR(r.U16(f + ".algorithm", &s->algorithm));
  if (s->algorithm == alg::kNull) return OkStatus();
  RETURN_IF_ERROR(r.U16(f + ".keyBits", &s->key_bits));
  return r.U16(f + ".mode", &s->mode);
}

void EncodeSymDef(const SymDef& s, BeWriter* w) {
  w->U16(s.algorithm);
  if (s.algorithm == alg::kNull) return;
  w->U16(s.key_bits);
  w->U16(s.mode);
}

enum class SchemeKind { kRsa, kEcc, kKdf };

// Which schemes carry which details (TPMU_ASYM_SCHEME, TPMU_KDF_SCHEME).
Result<int> SchemeDetailFields(SchemeKind kind, uint16_t scheme) {
  if (scheme == alg::kNull) return 0;
  switch (kind) {
    case SchemeKind::kRsa:
      if (scheme == alg::kRsaes) return 0;
      if (scheme == alg::kRsassa || scheme == alg::kRsapss || scheme == alg::kOaep) return 1;
      break;
    case SchemeKind::kEcc:
      if (scheme == alg::kEcdaa) return 2;
      if (scheme == alg::kEcdsa || scheme == alg::kEcdh || scheme == alg::kSm2 || scheme == alg::kEcschnorr ||
          scheme == 0x001D /* ECMQV */) {
        return 1;
      }
      break;
    case SchemeKind::kKdf:
      if (scheme == 0x0007 /* MGF1 */ || scheme == 0x0020 || scheme == 0x0021 || scheme == 0x0022) return 1;
      break;
  }
  return Status(Code::kUnsupported, "scheme " + AlgName(scheme) + " is not a known scheme here");
}

Status ParseScheme(BeReader& r, const std::string& f, SchemeKind kind, Scheme* s) {
  size_t at = r.offset();
  RETURN_IF_ERROR(r.U16(f + ".scheme", &s->scheme));
  auto fields = SchemeDetailFields(kind, s->scheme);
  if (!fields.ok()) return FieldError(f + ".scheme", at, fields.status().message());
  if (*fields >= 1) RETURN_IF_ERROR(r.U16(f + ".details.hashAlg", &s->hash));
  if (*fields >= 2) RETURN_IF_ERROR(r.U16(f + ".details.count", &s->count));
  return OkStatus();
}

void EncodeScheme(const Scheme& s, SchemeKind kind, BeWriter* w) {
  w->U16(s.scheme);
  auto fields = SchemeDetailFields(kind, s.scheme);
  int n = fields.ok() ? *fields : 0;
  if (n >= 1) w->U16(s.hash);
  if (n >= 2) w->U16(s.count);
}

Status ParsePcrSelectionInto(BeReader& r, const std::string& f, PcrSelection* sel) {
  uint32_t count = 0;
  size_t at = r.offset();
  RETURN_IF_ERROR(r.U32(f + ".count", &count));
  if (count > kMaxHashBanks) {
    return FieldError(f + ".count", at, std::to_string(count) + " banks, more than " + std::to_string(kMaxHashBanks));
  }
  std::set<uint16_t> seen;
  for (uint32_t i = 0; i < count; ++i) {
    std::string fi = f + ".pcrSelections[" + std::to_string(i) + "]";
    PcrBankSelection b;
    size_t hat = r.offset();
    RETURN_IF_ERROR(r.U16(fi + ".hash", &b.hash));
    if (!seen.insert(b.hash).second)
      return FieldError(fi + ".hash", hat, "bank " + AlgName(b.hash) + " selected twice");
    size_t sat = r.offset();
    RETURN_IF_ERROR(r.U8(fi + ".sizeofSelect", &b.size_of_select));
    if (b.size_of_select < 1 || b.size_of_select > kMaxSizeofSelect) {
      return FieldError(fi + ".sizeofSelect", sat,
                        std::to_string(b.size_of_select) + " is outside 1.." + std::to_string(kMaxSizeofSelect));
    }
    ByteSpan bits;
    RETURN_IF_ERROR(r.Bytes(fi + ".pcrSelect", b.size_of_select, &bits));
    for (size_t k = 0; k < bits.size(); ++k) b.select |= static_cast<uint32_t>(bits[k]) << (8 * k);
    if (kMaxPcrs < 32 && (b.select >> kMaxPcrs) != 0) {
      return FieldError(fi + ".pcrSelect", sat + 1, "selects a PCR above " + std::to_string(kMaxPcrs - 1));
    }
    sel->banks.push_back(b);
  }
  return OkStatus();
}

}  // namespace

std::string ObjectAttributesString(uint32_t a) {
  static const std::pair<uint32_t, const char*> kNames[] = {{attr::kFixedTpm, "fixedTPM"},
                                                            {attr::kStClear, "stClear"},
                                                            {attr::kFixedParent, "fixedParent"},
                                                            {attr::kSensitiveDataOrigin, "sensitiveDataOrigin"},
                                                            {attr::kUserWithAuth, "userWithAuth"},
                                                            {attr::kAdminWithPolicy, "adminWithPolicy"},
                                                            {attr::kNoDa, "noDA"},
                                                            {attr::kEncryptedDuplication, "encryptedDuplication"},
                                                            {attr::kRestricted, "restricted"},
                                                            {attr::kDecrypt, "decrypt"},
                                                            {attr::kSign, "sign"}};
  std::string s;
  uint32_t known = 0;
  for (auto [bit, name] : kNames) {
    known |= bit;
    if (a & bit) s += (s.empty() ? "" : "|") + std::string(name);
  }
  if (a & ~known) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s0x%08x", s.empty() ? "" : "|", a & ~known);
    s += buf;
  }
  return s.empty() ? "(none)" : s;
}

std::vector<uint32_t> PcrSelection::Indices(const PcrBankSelection& bank) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < 32; ++i) {
    if (bank.select & (1u << i)) out.push_back(i);
  }
  return out;
}

std::string PcrSelection::ToString() const {
  std::string s;
  for (const auto& b : banks) {
    if (!s.empty()) s += "+";
    s += AlgName(b.hash) + ":";
    bool first = true;
    for (uint32_t i : Indices(b)) {
      s += (first ? "" : ",") + std::to_string(i);
      first = false;
    }
  }
  return s.empty() ? "(empty)" : s;
}

Result<PcrSelection> PcrSelection::FromString(std::string_view text) {
  PcrSelection sel;
  std::set<uint16_t> seen;
  while (!text.empty()) {
    size_t plus = text.find('+');
    std::string_view part = text.substr(0, plus);
    text = plus == std::string_view::npos ? std::string_view() : text.substr(plus + 1);
    size_t colon = part.find(':');
    if (colon == std::string_view::npos)
      return InvalidInput("PCR selection '" + std::string(part) + "' needs bank:list");
    PcrBankSelection b;
    b.hash = HashAlgFromName(part.substr(0, colon));
    if (b.hash == 0) return InvalidInput("unknown PCR bank '" + std::string(part.substr(0, colon)) + "'");
    if (!seen.insert(b.hash).second) return InvalidInput("PCR bank " + AlgName(b.hash) + " given twice");
    std::string_view list = part.substr(colon + 1);
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string_view num = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      uint32_t idx = 0;
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), idx);
      if (ec != std::errc() || p != num.data() + num.size() || num.empty() || idx >= kMaxPcrs) {
        return InvalidInput("bad PCR index '" + std::string(num) + "'");
      }
      b.select |= 1u << idx;
    }
    sel.banks.push_back(b);
  }
  return sel;
}

Result<PcrSelection> ParsePcrSelection(ByteSpan data) {
  BeReader r(data);
  PcrSelection sel;
  RETURN_IF_ERROR(ParsePcrSelectionInto(r, "TPML_PCR_SELECTION", &sel));
  RETURN_IF_ERROR(r.End("TPML_PCR_SELECTION"));
  return sel;
}

void EncodePcrSelection(const PcrSelection& sel, BeWriter* w) {
  w->U32(static_cast<uint32_t>(sel.banks.size()));
  for (const auto& b : sel.banks) {
    w->U16(b.hash);
    w->U8(b.size_of_select);
    for (uint8_t k = 0; k < b.size_of_select; ++k) w->U8(static_cast<uint8_t>(b.select >> (8 * k)));
  }
}

Result<TpmsAttest> ParseTpmsAttest(ByteSpan data) {
  BeReader r(data);
  TpmsAttest a;
  RETURN_IF_ERROR(r.U32("TPMS_ATTEST.magic", &a.magic));
  RETURN_IF_ERROR(r.U16("TPMS_ATTEST.type", &a.type));
  RETURN_IF_ERROR(r.Sized("TPMS_ATTEST.qualifiedSigner", kMaxName, &a.qualified_signer));
  RETURN_IF_ERROR(r.Sized("TPMS_ATTEST.extraData", kMaxData, &a.extra_data));
  RETURN_IF_ERROR(r.U64("TPMS_ATTEST.clockInfo.clock", &a.clock_info.clock));
  RETURN_IF_ERROR(r.U32("TPMS_ATTEST.clockInfo.resetCount", &a.clock_info.reset_count));
  RETURN_IF_ERROR(r.U32("TPMS_ATTEST.clockInfo.restartCount", &a.clock_info.restart_count));
  size_t at = r.offset();
  RETURN_IF_ERROR(r.U8("TPMS_ATTEST.clockInfo.safe", &a.clock_info.safe));
  if (a.clock_info.safe > 1) return FieldError("TPMS_ATTEST.clockInfo.safe", at, "TPMI_YES_NO must be 0 or 1");
  RETURN_IF_ERROR(r.U64("TPMS_ATTEST.firmwareVersion", &a.firmware_version));
  if (a.type == kTpmStAttestQuote) {
    RETURN_IF_ERROR(ParsePcrSelectionInto(r, "TPMS_ATTEST.attested.quote.pcrSelect", &a.quote_selection));
    RETURN_IF_ERROR(r.Sized("TPMS_ATTEST.attested.quote.pcrDigest", kMaxDigest, &a.quote_pcr_digest));
  } else {
    ByteSpan rest;
    RETURN_IF_ERROR(r.Bytes("TPMS_ATTEST.attested", r.remaining(), &rest));
    a.other_attested.assign(rest.begin(), rest.end());
  }
  RETURN_IF_ERROR(r.End("TPMS_ATTEST"));
  return a;
}

Result<TpmsAttest> ParseTpm2bAttest(ByteSpan data) {
  BeReader r(data);
  uint16_t size = 0;
  RETURN_IF_ERROR(r.U16("TPM2B_ATTEST.size", &size));
  if (size != r.remaining()) {
    return FieldError("TPM2B_ATTEST.size", 0,
                      "says " + std::to_string(size) + " bytes, " + std::to_string(r.remaining()) + " follow");
  }
  return ParseTpmsAttest(data.subspan(2));
}

std::vector<uint8_t> EncodeTpmsAttest(const TpmsAttest& a) {
  BeWriter w;
  w.U32(a.magic);
  w.U16(a.type);
  w.Sized(a.qualified_signer);
  w.Sized(a.extra_data);
  w.U64(a.clock_info.clock);
  w.U32(a.clock_info.reset_count);
  w.U32(a.clock_info.restart_count);
  w.U8(a.clock_info.safe);
  w.U64(a.firmware_version);
  if (a.type == kTpmStAttestQuote) {
    EncodePcrSelection(a.quote_selection, &w);
    w.Sized(a.quote_pcr_digest);
  } else {
    w.Bytes(a.other_attested);
  }
  return std::move(w.bytes());
}

Result<TpmtPublic> ParseTpmtPublic(ByteSpan data) {
  BeReader r(data);
  TpmtPublic p;
  size_t at = r.offset();
  RETURN_IF_ERROR(r.U16("TPMT_PUBLIC.type", &p.type));
  if (p.type != alg::kRsa && p.type != alg::kEcc) {
    return Status(Code::kUnsupported, "field 'TPMT_PUBLIC.type' at offset " + std::to_string(at) + ": " +
                                          AlgName(p.type) + " keys are not supported (RSA and ECC only)");
  }
  RETURN_IF_ERROR(r.U16("TPMT_PUBLIC.nameAlg", &p.name_alg));
  RETURN_IF_ERROR(r.U32("TPMT_PUBLIC.objectAttributes", &p.object_attributes));
  RETURN_IF_ERROR(r.Sized("TPMT_PUBLIC.authPolicy", kMaxDigest, &p.auth_policy));
  if (p.type == alg::kRsa) {
    RETURN_IF_ERROR(ParseSymDef(r, "TPMT_PUBLIC.parameters.rsaDetail.symmetric", &p.symmetric));
    RETURN_IF_ERROR(ParseScheme(r, "TPMT_PUBLIC.parameters.rsaDetail.scheme", SchemeKind::kRsa, &p.scheme));
    RETURN_IF_ERROR(r.U16("TPMT_PUBLIC.parameters.rsaDetail.keyBits", &p.rsa_key_bits));
    RETURN_IF_ERROR(r.U32("TPMT_PUBLIC.parameters.rsaDetail.exponent", &p.rsa_exponent));
    RETURN_IF_ERROR(r.Sized("TPMT_PUBLIC.unique.rsa", kMaxRsaBytes, &p.rsa_modulus));
  } else {
    RETURN_IF_ERROR(ParseSymDef(r, "TPMT_PUBLIC.parameters.eccDetail.symmetric", &p.symmetric));
    RETURN_IF_ERROR(ParseScheme(r, "TPMT_PUBLIC.parameters.eccDetail.scheme", SchemeKind::kEcc, &p.scheme));
    RETURN_IF_ERROR(r.U16("TPMT_PUBLIC.parameters.eccDetail.curveID", &p.ecc_curve));
    RETURN_IF_ERROR(ParseScheme(r, "TPMT_PUBLIC.parameters.eccDetail.kdf", SchemeKind::kKdf, &p.ecc_kdf));
    RETURN_IF_ERROR(r.Sized("TPMT_PUBLIC.unique.ecc.x", kMaxEccParameter, &p.ecc_x));
    RETURN_IF_ERROR(r.Sized("TPMT_PUBLIC.unique.ecc.y", kMaxEccParameter, &p.ecc_y));
  }
  RETURN_IF_ERROR(r.End("TPMT_PUBLIC"));
  p.encoded.assign(data.begin(), data.end());
  return p;
}

Result<TpmtPublic> ParseTpm2bPublic(ByteSpan data) {
  BeReader r(data);
  uint16_t size = 0;
  RETURN_IF_ERROR(r.U16("TPM2B_PUBLIC.size", &size));
  if (size != r.remaining()) {
    return FieldError("TPM2B_PUBLIC.size", 0,
                      "says " + std::to_string(size) + " bytes, " + std::to_string(r.remaining()) + " follow");
  }
  auto p = ParseTpmtPublic(data.subspan(2));
  if (!p.ok()) return p.status().Annotate("TPM2B_PUBLIC.publicArea (offset 2)");
  return p;
}

std::vector<uint8_t> EncodeTpmtPublic(const TpmtPublic& p) {
  BeWriter w;
  w.U16(p.type);
  w.U16(p.name_alg);
  w.U32(p.object_attributes);
  w.Sized(p.auth_policy);
  EncodeSymDef(p.symmetric, &w);
  if (p.type == alg::kRsa) {
    EncodeScheme(p.scheme, SchemeKind::kRsa, &w);
    w.U16(p.rsa_key_bits);
    w.U32(p.rsa_exponent);
    w.Sized(p.rsa_modulus);
  } else {
    EncodeScheme(p.scheme, SchemeKind::kEcc, &w);
    w.U16(p.ecc_curve);
    EncodeScheme(p.ecc_kdf, SchemeKind::kKdf, &w);
    w.Sized(p.ecc_x);
    w.Sized(p.ecc_y);
  }
  return std::move(w.bytes());
}

Result<std::vector<uint8_t>> ComputeName(const TpmtPublic& pub) {
  if (!IsSupportedHash(pub.name_alg)) {
    return Unsupported("TPMT_PUBLIC.nameAlg " + AlgName(pub.name_alg) + " cannot be computed here");
  }
  std::vector<uint8_t> encoded = pub.encoded.empty() ? EncodeTpmtPublic(pub) : pub.encoded;
  ASSIGN_OR_RETURN(std::vector<uint8_t> h, Hash(pub.name_alg, {encoded}));
  std::vector<uint8_t> name = {static_cast<uint8_t>(pub.name_alg >> 8), static_cast<uint8_t>(pub.name_alg)};
  name.insert(name.end(), h.begin(), h.end());
  return name;
}

Result<TpmtSignature> ParseTpmtSignature(ByteSpan data) {
  BeReader r(data);
  TpmtSignature s;
  size_t at = r.offset();
  RETURN_IF_ERROR(r.U16("TPMT_SIGNATURE.sigAlg", &s.sig_alg));
  if (s.sig_alg == alg::kRsassa || s.sig_alg == alg::kRsapss) {
    RETURN_IF_ERROR(r.U16("TPMT_SIGNATURE.signature.rsa.hash", &s.hash));
    RETURN_IF_ERROR(r.Sized("TPMT_SIGNATURE.signature.rsa.sig", kMaxRsaBytes, &s.rsa_signature));
  } else if (s.sig_alg == alg::kEcdsa) {
    RETURN_IF_ERROR(r.U16("TPMT_SIGNATURE.signature.ecdsa.hash", &s.hash));
    RETURN_IF_ERROR(r.Sized("TPMT_SIGNATURE.signature.ecdsa.signatureR", kMaxEccParameter, &s.ecc_r));
    RETURN_IF_ERROR(r.Sized("TPMT_SIGNATURE.signature.ecdsa.signatureS", kMaxEccParameter, &s.ecc_s));
  } else {
    return Status(Code::kUnsupported, "field 'TPMT_SIGNATURE.sigAlg' at offset " + std::to_string(at) + ": " +
                                          AlgName(s.sig_alg) + " (RSASSA, RSAPSS and ECDSA only)");
  }
  RETURN_IF_ERROR(r.End("TPMT_SIGNATURE"));
  return s;
}

std::vector<uint8_t> EncodeTpmtSignature(const TpmtSignature& s) {
  BeWriter w;
  w.U16(s.sig_alg);
  w.U16(s.hash);
  if (s.sig_alg == alg::kEcdsa) {
    w.Sized(s.ecc_r);
    w.Sized(s.ecc_s);
  } else {
    w.Sized(s.rsa_signature);
  }
  return std::move(w.bytes());
}

}  // namespace enclave::attest
