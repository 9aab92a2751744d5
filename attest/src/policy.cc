#include "enclave/attest/policy.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "enclave/attest/ima_log.h"
#include "enclave/common/files.h"

namespace enclave::attest {
namespace {

using json = nlohmann::json;

Status PathError(const std::string& path, const std::string& what) {
  return InvalidInput("policy " + path + ": " + what);
}

const char* TypeName(const json& j) { return j.type_name(); }

// The keys an object may have; "comment" (a string) is allowed in every object.
Status CheckKeys(const json& j, const std::string& path, std::initializer_list<const char*> known) {
  if (!j.is_object()) return PathError(path, std::string("expected an object, got ") + TypeName(j));
  for (const auto& [key, value] : j.items()) {
    if (key == "comment") {
      if (!value.is_string()) return PathError(path + ".comment", "expected a string");
      continue;
    }
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) return PathError(path + "." + key, "unknown key");
  }
  return OkStatus();
}

// Map-like objects (banks, PCRs, paths) may carry a "comment" string too.
Result<bool> IsComment(const std::string& key, const json& value, const std::string& path) {
  if (key != "comment") return false;
  if (!value.is_string()) return PathError(path + ".comment", "expected a string");
  return true;
}

Result<bool> GetBool(const json& j, const std::string& path) {
  if (!j.is_boolean()) return PathError(path, std::string("expected true or false, got ") + TypeName(j));
  return j.get<bool>();
}

Result<int64_t> GetInt(const json& j, const std::string& path, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) return PathError(path, std::string("expected an integer, got ") + TypeName(j));
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return PathError(path, "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) return PathError(path, "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

Result<std::string> GetString(const json& j, const std::string& path, bool allow_empty = false) {
  if (!j.is_string()) return PathError(path, std::string("expected a string, got ") + TypeName(j));
  std::string s = j.get<std::string>();
  if (!allow_empty && s.empty()) return PathError(path, "must not be empty");
  return s;
}

Result<const json*> GetArray(const json& j, const std::string& path, bool allow_empty = false) {
  if (!j.is_array()) return PathError(path, std::string("expected an array, got ") + TypeName(j));
  if (!allow_empty && j.empty()) return PathError(path, "must not be empty");
  return &j;
}

Result<uint16_t> GetBank(const std::string& name, const std::string& path) {
  uint16_t b = HashAlgFromName(name);
  if (b == 0) return PathError(path, "unknown hash bank '" + name + "' (sha1, sha256, sha384, sha512)");
  return b;
}

Result<uint32_t> PcrFromKey(const std::string& key, const std::string& path) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (key.empty() || key.size() > 2 || !std::all_of(key.begin(), key.end(), digit) ||
      (key.size() == 2 && key[0] == '0')) {
    return PathError(path, "expected a PCR index 0..23 as the key");
  }
  uint32_t v = static_cast<uint32_t>(std::stoul(key));
  if (v >= kMaxPcrs) return PathError(path, "PCR " + key + " is above 23");
  return v;
}

// A list entry (a digest, a file digest, a kernel command line) is its value, or an object
// {"value": V} whose "comment" says where it came from (what `policy create` writes): the
// value and its path.
Result<std::pair<const json*, std::string>> EntryValue(const json& e, const std::string& path) {
  if (!e.is_object()) return std::pair<const json*, std::string>{&e, path};
  RETURN_IF_ERROR(CheckKeys(e, path, {"value"}));
  auto it = e.find("value");
  if (it == e.end()) return PathError(path + ".value", "missing (an entry object carries its value)");
  return std::pair<const json*, std::string>{&*it, path + ".value"};
}

Result<std::vector<uint8_t>> GetDigest(const json& j, const std::string& path, uint16_t bank) {
  ASSIGN_OR_RETURN(std::string s, GetString(j, path));
  auto bytes = HexDecode(s);
  if (!bytes.ok() || bytes->size() != HashSize(bank)) {
    return PathError(path, "expected " + std::to_string(HashSize(bank)) + " bytes of hex (" + AlgName(bank) + ")");
  }
  return std::move(*bytes);
}

// {"sha256": ["hex", ...], ...} -> AllowedDigests.
Result<AllowedDigests> GetAllowed(const json& j, const std::string& path) {
  if (!j.is_object()) return PathError(path, std::string("expected an object of banks, got ") + TypeName(j));
  if (j.empty()) return PathError(path, "must name at least one bank");
  AllowedDigests out;
  for (const auto& [name, list] : j.items()) {
    {
      ASSIGN_OR_RETURN(bool comment, IsComment(name, list, path));
      if (comment) continue;
    }
    std::string p = path + "." + name;
    ASSIGN_OR_RETURN(uint16_t bank, GetBank(name, p));
    ASSIGN_OR_RETURN(const json* arr, GetArray(list, p));
    auto& set = out[bank];
    for (size_t i = 0; i < arr->size(); ++i) {
      ASSIGN_OR_RETURN(auto entry, EntryValue((*arr)[i], p + "[" + std::to_string(i) + "]"));
      ASSIGN_OR_RETURN(auto d, GetDigest(*entry.first, entry.second, bank));
      set.insert(std::move(d));
    }
  }
  if (out.empty()) return PathError(path, "must name at least one bank");
  return out;
}

Result<std::set<uint32_t>> GetPcrList(const json& j, const std::string& path, bool allow_empty) {
  ASSIGN_OR_RETURN(const json* arr, GetArray(j, path, allow_empty));
  std::set<uint32_t> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    std::string p = path + "[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(int64_t v, GetInt((*arr)[i], p, 0, kMaxPcrs - 1));
    if (!out.insert(static_cast<uint32_t>(v)).second) return PathError(p, "PCR " + std::to_string(v) + " repeated");
  }
  return out;
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (std::filesystem::path(base_dir.empty() ? "." : base_dir) / p).lexically_normal().string();
}

// Reads a trust store's paths ($.ek_roots, $.ak_roots; resolved against base_dir);
// LoadPolicyEkRoots loads them.
struct RootPaths {
  std::string* dir;
  std::vector<std::string>* files;
  std::vector<std::string>* intermediates;
};
Status ParseRoots(const json& j, const std::string& path, const std::string& base_dir, RootPaths out);

Status ParseEkRoots(const json& j, const std::string& base_dir, Policy* p) {
  return ParseRoots(j, "$.ek_roots", base_dir, {&p->ek_roots_dir, &p->ek_root_files, &p->ek_intermediate_files});
}

Status ParseRoots(const json& j, const std::string& path, const std::string& base_dir, RootPaths out) {
  RETURN_IF_ERROR(CheckKeys(j, path, {"dir", "files", "intermediates"}));
  bool has_dir = j.contains("dir"), has_files = j.contains("files");
  if (has_dir == has_files) return PathError(path, "give exactly one of 'dir' and 'files'");
  if (has_dir) {
    if (j.contains("intermediates"))
      return PathError(path + ".intermediates", "only with 'files' (a directory holds both)");
    ASSIGN_OR_RETURN(std::string dir, GetString(j["dir"], path + ".dir"));
    *out.dir = Resolve(base_dir, dir);
    return OkStatus();
  }
  ASSIGN_OR_RETURN(const json* rl, GetArray(j["files"], path + ".files"));
  for (size_t i = 0; i < rl->size(); ++i) {
    ASSIGN_OR_RETURN(std::string f, GetString((*rl)[i], path + ".files[" + std::to_string(i) + "]"));
    out.files->push_back(Resolve(base_dir, f));
  }
  if (j.contains("intermediates")) {
    ASSIGN_OR_RETURN(const json* il, GetArray(j["intermediates"], path + ".intermediates", true));
    for (size_t i = 0; i < il->size(); ++i) {
      ASSIGN_OR_RETURN(std::string f, GetString((*il)[i], path + ".intermediates[" + std::to_string(i) + "]"));
      out.intermediates->push_back(Resolve(base_dir, f));
    }
  }
  return OkStatus();
}

// "ak_forms": ["enrolment", "tpm2b_public", "public_key", "certificate"], non-empty, no repeats.
Status ParseAkForms(const json& j, Policy* p) {
  const std::string path = "$.ak_forms";
  ASSIGN_OR_RETURN(const json* arr, GetArray(j, path));
  p->ak_forms.clear();
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string ip = path + "[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(std::string name, GetString((*arr)[i], ip));
    auto form = AkFormFromName(name);
    if (!form) return PathError(ip, "unknown AK form '" + name + "' (enrolment, tpm2b_public, public_key, certificate)");
    if (p->Accepts(*form)) return PathError(ip, "'" + name + "' repeated");
    p->ak_forms.push_back(*form);
  }
  return OkStatus();
}

Status ParseAk(const json& j, AkPolicy* ak) {
  const std::string path = "$.ak";
  RETURN_IF_ERROR(CheckKeys(j, path, {"min_rsa_bits", "ecc_curves", "min_hash"}));
  if (j.contains("min_rsa_bits")) {
    ASSIGN_OR_RETURN(int64_t bits, GetInt(j["min_rsa_bits"], path + ".min_rsa_bits", 2048, 16384));
    ak->min_rsa_bits = static_cast<uint32_t>(bits);
  }
  if (j.contains("ecc_curves")) {
    ASSIGN_OR_RETURN(const json* arr, GetArray(j["ecc_curves"], path + ".ecc_curves"));
    ak->ecc_curves.clear();
    for (size_t i = 0; i < arr->size(); ++i) {
      std::string p = path + ".ecc_curves[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(std::string c, GetString((*arr)[i], p));
      uint16_t id = c == "nist_p256" ? curve::kNistP256 : c == "nist_p384" ? curve::kNistP384
                    : c == "nist_p521" ? curve::kNistP521 : 0;
      if (id == 0) return PathError(p, "unknown curve '" + c + "' (nist_p256, nist_p384, nist_p521)");
      if (std::find(ak->ecc_curves.begin(), ak->ecc_curves.end(), id) != ak->ecc_curves.end())
        return PathError(p, "curve '" + c + "' repeated");
      ak->ecc_curves.push_back(id);
    }
  }
  if (j.contains("min_hash")) {
    ASSIGN_OR_RETURN(std::string h, GetString(j["min_hash"], path + ".min_hash"));
    uint16_t id = HashAlgFromName(h);
    if (id == 0 || id == alg::kSha1) return PathError(path + ".min_hash", "expected sha256, sha384 or sha512");
    ak->min_hash = id;
  }
  return OkStatus();
}

// "<sha1|sha256|sha384|sha512>:<hex>" as IMA's ima-ng template writes a file digest.
Result<std::pair<uint16_t, std::vector<uint8_t>>> ParseFileDigest(const json& entry, const std::string& entry_path) {
  ASSIGN_OR_RETURN(auto value, EntryValue(entry, entry_path));
  const std::string& dp = value.second;
  ASSIGN_OR_RETURN(std::string s, GetString(*value.first, dp));
  size_t colon = s.find(':');
  uint16_t a = colon == std::string::npos ? 0 : HashAlgFromName(s.substr(0, colon));
  if (a == 0) return PathError(dp, "expected '<sha1|sha256|sha384|sha512>:<hex>'");
  auto d = HexDecode(s.substr(colon + 1));
  if (!d.ok() || d->size() != HashSize(a))
    return PathError(dp, "expected " + std::to_string(HashSize(a)) + " bytes of hex after '" + AlgName(a) + ":'");
  return std::pair<uint16_t, std::vector<uint8_t>>{a, std::move(*d)};
}

// Allowlist mode: "allowlist" {path: [digest...]} and "exclude_path_prefixes" [prefix...].
Status ParseImaAllowlist(const json& j, const std::string& path, Policy* p) {
  if (!j.contains("allowlist")) return PathError(path + ".allowlist", "missing (mode \"allowlist\" needs one)");
  const json& list = j["allowlist"];
  if (!list.is_object()) return PathError(path + ".allowlist", "expected an object of paths");
  for (const auto& [file, digests] : list.items()) {
    {
      ASSIGN_OR_RETURN(bool comment, IsComment(file, digests, path + ".allowlist"));
      if (comment) continue;
    }
    const std::string fp = path + ".allowlist." + file;
    // IMA names its first entry "boot_aggregate" (PCRs 0-7), every other one by absolute path.
    if (file != "boot_aggregate" && (file.empty() || file[0] != '/'))
      return PathError(fp, "expected an absolute path (or boot_aggregate) as the key");
    if (file.size() > kMaxImaPathBytes) return PathError(fp, "path longer than 4096 bytes");
    ASSIGN_OR_RETURN(const json* arr, GetArray(digests, fp));
    auto& allowed = p->ima_allowlist[file];
    for (size_t i = 0; i < arr->size(); ++i) {
      ASSIGN_OR_RETURN(auto d, ParseFileDigest((*arr)[i], fp + "[" + std::to_string(i) + "]"));
      allowed.insert(std::move(d));
    }
  }
  if (p->ima_allowlist.empty()) return PathError(path + ".allowlist", "lists no file");
  if (j.contains("exclude_path_prefixes")) {
    const std::string ep = path + ".exclude_path_prefixes";
    ASSIGN_OR_RETURN(const json* arr, GetArray(j["exclude_path_prefixes"], ep, true));
    for (size_t i = 0; i < arr->size(); ++i) {
      const std::string ip = ep + "[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(std::string prefix, GetString((*arr)[i], ip));
      // A whole directory, never "/" (that would exclude everything) nor a partial name.
      if (prefix.size() < 3 || prefix.front() != '/' || prefix.back() != '/' || prefix.size() > kMaxImaPathBytes)
        return PathError(ip, "expected an absolute directory ending in '/', not '/' itself");
      p->ima_exclude_prefixes.push_back(prefix);
    }
  }
  if (!p->require_ima_log) return PathError(path + ".required", "must be true in allowlist mode");
  if (p->ima_allow_violations)
    return PathError(path + ".allow_violations", "must be false in allowlist mode (a violation's file is unknown)");
  return OkStatus();
}

Status ParseIma(const json& j, Policy* p) {
  const std::string path = "$.ima";
  RETURN_IF_ERROR(CheckKeys(j, path, {"required", "allow_violations", "files", "mode", "allowlist",
                                      "exclude_path_prefixes"}));
  if (j.contains("required")) {
    ASSIGN_OR_RETURN(p->require_ima_log, GetBool(j["required"], path + ".required"));
  }
  if (j.contains("allow_violations")) {
    ASSIGN_OR_RETURN(p->ima_allow_violations, GetBool(j["allow_violations"], path + ".allow_violations"));
  }
  std::string mode = "files";
  if (j.contains("mode")) {
    ASSIGN_OR_RETURN(mode, GetString(j["mode"], path + ".mode"));
    if (mode != "files" && mode != "allowlist")
      return PathError(path + ".mode", "expected \"files\" or \"allowlist\", got '" + mode + "'");
  }
  if (mode == "allowlist") {
    p->ima_allowlist_mode = true;
    RETURN_IF_ERROR(ParseImaAllowlist(j, path, p));
  } else if (j.contains("allowlist") || j.contains("exclude_path_prefixes")) {
    return PathError(path + ".mode", "must be \"allowlist\" when an allowlist is given");
  }
  if (!j.contains("files")) return OkStatus();
  const json& files = j["files"];
  if (!files.is_object()) return PathError(path + ".files", "expected an object of paths");
  for (const auto& [file, rule] : files.items()) {
    {
      ASSIGN_OR_RETURN(bool comment, IsComment(file, rule, path + ".files"));
      if (comment) continue;
    }
    std::string fp = path + ".files." + file;
    if (file.empty() || file[0] != '/') return PathError(fp, "expected an absolute path as the key");
    if (file.size() > 4096) return PathError(fp, "path longer than 4096 bytes");
    RETURN_IF_ERROR(CheckKeys(rule, fp, {"digests", "required"}));
    ImaFileRule r;
    r.path = file;
    if (!rule.contains("digests")) return PathError(fp + ".digests", "missing");
    ASSIGN_OR_RETURN(const json* arr, GetArray(rule["digests"], fp + ".digests"));
    for (size_t i = 0; i < arr->size(); ++i) {
      ASSIGN_OR_RETURN(auto d, ParseFileDigest((*arr)[i], fp + ".digests[" + std::to_string(i) + "]"));
      r.digests.insert(std::move(d));
    }
    if (rule.contains("required")) {
      ASSIGN_OR_RETURN(r.required, GetBool(rule["required"], fp + ".required"));
    }
    p->ima_files.push_back(std::move(r));
  }
  return OkStatus();
}

// Nesting depth and duplicate keys: nlohmann keeps the last of two equal keys silently,
// which would let one reader of a policy see a different rule than another.
class StrictParser {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    if (depth > 16) {
      error_ = "nested deeper than 16 levels";
      return false;
    }
    switch (event) {
      case json::parse_event_t::object_start:
        keys_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_.empty()) keys_.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_.empty() && !keys_.back().insert(parsed.get<std::string>()).second) {
          error_ = "duplicate key '" + parsed.get<std::string>() + "'";
          return false;
        }
        break;
      default:
        break;
    }
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  std::vector<std::set<std::string>> keys_;
  std::string error_;
};

}  // namespace

bool Policy::Accepts(AkForm form) const {
  return std::find(ak_forms.begin(), ak_forms.end(), form) != ak_forms.end();
}

std::set<uint32_t> Policy::JudgedPcrs() const {
  std::set<uint32_t> s;
  for (const auto& [pcr, unused] : pcr_values) s.insert(pcr);
  for (const auto& [pcr, unused] : event_digests) s.insert(pcr);
  if (require_secure_boot) s.insert(7);
  if (!boot_applications.empty()) s.insert(4);
  if (judge_kernel_cmdlines) s.insert(8);
  return s;
}

namespace {
Status LoadRoots(const std::string& key, const std::string& dir, const std::vector<std::string>& files,
                 const std::vector<std::string>& intermediates, EkTrustStore* out) {
  if (!dir.empty()) {
    auto store = LoadEkTrustDirectory(dir);
    if (!store.ok()) return store.status().Annotate("policy $." + key + ".dir");
    *out = std::move(*store);
    return OkStatus();
  }
  auto store = LoadEkTrustFiles(files, intermediates);
  if (!store.ok()) return store.status().Annotate("policy $." + key + ".files");
  *out = std::move(*store);
  return OkStatus();
}
}  // namespace

Status LoadPolicyEkRoots(Policy* p) {
  if (p->Accepts(AkForm::kEnrolment)) {
    RETURN_IF_ERROR(LoadRoots("ek_roots", p->ek_roots_dir, p->ek_root_files, p->ek_intermediate_files, &p->ek_trust));
  }
  if (p->Accepts(AkForm::kCertificate)) {
    RETURN_IF_ERROR(LoadRoots("ak_roots", p->ak_roots_dir, p->ak_root_files, p->ak_intermediate_files, &p->ak_trust));
  }
  return OkStatus();
}

Result<Policy> ParsePolicy(std::string_view json_text, const std::string& base_dir) {
  ASSIGN_OR_RETURN(Policy p, ParsePolicyText(json_text, base_dir));
  RETURN_IF_ERROR(LoadPolicyEkRoots(&p));
  return p;
}

Result<Policy> ParsePolicyText(std::string_view json_text, const std::string& base_dir) {
  if (json_text.size() > kMaxPolicyBytes) return InvalidInput("policy is larger than 4 MiB");
  Policy p;
  p.digest = crypto::Sha256(AsBytes(json_text));
  json root;
  {
    StrictParser strict;
    // The callback sees nlohmann's keys as they are read; `discarded` marks our refusal.
    auto cb = [&strict](int depth, json::parse_event_t ev, json& parsed) { return strict(depth, ev, parsed); };
    try {
      root = json::parse(json_text.begin(), json_text.end(), cb, /*allow_exceptions=*/true,
                         /*ignore_comments=*/false);
    } catch (const json::exception& e) {
      return InvalidInput(std::string("policy is not valid JSON: ") + e.what());
    }
    if (!strict.error().empty()) return InvalidInput("policy: " + strict.error());
    if (root.is_discarded()) return InvalidInput("policy: refused by the strict reader");
  }
  RETURN_IF_ERROR(CheckKeys(root, "$", {"version", "name", "quote_pcrs", "ek_roots", "ak", "ak_forms", "ak_roots",
                                        "max_evidence_age_s", "event_log", "pcr_values", "event_digests",
                                        "secure_boot", "boot_applications", "kernel_cmdlines", "ima"}));
  auto require = [&](const char* key) -> Status {
    if (!root.contains(key)) return PathError(std::string("$.") + key, "missing (required)");
    return OkStatus();
  };
  RETURN_IF_ERROR(require("version"));
  ASSIGN_OR_RETURN(int64_t version, GetInt(root["version"], "$.version", 1, 1));
  (void)version;
  RETURN_IF_ERROR(require("name"));
  ASSIGN_OR_RETURN(p.name, GetString(root["name"], "$.name"));

  // quote_pcrs: {"sha256": [0, 1, ...]}; banks in key order (sha1 < sha256 < ... by name).
  RETURN_IF_ERROR(require("quote_pcrs"));
  {
    const json& q = root["quote_pcrs"];
    if (!q.is_object() || q.empty()) return PathError("$.quote_pcrs", "expected an object of banks with PCR lists");
    for (const auto& [name, list] : q.items()) {
    {
      ASSIGN_OR_RETURN(bool comment, IsComment(name, list, "$.quote_pcrs"));
      if (comment) continue;
    }
      std::string path = "$.quote_pcrs." + name;
      ASSIGN_OR_RETURN(uint16_t bank, GetBank(name, path));
      ASSIGN_OR_RETURN(auto pcrs, GetPcrList(list, path, false));
      PcrBankSelection b;
      b.hash = bank;
      for (uint32_t i : pcrs) b.select |= 1u << i;
      p.quote_selection.banks.push_back(b);
    }
    if (p.quote_selection.banks.empty()) return PathError("$.quote_pcrs", "must name at least one bank");
  }
  // EK roots exactly when enrolments are accepted, AK roots exactly when AK certificates are:
  // the trust a policy drops is written in it, never implied by a missing key.
  if (root.contains("ak_forms")) RETURN_IF_ERROR(ParseAkForms(root["ak_forms"], &p));
  if (p.Accepts(AkForm::kEnrolment)) {
    if (!root.contains("ek_roots")) return PathError("$.ek_roots", "missing (required while ak_forms accepts enrolment)");
    RETURN_IF_ERROR(ParseEkRoots(root["ek_roots"], base_dir, &p));
  } else if (root.contains("ek_roots")) {
    return PathError("$.ek_roots", "given, but ak_forms does not accept enrolment (the EK chain would not be checked)");
  }
  if (p.Accepts(AkForm::kCertificate)) {
    if (!root.contains("ak_roots"))
      return PathError("$.ak_roots", "missing (required while ak_forms accepts certificate)");
    RETURN_IF_ERROR(ParseRoots(root["ak_roots"], "$.ak_roots", base_dir,
                               {&p.ak_roots_dir, &p.ak_root_files, &p.ak_intermediate_files}));
  } else if (root.contains("ak_roots")) {
    return PathError("$.ak_roots", "given, but ak_forms does not accept certificate");
  }
  if (root.contains("ak")) RETURN_IF_ERROR(ParseAk(root["ak"], &p.ak));
  RETURN_IF_ERROR(require("max_evidence_age_s"));
  ASSIGN_OR_RETURN(p.max_evidence_age_s, GetInt(root["max_evidence_age_s"], "$.max_evidence_age_s", 1, 86400));

  if (root.contains("event_log")) {
    const json& e = root["event_log"];
    RETURN_IF_ERROR(CheckKeys(e, "$.event_log", {"required", "exempt_pcrs"}));
    if (e.contains("required")) {
      ASSIGN_OR_RETURN(p.require_event_log, GetBool(e["required"], "$.event_log.required"));
    }
    if (e.contains("exempt_pcrs")) {
      ASSIGN_OR_RETURN(p.log_exempt_pcrs, GetPcrList(e["exempt_pcrs"], "$.event_log.exempt_pcrs", true));
    }
  }
  if (root.contains("pcr_values")) {
    const json& pv = root["pcr_values"];
    if (!pv.is_object()) return PathError("$.pcr_values", "expected an object keyed by PCR index");
    for (const auto& [key, allowed] : pv.items()) {
    {
      ASSIGN_OR_RETURN(bool comment, IsComment(key, allowed, "$.pcr_values"));
      if (comment) continue;
    }
      std::string path = "$.pcr_values." + key;
      ASSIGN_OR_RETURN(uint32_t pcr, PcrFromKey(key, path));
      ASSIGN_OR_RETURN(p.pcr_values[pcr], GetAllowed(allowed, path));
    }
  }
  if (root.contains("event_digests")) {
    const json& ed = root["event_digests"];
    if (!ed.is_object()) return PathError("$.event_digests", "expected an object keyed by PCR index");
    for (const auto& [key, allowed] : ed.items()) {
    {
      ASSIGN_OR_RETURN(bool comment, IsComment(key, allowed, "$.event_digests"));
      if (comment) continue;
    }
      std::string path = "$.event_digests." + key;
      ASSIGN_OR_RETURN(uint32_t pcr, PcrFromKey(key, path));
      ASSIGN_OR_RETURN(p.event_digests[pcr], GetAllowed(allowed, path));
    }
  }
  if (root.contains("secure_boot")) {
    ASSIGN_OR_RETURN(p.require_secure_boot, GetBool(root["secure_boot"], "$.secure_boot"));
  }
  if (root.contains("boot_applications")) {
    ASSIGN_OR_RETURN(p.boot_applications, GetAllowed(root["boot_applications"], "$.boot_applications"));
  }
  if (root.contains("kernel_cmdlines")) {
    ASSIGN_OR_RETURN(const json* arr, GetArray(root["kernel_cmdlines"], "$.kernel_cmdlines"));
    for (size_t i = 0; i < arr->size(); ++i) {
      ASSIGN_OR_RETURN(auto entry, EntryValue((*arr)[i], "$.kernel_cmdlines[" + std::to_string(i) + "]"));
      ASSIGN_OR_RETURN(std::string s, GetString(*entry.first, entry.second));
      p.kernel_cmdlines.push_back(std::move(s));
    }
    p.judge_kernel_cmdlines = true;
  }
  bool has_ima = root.contains("ima");
  if (has_ima) RETURN_IF_ERROR(ParseIma(root["ima"], &p));

  // Consistency: a rule the quote cannot back would be judged on unsigned data.
  auto quoted = [&p](uint16_t bank, uint32_t pcr) {
    for (const auto& b : p.quote_selection.banks)
      if (b.hash == bank && (b.select & (1u << pcr))) return true;
    return false;
  };
  auto quoted_any = [&p, &quoted](uint32_t pcr) {
    for (const auto& b : p.quote_selection.banks)
      if (quoted(b.hash, pcr)) return true;
    return false;
  };
  for (const auto& [pcr, banks] : p.pcr_values) {
    for (const auto& [bank, unused] : banks) {
      if (!quoted(bank, pcr))
        return PathError("$.pcr_values." + std::to_string(pcr) + "." + AlgName(bank), "PCR is not in quote_pcrs");
    }
  }
  // Event-based rules read the log: the PCR must be quoted in the bank judged and compared
  // with the log's replay (not exempt), else the events are not bound to the quote.
  auto event_rule = [&](uint32_t pcr, const AllowedDigests* banks, const std::string& path) -> Status {
    if (p.log_exempt_pcrs.count(pcr))
      return PathError(path, "PCR " + std::to_string(pcr) + " is exempt from the event log (event_log.exempt_pcrs)");
    if (banks == nullptr) {
      if (!quoted_any(pcr)) return PathError(path, "PCR " + std::to_string(pcr) + " is not in quote_pcrs");
      return OkStatus();
    }
    for (const auto& [bank, unused] : *banks) {
      if (!quoted(bank, pcr))
        return PathError(path + "." + AlgName(bank), "PCR " + std::to_string(pcr) + " is not quoted in this bank");
    }
    return OkStatus();
  };
  for (const auto& [pcr, banks] : p.event_digests)
    RETURN_IF_ERROR(event_rule(pcr, &banks, "$.event_digests." + std::to_string(pcr)));
  if (p.require_secure_boot) RETURN_IF_ERROR(event_rule(7, nullptr, "$.secure_boot"));
  if (!p.boot_applications.empty()) RETURN_IF_ERROR(event_rule(4, &p.boot_applications, "$.boot_applications"));
  if (p.judge_kernel_cmdlines) RETURN_IF_ERROR(event_rule(8, nullptr, "$.kernel_cmdlines"));
  if ((p.require_secure_boot || !p.boot_applications.empty() || p.judge_kernel_cmdlines || !p.event_digests.empty()) &&
      !p.require_event_log) {
    return PathError("$.event_log.required", "must be true when a rule reads the event log");
  }
  if (has_ima) {
    if (!quoted_any(kImaPcr)) return PathError("$.ima", "PCR 10 is not in quote_pcrs");
    if (!p.log_exempt_pcrs.count(kImaPcr))
      return PathError("$.event_log.exempt_pcrs", "must list 10 when the IMA log judges PCR 10");
  }
  return p;
}

Result<Policy> LoadPolicyFile(const std::string& path) {
  auto bytes = ReadWholeFile(path, kMaxPolicyBytes);
  if (!bytes.ok()) return bytes.status().Annotate("reading policy " + path);
  std::string dir = std::filesystem::path(path).parent_path().string();
  auto p = ParsePolicy(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), dir);
  if (!p.ok()) return p.status().Annotate(path);
  return p;
}

}  // namespace enclave::attest
