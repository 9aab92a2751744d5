#include "enclave/attest/golden_policy.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "enclave/attest/event_log.h"
#include "enclave/attest/ima_log.h"
#include "enclave/attest/measurements.h"
#include "enclave/attest/policy.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {
namespace {

using ojson = nlohmann::ordered_json;

Status NotSelfConsistent(const std::string& what, const Appraisal& a) {
  return AuthFailed("the evidence does not verify against itself (" + what + "): " + a.Summary());
}

// ---- how comments name events ------------------------------------------------------------

// Event data as logged, for people: quoted when printable ASCII, else its size. Nothing
// here is a rule (the type and data are not covered by the digest).
std::string Shown(ByteSpan data) {
  ByteSpan body = !data.empty() && data.back() == 0 ? data.first(data.size() - 1) : data;
  bool printable = !body.empty() && body.size() <= 200 &&
                   std::all_of(body.begin(), body.end(), [](uint8_t c) { return c >= 0x20 && c < 0x7F; });
  if (printable) return "\"" + std::string(body.begin(), body.end()) + "\"";
  if (data.size() <= 8) return HexEncode(data);
  return std::to_string(data.size()) + " bytes";
}

// The longest run of printable UTF-16LE ASCII in `data` (an EFI device path's file name), or "".
std::string Utf16Text(ByteSpan data) {
  std::string best, run;
  for (size_t i = 0; i + 1 < data.size(); i += 2) {
    if (data[i + 1] == 0 && data[i] >= 0x20 && data[i] < 0x7F) {
      run.push_back(static_cast<char>(data[i]));
    } else {
      if (run.size() > best.size()) best = run;
      run.clear();
    }
  }
  if (run.size() > best.size()) best = run;
  return best.size() >= 4 ? best : "";
}

std::string GuidText(const std::array<uint8_t, 16>& g) {
  char s[40];
  std::snprintf(s, sizeof(s), "%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X", g[3], g[2], g[1],
                g[0], g[5], g[4], g[7], g[6], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
  return s;
}

std::string Describe(const EventView& e) {
  const std::string head = "event " + std::to_string(e.index) + " " + EventTypeName(e.type);
  switch (e.type) {
    case ev::kEfiVariableDriverConfig:
    case ev::kEfiVariableAuthority:
    case ev::kEfiVariableBoot:
    case ev::kEfiVariableBoot2: {
      auto var = ParseUefiVariable(e.data);  // shim's one-byte-longer authority does not: its size is shown
      if (var.ok()) {
        const size_t n = var->data.size();
        return head + " " + var->name + " {" + GuidText(var->guid) + "}, " + std::to_string(n) +
               (n == 1 ? " byte" : " bytes") + " of data";
      }
      break;
    }
    case ev::kEfiBootServicesApplication:
    case ev::kEfiBootServicesDriver:
    case ev::kEfiRuntimeServicesDriver: {
      const std::string path = Utf16Text(e.data);
      if (!path.empty()) return head + " " + path;
      break;
    }
    default:
      break;
  }
  return head + " " + Shown(e.data);
}

std::string EventList(const std::vector<size_t>& events) {
  if (events.empty()) return "no event";
  std::string s = events.size() == 1 ? "event " : "events ";
  for (size_t i = 0; i < events.size() && i < 12; ++i) s += (i ? ", " : "") + std::to_string(events[i]);
  if (events.size() > 12) s += ", ... (" + std::to_string(events.size()) + " in all)";
  return s;
}

ojson Entry(const std::string& value, const std::string& comment) { return {{"value", value}, {"comment", comment}}; }

// nlohmann refuses to write a string that is not UTF-8; a path or command line that is not
// cannot be named exactly by a JSON policy.
bool JsonSafe(const std::string& s) {
  try {
    (void)ojson(s).dump();
    return true;
  } catch (const ojson::exception&) {
    return false;
  }
}

// The policy as people review it: one line per entry (an entry object, a list of PCR
// indices), everything else indented by two.
bool OnOneLine(const ojson& j) {
  if (!j.is_structured()) return true;
  if (j.is_object() && j.size() > 3) return false;
  return std::none_of(j.begin(), j.end(), [](const ojson& v) { return v.is_structured(); });
}

void Write(const ojson& j, size_t depth, std::string* out) {
  const bool object = j.is_object();
  if (OnOneLine(j)) {
    if (!j.is_structured()) {
      *out += j.dump();
      return;
    }
    std::string items;
    for (auto it = j.begin(); it != j.end(); ++it)
      items += (items.empty() ? "" : ", ") + (object ? ojson(it.key()).dump() + ": " : "") + it->dump();
    *out += object ? "{" + items + "}" : "[" + items + "]";
    return;
  }
  const std::string pad(2 * (depth + 1), ' ');
  *out += object ? "{\n" : "[\n";
  size_t n = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    *out += pad + (object ? ojson(it.key()).dump() + ": " : "");
    Write(*it, depth + 1, out);
    *out += ++n < j.size() ? ",\n" : "\n";
  }
  *out += std::string(2 * depth, ' ') + (object ? "}" : "]");
}

// ---- the evidence, read once ---------------------------------------------------------------

struct Golden {
  const EvidenceBundle& evidence;
  const GoldenPolicyOptions& options;
  EventLogView log;           // points into evidence.event_log
  std::set<uint32_t> quoted;  // PCRs quoted in some bank
  std::set<uint32_t> logged;  // PCRs the boot log extends
  std::set<uint32_t> exempt;  // quoted PCRs the boot log never extends
  std::optional<ImaLog> ima;
  std::vector<std::string> notes;

  bool Quoted(uint16_t bank, uint32_t pcr) const {
    for (const auto& b : evidence.pcr_selection.banks)
      if (b.hash == bank && (b.select & (1u << pcr))) return true;
    return false;
  }
  // The banks the quote selects PCR `pcr` in, in selection order.
  std::vector<uint16_t> BanksOf(uint32_t pcr) const {
    std::vector<uint16_t> out;
    for (const auto& b : evidence.pcr_selection.banks)
      if (b.select & (1u << pcr)) out.push_back(b.hash);
    return out;
  }
  // Digest of event `e` in `bank` (CompareWithQuote checked the log has every quoted bank).
  ByteSpan DigestOf(const EventView& e, uint16_t bank) const {
    auto k = std::find(log.banks.begin(), log.banks.end(), bank);
    return k == log.banks.end() ? ByteSpan() : e.digests[static_cast<size_t>(k - log.banks.begin())];
  }
  std::vector<size_t> EventsOf(uint32_t pcr) const {
    std::vector<size_t> out;
    for (const EventView& e : log.events)
      if (e.type != ev::kNoAction && e.pcr == pcr) out.push_back(e.index);
    return out;
  }
  // A rule reading PCR `pcr` of the log is possible only where the log is compared with the quote.
  bool Readable(uint32_t pcr, const std::string& rule) {
    if (!quoted.count(pcr)) {
      notes.push_back(rule + ": not derived, PCR " + std::to_string(pcr) + " is not quoted");
      return false;
    }
    if (exempt.count(pcr)) {
      notes.push_back(rule + ": not derived, the boot log never extends PCR " + std::to_string(pcr));
      return false;
    }
    return true;
  }
};

// The AK the evidence names signed the quote over the evidence's own nonce and bound
// digest, for the PCR values it reports.
Status CheckQuote(const EvidenceBundle& ev, const TpmtPublic& ak) {
  Appraisal a = CheckEvidenceAkName(ev, ak);
  ASSIGN_OR_RETURN(crypto::Digest256 qd, QualifyingData(ev.nonce, ev.bound_digest));
  QuoteExpectations expect;
  expect.extra_data.assign(qd.begin(), qd.end());
  expect.selection = ev.pcr_selection;
  a.Merge(AppraiseQuote(ak, {ev.attest, ev.signature, ev.pcrs}, expect));
  if (!a.failures().empty()) return NotSelfConsistent("quote", a);
  return OkStatus();
}

// The boot log parses and replays to the quoted PCRs; a quoted PCR it never extends is at
// its initial value (PCR 10 excepted: IMA's).
Status ReadBootLog(Golden* g) {
  const EvidenceBundle& ev = g->evidence;
  if (ev.event_log.empty())
    return InvalidInput("the evidence has no boot event log: nothing of the boot could be judged");
  auto log = ParseEventLogView(ev.event_log);
  if (!log.ok()) return log.status().Annotate("the evidence's boot event log");
  g->log = std::move(*log);
  std::vector<uint16_t> banks;
  for (const auto& b : ev.pcr_selection.banks) {
    banks.push_back(b.hash);
    for (uint32_t i : PcrSelection::Indices(b)) g->quoted.insert(i);
  }
  auto replay = ReplayEventLog(g->log, banks);
  if (!replay.ok()) return replay.status().Annotate("replaying the evidence's boot event log");
  for (const EventView& e : g->log.events)
    if (e.type != ev::kNoAction) g->logged.insert(e.pcr);
  for (uint32_t pcr : g->quoted)
    if (!g->logged.count(pcr)) g->exempt.insert(pcr);
  std::set<uint32_t> ima_pcr;
  if (g->exempt.count(kImaPcr)) ima_pcr.insert(kImaPcr);
  Appraisal cmp = CompareWithQuote(g->log.banks, *replay, ev.pcrs, ima_pcr);
  if (!cmp.failures().empty()) return NotSelfConsistent("boot event log", cmp);
  return OkStatus();
}

Status ReadIma(Golden* g) {
  const EvidenceBundle& ev = g->evidence;
  if (!g->quoted.count(kImaPcr))
    return InvalidInput("ima: the evidence does not quote PCR 10, so its IMA log is bound to nothing");
  if (g->logged.count(kImaPcr)) return InvalidInput("ima: the boot event log extends PCR 10, IMA's PCR");
  if (ev.ima_log.empty()) return InvalidInput("ima: the evidence has no IMA log");
  auto log = ParseImaLog(ev.ima_log, ImaTemplateHashAlgOf(ev.ima_log));
  if (!log.ok()) return log.status().Annotate("the evidence's IMA log");
  Appraisal a = CompareImaWithQuote(*log, ev.pcrs, /*allow_violations=*/true);
  if (!a.failures().empty()) return NotSelfConsistent("IMA log", a);
  std::vector<size_t> violations;
  for (const ImaEntry& e : log->entries)
    if (e.violation) violations.push_back(e.line);
  if (!violations.empty()) {
    std::string lines;
    for (size_t i = 0; i < violations.size() && i < 8; ++i) lines += (i ? ", " : "") + std::to_string(violations[i]);
    return FailedPrecondition("the IMA log has " + std::to_string(violations.size()) + " violation(s) (line " + lines +
                              "): a violation's file is unknown, so no allowlist can speak for it");
  }
  g->ima = std::move(*log);
  return OkStatus();
}

// ---- rules ---------------------------------------------------------------------------------

ojson QuotePcrs(const PcrSelection& sel) {
  ojson q = ojson::object();
  for (const auto& b : sel.banks) {
    ojson list = ojson::array();
    for (uint32_t i : PcrSelection::Indices(b)) list.push_back(i);
    q[AlgName(b.hash)] = std::move(list);
  }
  return q;
}

ojson EventLogRule(const Golden& g) {
  ojson e = {{"required", true}};
  if (g.exempt.empty()) return e;
  std::string why;
  for (uint32_t pcr : g.exempt) {
    why +=
        (why.empty() ? "" : "; ") + std::string("PCR ") + std::to_string(pcr) +
        (pcr == kImaPcr ? ": IMA's (" + std::string(g.ima ? "judged by the IMA allowlist" : "not judged: no ima") + ")"
                        : ": the boot log never extends it (its initial value is pinned by pcr_values)");
  }
  e["comment"] = why;
  e["exempt_pcrs"] = ojson(std::vector<uint32_t>(g.exempt.begin(), g.exempt.end()));
  return e;
}

// Every quoted PCR's value (IMA's PCR 10 excepted, which grows with every measurement).
ojson PcrValues(const Golden& g) {
  ojson out = ojson::object();
  for (uint32_t pcr = 0; pcr < kMaxPcrs; ++pcr) {
    if (!g.quoted.count(pcr) || (pcr == kImaPcr && g.exempt.count(pcr))) continue;
    const std::string source = g.logged.count(pcr) ? "replay of the boot log's " + EventList(g.EventsOf(pcr))
                                                   : "its initial value: the boot log never extends it";
    ojson banks = ojson::object();
    for (uint16_t bank : g.BanksOf(pcr)) {
      const auto& value = g.evidence.pcrs.at(bank).at(pcr);
      banks[AlgName(bank)] = ojson::array(
          {Entry(HexEncode(value), "quoted " + AlgName(bank) + " PCR " + std::to_string(pcr) + "; " + source)});
    }
    out[std::to_string(pcr)] = std::move(banks);
  }
  return out;
}

// Digests in one bank, each with the events it came from, in log order.
struct DigestSources {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> sources;
  void Add(const std::string& digest, std::string source) {
    auto [it, fresh] = sources.try_emplace(digest);
    if (fresh) order.push_back(digest);
    it->second.push_back(std::move(source));
  }
  ojson Json() const {
    ojson list = ojson::array();
    for (const std::string& d : order) {
      std::string comment;
      const auto& s = sources.at(d);
      for (size_t i = 0; i < s.size() && i < 8; ++i) comment += (i ? "; " : "") + s[i];
      if (s.size() > 8) comment += "; ... (" + std::to_string(s.size()) + " events in all)";
      list.push_back(Entry(d, comment));
    }
    return list;
  }
};

std::optional<Finding> FirstProblem(const Measurements& m, Measurements::Scope scope) {
  for (const auto& p : m.problems)
    if (p.scope == scope) return p.finding;
  return std::nullopt;
}

std::string Named(const Finding& f) { return f.check + (f.where.empty() ? "" : " at " + f.where); }

// secure_boot, when PCR 7 says Secure Boot was on; and every PCR 7 event by digest, which
// pins the Secure Boot configuration (PK, KEK, db, dbx) and the authorities used.
void DeriveSecureBoot(Golden* g, const Measurements& m, ojson* policy) {
  if (!g->Readable(7, "secure_boot and PCR 7's events")) return;
  const Appraisal sb = CheckSecureBoot(m);
  std::optional<Finding> problem = FirstProblem(m, Measurements::Scope::kSecureBoot);
  if (!problem && !sb.failures().empty()) problem = sb.failures().front();
  std::string summary;
  if (problem) {
    g->notes.push_back("secure_boot: not required, PCR 7 does not show it on (" + Named(*problem) + ")");
    summary = "Secure Boot is not required: " + Named(*problem);
  } else {
    for (const VariableEvent& v : m.secure_boot.config)
      summary += (summary.empty() ? "" : ", ") + v.var.name + " (event " + std::to_string(v.event) + ")";
    summary = "Secure Boot on: " + summary;
  }
  (*policy)["secure_boot"] = !problem;
  ojson rule = {{"comment", "every event the boot log extends into PCR 7. " + summary}};
  for (uint16_t bank : g->BanksOf(7)) {
    DigestSources d;
    for (const EventView& e : g->log.events)
      if (e.type != ev::kNoAction && e.pcr == 7) d.Add(HexEncode(g->DigestOf(e, bank)), Describe(e));
    rule[AlgName(bank)] = d.Json();
  }
  (*policy)["event_digests"] = {{"7", std::move(rule)}};
}

void DeriveBootApplications(Golden* g, const Measurements& m, ojson* policy) {
  if (!g->Readable(4, "boot_applications")) return;
  if (auto p = FirstProblem(m, Measurements::Scope::kBootApplications)) {
    g->notes.push_back("boot_applications: not derived, PCR 4 has an event the rule does not read (" + Named(*p) + ")");
    return;
  }
  if (m.boot_applications.empty()) {
    g->notes.push_back("boot_applications: not derived, PCR 4 has no EV_EFI_BOOT_SERVICES_APPLICATION");
    return;
  }
  ojson rule = ojson::object();
  for (uint16_t bank : g->BanksOf(4)) {
    DigestSources d;
    for (const BootApplication& app : m.boot_applications) {
      auto it = app.digests.find(bank);
      if (it != app.digests.end()) d.Add(HexEncode(it->second), Describe(g->log.events[app.event]));
    }
    rule[AlgName(bank)] = d.Json();
  }
  (*policy)["boot_applications"] = std::move(rule);
}

Status DeriveKernelCmdlines(Golden* g, const Measurements& m, ojson* policy) {
  if (!g->Readable(8, "kernel_cmdlines")) return OkStatus();
  if (auto p = FirstProblem(m, Measurements::Scope::kKernelCmdlines)) {
    g->notes.push_back("kernel_cmdlines: not derived, PCR 8 has an event the rule does not read (" + Named(*p) + ")");
    return OkStatus();
  }
  if (m.kernel_cmdlines.empty()) {
    g->notes.push_back("kernel_cmdlines: not derived, PCR 8 has no kernel command line");
    return OkStatus();
  }
  DigestSources lines;  // the strings, each with the events that carry it
  for (const KernelCmdline& c : m.kernel_cmdlines)
    lines.Add(c.text, "event " + std::to_string(c.event) + " kernel command line");
  // The GRUB command that loaded the kernel must match one of them too (quoting removed).
  for (const KernelLoadCommand& c : m.kernel_load_commands) {
    std::string match = c.arguments;
    for (const std::string& s : lines.order)
      if (s == c.arguments || GrubUnquoteCmdline(s) == c.arguments) match = s;
    lines.Add(match, "event " + std::to_string(c.event) + " GRUB command " + c.command);
  }
  for (const std::string& s : lines.order)
    if (!JsonSafe(s)) return InvalidInput("a kernel command line in PCR 8 is not UTF-8: a JSON policy cannot name it");
  (*policy)["kernel_cmdlines"] = lines.Json();
  return OkStatus();
}

Status DeriveImaAllowlist(const Golden& g, ojson* policy) {
  for (const std::string& prefix : g.options.ima_exclude_prefixes) {
    if (prefix.size() < 3 || prefix.front() != '/' || prefix.back() != '/' || prefix.size() > kMaxImaPathBytes)
      return InvalidInput("ima exclusion '" + prefix +
                          "': expected an absolute directory ending in '/', not '/' itself");
  }
  std::map<std::string, DigestSources> files;
  std::vector<std::string> order;
  for (const ImaEntry& e : g.ima->entries) {
    bool excluded = false;
    for (const std::string& prefix : g.options.ima_exclude_prefixes) excluded |= e.path.starts_with(prefix);
    if (excluded) continue;
    const std::string where = "IMA line " + std::to_string(e.line) + " " + e.path;
    if (e.path != "boot_aggregate" && (e.path.empty() || e.path[0] != '/'))
      return InvalidInput(where + ": neither an absolute path nor boot_aggregate, so the allowlist cannot name it");
    if (!JsonSafe(e.path)) return InvalidInput("IMA line " + std::to_string(e.line) + ": the path is not UTF-8");
    auto [it, fresh] = files.try_emplace(e.path);
    if (fresh) order.push_back(e.path);
    it->second.Add(e.file_digest_alg_name + ":" + HexEncode(e.file_digest), "IMA line " + std::to_string(e.line));
  }
  if (files.empty()) return InvalidInput("ima: every IMA measurement is under an excluded prefix: nothing to allow");
  ojson allowlist = ojson::object();
  for (const std::string& path : order) allowlist[path] = files.at(path).Json();
  ojson ima = {{"comment", "every measurement of the golden host's IMA log (" + std::to_string(g.ima->entries.size()) +
                               " lines) not under an excluded prefix"},
               {"required", true},
               {"mode", "allowlist"},
               {"allowlist", std::move(allowlist)}};
  if (!g.options.ima_exclude_prefixes.empty()) ima["exclude_path_prefixes"] = g.options.ima_exclude_prefixes;
  (*policy)["ima"] = std::move(ima);
  return OkStatus();
}

Result<std::string> Build(Golden* g) {
  const GoldenPolicyOptions& o = g->options;
  ojson p;
  p["version"] = 1;
  p["name"] = o.name;
  p["comment"] = "";  // written last, with the notes
  p["quote_pcrs"] = QuotePcrs(g->evidence.pcr_selection);
  p["ak_forms"] = ojson::array({"enrolment"});
  p["ek_roots"] = {{"dir", o.ek_roots_dir}};
  p["max_evidence_age_s"] = o.max_evidence_age_s;
  p["event_log"] = EventLogRule(*g);
  p["pcr_values"] = PcrValues(*g);
  const Measurements m = ReadMeasurements(g->log);
  DeriveSecureBoot(g, m, &p);
  DeriveBootApplications(g, m, &p);
  RETURN_IF_ERROR(DeriveKernelCmdlines(g, m, &p));
  if (g->ima) RETURN_IF_ERROR(DeriveImaAllowlist(*g, &p));
  std::string comment = "made by enclave-attest policy create from " + o.source + " (AK name " +
                        HexEncode(g->evidence.ak_name) +
                        "). Each entry's comment names the event or IMA line it came from (event data as logged: "
                        "only the values are rules). Review every rule, then pin this file's SHA-256 in the data-use "
                        "policies (attestation_policy_sha256) and sign those.";
  if (!g->notes.empty()) {
    comment += " Not derived:";
    for (const std::string& n : g->notes) comment += " " + n + ".";
  }
  if (!JsonSafe(o.name) || !JsonSafe(o.source) || !JsonSafe(o.ek_roots_dir))
    return InvalidInput("the policy name, source and EK root directory must be UTF-8");
  p["comment"] = comment;
  try {
    std::string text;
    Write(p, 0, &text);
    return text + "\n";
  } catch (const ojson::exception& e) {
    return InvalidInput(std::string("the policy cannot be written as JSON: ") + e.what());
  }
}

}  // namespace

Result<GoldenPolicy> MakeGoldenPolicy(const EvidenceBundle& evidence, ByteSpan ak_tpmt,
                                      const GoldenPolicyOptions& options) {
  if (options.name.empty()) return InvalidInput("the policy needs a name");
  if (options.ek_roots_dir.empty()) return InvalidInput("the policy needs an EK root directory (ek_roots.dir)");
  if (options.max_evidence_age_s < 1 || options.max_evidence_age_s > 86400)
    return InvalidInput("the maximum evidence age must be 1..86400 seconds");
  auto ak = ParseTpmtPublic(ak_tpmt);
  if (!ak.ok()) return ak.status().Annotate("the golden host's AK (TPMT_PUBLIC)");
  RETURN_IF_ERROR(CheckQuote(evidence, *ak));
  Golden g{evidence, options, {}, {}, {}, {}, std::nullopt, {}};
  RETURN_IF_ERROR(ReadBootLog(&g));
  if (options.ima) RETURN_IF_ERROR(ReadIma(&g));

  GoldenPolicy out;
  ASSIGN_OR_RETURN(out.text, Build(&g));
  out.notes = g.notes;
  // The policy must accept the evidence it came from: anything the verifier reads
  // differently from how it was derived (an event it cannot read in a judged PCR) shows here.
  auto policy = ParsePolicyText(out.text, "");
  if (!policy.ok()) return Internal("the policy made from the evidence does not parse: " + policy.status().message());
  AppraisalContext ctx;
  ctx.ak_public = ak->encoded;
  ctx.nonce = evidence.nonce;
  ctx.bound_digest = evidence.bound_digest;
  ctx.nonce_issued_at = ctx.now = 1;  // a golden host's evidence has no age to judge
  ASSIGN_OR_RETURN(out.self_check, AppraiseEvidence(*policy, ToEvidenceParts(evidence), ctx));
  if (!out.self_check.passed())
    return AuthFailed("the policy made from the evidence refuses it: " + out.self_check.appraisal.Summary());
  return out;
}

}  // namespace enclave::attest
