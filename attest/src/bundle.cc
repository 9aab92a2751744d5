// Strict JSON bundles (bundle.h, docs/formats/evidence.md "Bundles").
#include "enclave/attest/bundle.h"

#include <algorithm>
#include <cstdio>

#include <charconv>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/attest/event_log.h"

namespace enclave::attest {
namespace {

using nlohmann::json;

// Field access that names the bundle and the field in every error. Construction checks
// that the object has exactly the expected keys.
class Fields {
 public:
  Fields(std::string what, std::string prefix, const json* obj) : what_(std::move(what)), prefix_(std::move(prefix)), obj_(obj) {}

  Status ExpectKeys(std::initializer_list<const char*> keys) const {
    if (!obj_->is_object()) return Err("", "not a JSON object");
    std::set<std::string> want;
    for (const char* k : keys) want.insert(k);
    for (const auto& [k, v] : obj_->items()) {
      if (!want.count(k)) return Err(k, "unknown key");
    }
    for (const std::string& k : want) {
      if (!obj_->contains(k)) return Err(k, "missing");
    }
    return OkStatus();
  }

  Result<std::string> String(const char* key) const {
    if (!obj_->contains(key)) return Err(key, "missing");
    const json& v = obj_->at(key);
    if (!v.is_string()) return Err(key, "must be a string");
    return v.get<std::string>();
  }
  Result<std::vector<uint8_t>> Hex(const char* key, size_t min_len, size_t max_len) const {
    ASSIGN_OR_RETURN(std::string s, String(key));
    auto bytes = HexDecode(s);
    if (!bytes.ok()) return Err(key, "bad hex (" + bytes.status().message() + ")");
    if (bytes->size() < min_len || bytes->size() > max_len) {
      return Err(key, "length " + std::to_string(bytes->size()) + " bytes, expected " + std::to_string(min_len) +
                          (min_len == max_len ? "" : ".." + std::to_string(max_len)));
    }
    return std::move(bytes).value();
  }
  Result<crypto::Digest256> Digest(const char* key) const {
    ASSIGN_OR_RETURN(std::vector<uint8_t> b, Hex(key, 32, 32));
    crypto::Digest256 d{};
    std::copy(b.begin(), b.end(), d.begin());
    return d;
  }
  Result<int64_t> Int(const char* key, int64_t min, int64_t max) const {
    const json& v = obj_->at(key);
    if (!v.is_number_integer()) return Err(key, "must be an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) return Err(key, "out of range");
    int64_t x = v.get<int64_t>();
    if (x < min || x > max) return Err(key, "out of range " + std::to_string(min) + ".." + std::to_string(max));
    return x;
  }
  Result<const json*> Object(const char* key) const {
    const json& v = obj_->at(key);
    if (!v.is_object()) return Err(key, "must be a JSON object");
    return &v;
  }
  Result<const json*> Array(const char* key) const {
    const json& v = obj_->at(key);
    if (!v.is_array()) return Err(key, "must be a JSON array");
    return &v;
  }
  bool IsNull(const char* key) const { return obj_->at(key).is_null(); }
  Status Err(std::string_view key, std::string_view why) const {
    return InvalidInput(what_ + ": field '" + prefix_ + std::string(key) + "': " + std::string(why));
  }
  std::string Path(std::string_view key) const { return prefix_ + std::string(key) + "."; }
  const std::string& what() const { return what_; }

 private:
  std::string what_, prefix_;
  const json* obj_;
};

// Parses JSON refusing duplicate keys (nlohmann keeps the last silently) and anything after
// the document.
// The deepest nesting of arrays and objects outside strings, stopping past `limit`: a
// linear scan before any tree is built (a body of 16 MiB of '[' would otherwise cost
// seconds and hundreds of MiB to parse before being refused). Bundles nest 3 levels.
size_t NestingDepth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

constexpr size_t kMaxBundleNesting = 32;

Result<json> ParseStrictJson(std::string_view text, const std::string& what) {
  if (text.size() > kMaxBundleBytes) return InvalidInput(what + ": larger than the " + std::to_string(kMaxBundleBytes) + "-byte limit");
  if (NestingDepth(text, kMaxBundleNesting) > kMaxBundleNesting) {
    return InvalidInput(what + ": JSON nested deeper than " + std::to_string(kMaxBundleNesting) + " levels");
  }
  std::vector<std::set<std::string>> keys;
  bool duplicate = false;
  std::string dup_key;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
          duplicate = true;
          dup_key = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  json doc = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidInput(what + ": not valid JSON");
  if (duplicate) return InvalidInput(what + ": key '" + dup_key + "' given twice");
  if (!doc.is_object()) return InvalidInput(what + ": not a JSON object");
  return doc;
}

Status CheckFormat(const Fields& f, std::string_view expected) {
  ASSIGN_OR_RETURN(std::string format, f.String("format"));
  if (format != expected) return f.Err("format", "is '" + format + "', expected '" + std::string(expected) + "'");
  return OkStatus();
}

std::string Dump(const json& doc) { return doc.dump(2) + "\n"; }

// TPM2B_* as carried in a bundle: u16 size equal to the remaining length.
Status CheckTpm2b(const Fields& f, const char* key, const std::vector<uint8_t>& b) {
  if (b.size() < 2 || static_cast<size_t>((b[0] << 8) | b[1]) + 2 != b.size()) {
    return f.Err(key, "is not a TPM2B (u16 size then exactly that many bytes)");
  }
  return OkStatus();
}

// TPM2B_NAME contents of a key: nameAlg (a supported hash) || digest of its size.
Status CheckName(const Fields& f, const char* key, const std::vector<uint8_t>& name) {
  if (name.size() < 2) return f.Err(key, "too short for a TPM name");
  uint16_t alg = static_cast<uint16_t>((name[0] << 8) | name[1]);
  if (!IsSupportedHash(alg) || HashSize(alg) + 2 != name.size()) {
    return f.Err(key, "is not nameAlg || digest with a supported hash");
  }
  return OkStatus();
}

std::string NvIndexText(uint32_t index) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", index);
  return buf;
}

std::string ImaHex(const std::string& s) { return HexEncode(AsBytes(s)); }

}  // namespace

Result<uint32_t> EkCertificateIndexFor(ByteSpan ek_public) {
  ASSIGN_OR_RETURN(TpmtPublic pub, ParseTpm2bPublic(ek_public));
  if (pub.type == alg::kRsa && pub.rsa_key_bits == 2048) return 0x01C00002u;
  if (pub.type == alg::kEcc && pub.ecc_curve == curve::kNistP256) return 0x01C0000Au;
  if (pub.type == alg::kEcc && pub.ecc_curve == curve::kNistP384) return 0x01C00016u;
  return InvalidInput("EK public: no EK certificate index for this key type (RSA-2048, ECC P-256, ECC P-384 known)");
}

// ---- enrolment -------------------------------------------------------------------------

std::string EncodeEnrolmentBundle(const EnrolmentBundle& b) {
  json certs = json::array();
  for (const auto& c : b.ek_certificates) certs.push_back({{"nv_index", NvIndexText(c.nv_index)}, {"der", HexEncode(c.der)}});
  json doc = {{"format", std::string(kEnrolmentFormat)},  {"ek_public", HexEncode(b.ek_public)},
              {"ek_certificates", certs},    {"ak_public", HexEncode(b.ak_public)},
              {"ak_name", HexEncode(b.ak_name)}, {"created_at", b.created_at}};
  return Dump(doc);
}

Result<EnrolmentBundle> ParseEnrolmentBundle(std::string_view text) {
  const std::string what = "enrolment bundle";
  ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, what));
  Fields f(what, "", &doc);
  RETURN_IF_ERROR(CheckFormat(f, kEnrolmentFormat));
  RETURN_IF_ERROR(f.ExpectKeys({"format", "ek_public", "ek_certificates", "ak_public", "ak_name", "created_at"}));
  EnrolmentBundle b;
  ASSIGN_OR_RETURN(b.ek_public, f.Hex("ek_public", 4, 2 + 1024));
  RETURN_IF_ERROR(CheckTpm2b(f, "ek_public", b.ek_public));
  ASSIGN_OR_RETURN(b.ak_public, f.Hex("ak_public", 4, 2 + 1024));
  RETURN_IF_ERROR(CheckTpm2b(f, "ak_public", b.ak_public));
  ASSIGN_OR_RETURN(b.ak_name, f.Hex("ak_name", 2, 2 + 64));
  RETURN_IF_ERROR(CheckName(f, "ak_name", b.ak_name));
  ASSIGN_OR_RETURN(b.created_at, f.Int("created_at", 0, INT64_MAX));
  ASSIGN_OR_RETURN(const json* certs, f.Array("ek_certificates"));
  if (certs->size() > 8) return f.Err("ek_certificates", "more than 8 certificates");
  std::set<uint32_t> seen;
  for (size_t i = 0; i < certs->size(); ++i) {
    const std::string prefix = "ek_certificates[" + std::to_string(i) + "].";
    Fields c(what, prefix, &(*certs)[i]);
    RETURN_IF_ERROR(c.ExpectKeys({"nv_index", "der"}));
    ASSIGN_OR_RETURN(std::string idx, c.String("nv_index"));
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(idx.data() + std::min<size_t>(2, idx.size()), idx.data() + idx.size(), v, 16);
    if (idx.size() != 10 || idx.rfind("0x", 0) != 0 || ec != std::errc() || p != idx.data() + idx.size() ||
        NvIndexText(v) != idx) {
      return c.Err("nv_index", "must be 0x followed by 8 lowercase hex digits");
    }
    if ((v >> 24) != 0x01) return c.Err("nv_index", "is not an NV index (0x01xxxxxx)");
    if (!seen.insert(v).second) return c.Err("nv_index", "index given twice");
    EkCertificateEntry e;
    e.nv_index = v;
    ASSIGN_OR_RETURN(e.der, c.Hex("der", 1, 4096));
    b.ek_certificates.push_back(std::move(e));
  }
  return b;
}

// ---- challenge and response ------------------------------------------------------------

std::string EncodeChallengeBundle(const ChallengeBundle& b) {
  json doc = {{"format", std::string(kChallengeFormat)},
              {"ak_name", HexEncode(b.ak_name)},
              {"credential_blob", HexEncode(b.credential_blob)},
              {"encrypted_secret", HexEncode(b.encrypted_secret)},
              {"secret_sha256", HexEncode(b.secret_sha256)},
              {"enrolment_sha256", HexEncode(b.enrolment_sha256)},
              {"created_at", b.created_at}};
  return Dump(doc);
}

Result<ChallengeBundle> ParseChallengeBundle(std::string_view text) {
  const std::string what = "credential challenge";
  ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, what));
  Fields f(what, "", &doc);
  RETURN_IF_ERROR(CheckFormat(f, kChallengeFormat));
  RETURN_IF_ERROR(f.ExpectKeys({"format", "ak_name", "credential_blob", "encrypted_secret", "secret_sha256",
                                "enrolment_sha256", "created_at"}));
  ChallengeBundle b;
  ASSIGN_OR_RETURN(b.ak_name, f.Hex("ak_name", 2, 2 + 64));
  RETURN_IF_ERROR(CheckName(f, "ak_name", b.ak_name));
  ASSIGN_OR_RETURN(b.credential_blob, f.Hex("credential_blob", 4, 2 + 2 + 64 + 2 + 64));
  RETURN_IF_ERROR(CheckTpm2b(f, "credential_blob", b.credential_blob));
  ASSIGN_OR_RETURN(b.encrypted_secret, f.Hex("encrypted_secret", 4, 2 + 512));
  RETURN_IF_ERROR(CheckTpm2b(f, "encrypted_secret", b.encrypted_secret));
  ASSIGN_OR_RETURN(b.secret_sha256, f.Digest("secret_sha256"));
  ASSIGN_OR_RETURN(b.enrolment_sha256, f.Digest("enrolment_sha256"));
  ASSIGN_OR_RETURN(b.created_at, f.Int("created_at", 0, INT64_MAX));
  return b;
}

std::string EncodeActivationResponse(const ActivationResponse& r) {
  json doc = {{"format", std::string(kActivationFormat)}, {"ak_name", HexEncode(r.ak_name)}, {"secret", HexEncode(r.secret)}};
  return Dump(doc);
}

Result<ActivationResponse> ParseActivationResponse(std::string_view text) {
  const std::string what = "activation response";
  ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, what));
  Fields f(what, "", &doc);
  RETURN_IF_ERROR(CheckFormat(f, kActivationFormat));
  RETURN_IF_ERROR(f.ExpectKeys({"format", "ak_name", "secret"}));
  ActivationResponse r;
  ASSIGN_OR_RETURN(r.ak_name, f.Hex("ak_name", 2, 2 + 64));
  RETURN_IF_ERROR(CheckName(f, "ak_name", r.ak_name));
  ASSIGN_OR_RETURN(r.secret, f.Hex("secret", 1, 64));
  return r;
}

// ---- evidence --------------------------------------------------------------------------

std::string EncodeEvidenceBundle(const EvidenceBundle& b) {
  json pcrs = json::object();
  for (const auto& [bank, values] : b.pcrs) {
    json v = json::object();
    for (const auto& [idx, digest] : values) v[std::to_string(idx)] = HexEncode(digest);
    pcrs[AlgName(bank)] = v;
  }
  json doc = {{"format", std::string(kEvidenceFormat)},
              {"nonce", HexEncode(b.nonce)},
              {"bound_digest", b.bound_digest ? json(HexEncode(*b.bound_digest)) : json(nullptr)},
              {"ak_name", HexEncode(b.ak_name)},
              {"pcr_selection", b.pcr_selection.ToString()},
              {"quote", {{"attest", HexEncode(b.attest)}, {"signature", HexEncode(b.signature)}}},
              {"pcrs", pcrs},
              {"event_log", HexEncode(b.event_log)},
              {"ima_log", ImaHex(b.ima_log)},
              {"created_at", b.created_at}};
  return Dump(doc);
}

Result<EvidenceBundle> ParseEvidenceBundle(std::string_view text) {
  const std::string what = "evidence bundle";
  ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, what));
  Fields f(what, "", &doc);
  RETURN_IF_ERROR(CheckFormat(f, kEvidenceFormat));
  RETURN_IF_ERROR(f.ExpectKeys({"format", "nonce", "bound_digest", "ak_name", "pcr_selection", "quote", "pcrs",
                                "event_log", "ima_log", "created_at"}));
  EvidenceBundle b;
  ASSIGN_OR_RETURN(b.nonce, f.Hex("nonce", 1, 32));
  if (!f.IsNull("bound_digest")) {
    ASSIGN_OR_RETURN(crypto::Digest256 d, f.Digest("bound_digest"));
    b.bound_digest = d;
  }
  ASSIGN_OR_RETURN(b.ak_name, f.Hex("ak_name", 2, 2 + 64));
  RETURN_IF_ERROR(CheckName(f, "ak_name", b.ak_name));

  ASSIGN_OR_RETURN(std::string sel_text, f.String("pcr_selection"));
  auto sel = PcrSelection::FromString(sel_text);
  if (!sel.ok()) return f.Err("pcr_selection", sel.status().message());
  if (sel->banks.empty() || sel->ToString() != sel_text) {
    return f.Err("pcr_selection", "must be canonical: banks joined by '+', indices ascending, none empty");
  }
  for (const auto& bank : sel->banks) {
    if (bank.select == 0) return f.Err("pcr_selection", "bank " + AlgName(bank.hash) + " selects no PCR");
    if (!IsSupportedHash(bank.hash)) return f.Err("pcr_selection", "unsupported bank " + AlgName(bank.hash));
  }
  b.pcr_selection = *sel;

  ASSIGN_OR_RETURN(const json* quote, f.Object("quote"));
  Fields q(what, "quote.", quote);
  RETURN_IF_ERROR(q.ExpectKeys({"attest", "signature"}));
  ASSIGN_OR_RETURN(b.attest, q.Hex("attest", 1, 1024));
  ASSIGN_OR_RETURN(b.signature, q.Hex("signature", 1, 1024));

  // pcrs: exactly the selected (bank, index) pairs, each of the bank's digest size.
  ASSIGN_OR_RETURN(const json* pcrs, f.Object("pcrs"));
  std::set<uint16_t> banks_seen;
  for (const auto& [bank_name, values] : pcrs->items()) {
    const std::string bank_path = "pcrs." + bank_name;
    uint16_t bank = HashAlgFromName(bank_name);
    if (bank == 0 || AlgName(bank) != bank_name) return f.Err(bank_path, "unknown bank name");
    const PcrBankSelection* sb = nullptr;
    for (const auto& s : b.pcr_selection.banks) {
      if (s.hash == bank) sb = &s;
    }
    if (sb == nullptr) return f.Err(bank_path, "bank not in pcr_selection");
    if (!values.is_object()) return f.Err(bank_path, "must be a JSON object");
    banks_seen.insert(bank);
    Fields v(what, bank_path + ".", &values);
    for (const auto& [idx_text, value] : values.items()) {
      uint32_t idx = 0;
      auto [p, ec] = std::from_chars(idx_text.data(), idx_text.data() + idx_text.size(), idx);
      if (ec != std::errc() || p != idx_text.data() + idx_text.size() || std::to_string(idx) != idx_text ||
          idx >= kMaxPcrs) {
        return v.Err(idx_text, "PCR index must be a decimal 0..23 without leading zeros");
      }
      if (!(sb->select & (1u << idx))) return v.Err(idx_text, "PCR not in pcr_selection");
      ASSIGN_OR_RETURN(b.pcrs[bank][idx], v.Hex(idx_text.c_str(), HashSize(bank), HashSize(bank)));
    }
    for (uint32_t idx : PcrSelection::Indices(*sb)) {
      if (!b.pcrs[bank].count(idx)) return v.Err(std::to_string(idx), "selected PCR missing");
    }
  }
  for (const auto& s : b.pcr_selection.banks) {
    if (!banks_seen.count(s.hash)) return f.Err("pcrs." + AlgName(s.hash), "selected bank missing");
  }

  ASSIGN_OR_RETURN(b.event_log, f.Hex("event_log", 0, kMaxEventLogBytes));
  ASSIGN_OR_RETURN(std::vector<uint8_t> ima, f.Hex("ima_log", 0, kMaxBundleBytes / 2));
  b.ima_log.assign(ima.begin(), ima.end());
  ASSIGN_OR_RETURN(b.created_at, f.Int("created_at", 0, INT64_MAX));
  return b;
}

EvidenceParts ToEvidenceParts(const EvidenceBundle& b) {
  EvidenceParts parts;
  parts.quote.attest = b.attest;
  parts.quote.signature = b.signature;
  parts.quote.pcrs = b.pcrs;
  parts.event_log = b.event_log;
  parts.ima_log = b.ima_log;
  return parts;
}

// ---- clock state -----------------------------------------------------------------------

std::string EncodeClockState(const ClockInfo& c) {
  json doc = {{"format", std::string(kClockFormat)},
              {"clock", c.clock},
              {"reset_count", c.reset_count},
              {"restart_count", c.restart_count},
              {"safe", c.safe}};
  return Dump(doc);
}

Result<ClockInfo> ParseClockState(std::string_view text) {
  const std::string what = "clock state";
  ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, what));
  Fields f(what, "", &doc);
  RETURN_IF_ERROR(CheckFormat(f, kClockFormat));
  RETURN_IF_ERROR(f.ExpectKeys({"format", "clock", "reset_count", "restart_count", "safe"}));
  ClockInfo c;
  // clock is a u64 in the TPM; JSON integers here stop at 2^63-1 (about 292 million years of ms).
  ASSIGN_OR_RETURN(int64_t clock, f.Int("clock", 0, INT64_MAX));
  ASSIGN_OR_RETURN(int64_t reset, f.Int("reset_count", 0, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t restart, f.Int("restart_count", 0, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t safe, f.Int("safe", 0, 1));
  c.clock = static_cast<uint64_t>(clock);
  c.reset_count = static_cast<uint32_t>(reset);
  c.restart_count = static_cast<uint32_t>(restart);
  c.safe = static_cast<uint8_t>(safe);
  return c;
}

Appraisal CheckEvidenceAkName(const EvidenceBundle& bundle, const TpmtPublic& ak) {
  Appraisal a;
  auto name = ComputeName(ak);
  if (!name.ok()) {
    a.Fail("evidence.ak_name.uncomputable", "ak_name", "the name of the given AK", name.status().message());
  } else if (*name == bundle.ak_name) {
    a.Pass("evidence.ak_name");
  } else {
    a.Fail("evidence.ak_name.mismatch", "ak_name", HexEncode(*name), HexEncode(bundle.ak_name));
  }
  return a;
}

}  // namespace enclave::attest
