#include "enclave/attest/verifier.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "enclave/attest/event_log.h"
#include "enclave/attest/ima_log.h"
#include "enclave/attest/measurements.h"
#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {
namespace {

constexpr char kQualifyingLabel[] = "enclave-attest quote v1";  // followed by its NUL

std::string AllowedList(const std::set<std::vector<uint8_t>>& allowed) {
  std::string s = "one of [";
  size_t n = 0;
  for (const auto& d : allowed) {
    if (n++) s += ", ";
    if (n > 4) {
      s += "... " + std::to_string(allowed.size()) + " in all";
      break;
    }
    s += HexEncode(d);
  }
  return s + "]";
}

void CheckEvidenceAge(const Policy& policy, const AppraisalContext& ctx, Appraisal* a) {
  if (ctx.now < ctx.nonce_issued_at) {
    a->Fail("evidence.age.future", "nonce_issued_at", "<= now (" + std::to_string(ctx.now) + ")",
            std::to_string(ctx.nonce_issued_at));
    return;
  }
  int64_t age = ctx.now - ctx.nonce_issued_at;
  if (age > policy.max_evidence_age_s) {
    a->Fail("evidence.age.expired", "now - nonce_issued_at", "<= " + std::to_string(policy.max_evidence_age_s) + " s",
            std::to_string(age) + " s");
  } else {
    a->Pass("evidence.age");
  }
}

void CheckPcrValues(const Policy& policy, const PcrValues& quoted, Appraisal* a) {
  size_t before = a->failures().size();
  for (const auto& [pcr, banks] : policy.pcr_values) {
    for (const auto& [bank, allowed] : banks) {
      std::string where = AlgName(bank) + " PCR " + std::to_string(pcr);
      const std::vector<uint8_t>* v = nullptr;
      auto b = quoted.find(bank);
      if (b != quoted.end()) {
        auto it = b->second.find(pcr);
        if (it != b->second.end()) v = &it->second;
      }
      if (v == nullptr) {
        a->Fail("pcr.value.missing", where, AllowedList(allowed), "not quoted");
      } else if (!allowed.count(*v)) {
        a->Fail("pcr.value.not_allowed", where, AllowedList(allowed), HexEncode(*v));
      }
    }
  }
  if (a->failures().size() == before) a->Pass("pcr.values");
}

// The policy's rules over the log's events. `log` has been replayed and compared with
// the quote by the caller.
void CheckEventRules(const Policy& policy, const EventLogView& log, Appraisal* a) {
  const std::set<uint32_t> judged = policy.JudgedPcrs();
  Measurements m = ReadMeasurements(log);
  size_t before = a->failures().size();
  for (const auto& p : m.problems) {
    bool counts = false;
    switch (p.scope) {
      case Measurements::Scope::kJudgedPcr:
        counts = judged.count(p.pcr) != 0;
        break;
      case Measurements::Scope::kSecureBoot:
        counts = policy.require_secure_boot;
        break;
      case Measurements::Scope::kBootApplications:
        counts = !policy.boot_applications.empty();
        break;
      case Measurements::Scope::kKernelCmdlines:
        counts = policy.judge_kernel_cmdlines;
        break;
    }
    if (counts) a->Fail(p.finding.check, p.finding.where, p.finding.expected, p.finding.got);
  }
  if (!judged.empty() && a->failures().size() == before) a->Pass("eventlog.events.readable");

  // Per-event reference digests.
  if (!policy.event_digests.empty()) {
    before = a->failures().size();
    std::vector<uint8_t> digest;
    for (const EventView& e : log.events) {
      if (e.type == ev::kNoAction) continue;
      auto rule = policy.event_digests.find(e.pcr);
      if (rule == policy.event_digests.end()) continue;
      for (const auto& [bank_id, allowed] : rule->second) {
        const uint16_t bank = bank_id;  // a structured binding cannot be captured (before C++20 P1091 in clang)
        auto where = [&] {
          return "event " + std::to_string(e.index) + " (" + EventTypeName(e.type) + ") " + AlgName(bank) + " PCR " +
                 std::to_string(e.pcr);
        };
        auto k = std::find(log.banks.begin(), log.banks.end(), bank);
        if (k == log.banks.end()) {
          a->Fail("event.digest.bank_missing", where(), "a digest in the judged bank", "none in the log");
          continue;
        }
        ByteSpan d = e.digests[static_cast<size_t>(k - log.banks.begin())];
        digest.assign(d.begin(), d.end());
        if (!allowed.count(digest)) a->Fail("event.digest.not_allowed", where(), AllowedList(allowed), HexEncode(d));
      }
    }
    if (a->failures().size() == before) a->Pass("event.digests");
  }

  if (policy.require_secure_boot) {
    a->Merge(CheckSecureBoot(m));
    // A tolerated quirk is named in the verdict (once per kind), so that it is never silent.
    std::set<std::string> quirks;
    for (const Measurements::Quirk& q : m.quirks) {
      if (q.pcr == 7 && quirks.insert(q.name).second) a->Pass(q.name);
    }
  }

  if (!policy.boot_applications.empty()) {
    before = a->failures().size();
    if (m.boot_applications.empty()) {
      a->Fail("bootapp.missing", "PCR 4", "at least one EV_EFI_BOOT_SERVICES_APPLICATION", "none");
    }
    for (const BootApplication& app : m.boot_applications) {
      for (const auto& [bank, allowed] : policy.boot_applications) {
        std::string where = "event " + std::to_string(app.event) + " " + AlgName(bank) + " PCR 4";
        auto it = app.digests.find(bank);
        if (it == app.digests.end()) {
          a->Fail("bootapp.bank.missing", where, "a digest in the judged bank", "none in the log");
        } else if (!allowed.count(it->second)) {
          a->Fail("bootapp.digest.not_allowed", where, AllowedList(allowed), HexEncode(it->second));
        }
      }
    }
    if (a->failures().size() == before) a->Pass("bootapp.digests");
  }

  if (policy.judge_kernel_cmdlines) {
    before = a->failures().size();
    if (m.kernel_cmdlines.empty()) {
      a->Fail("cmdline.missing", "PCR 8", "a GRUB kernel_cmdline EV_IPL event", "none");
    }
    for (const KernelCmdline& c : m.kernel_cmdlines) {
      bool ok = false;
      for (const auto& allowed : policy.kernel_cmdlines) ok |= allowed == c.text;
      if (!ok) {
        a->Fail("cmdline.not_allowed", "event " + std::to_string(c.event) + " PCR " + std::to_string(c.pcr),
                "one of the policy's kernel_cmdlines", c.text);
      }
    }
    // The GRUB command that loaded the kernel carries the same command line (GRUB's quoting
    // removed, or as is for GRUB builds that do not quote); its prefix, like every GRUB
    // prefix, is not covered by the digest, so it is judged by its text.
    for (const KernelLoadCommand& c : m.kernel_load_commands) {
      bool ok = false;
      for (const auto& allowed : policy.kernel_cmdlines) {
        ok |= allowed == c.arguments || GrubUnquoteCmdline(allowed) == c.arguments;
      }
      if (!ok) {
        a->Fail("cmdline.not_allowed", "event " + std::to_string(c.event) + " PCR 8 (GRUB command " + c.command + ")",
                "one of the policy's kernel_cmdlines", c.arguments);
      }
    }
    if (a->failures().size() == before) a->Pass("cmdline");
  }
}

void CheckBootLog(const Policy& policy, const EvidenceParts& evidence, const PcrValues& quoted, Appraisal* a) {
  const bool has_rules = policy.require_secure_boot || !policy.boot_applications.empty() ||
                         policy.judge_kernel_cmdlines || !policy.event_digests.empty();
  if (evidence.event_log.empty()) {
    if (policy.require_event_log || has_rules) {
      a->Fail("eventlog.missing", "evidence", "a boot event log", "none");
    }
    return;
  }
  bool any_judged = false;
  for (const auto& [bank, values] : quoted)
    for (const auto& [idx, unused] : values) any_judged |= !policy.log_exempt_pcrs.count(idx);
  // A log that no quoted PCR is compared with, under a policy that neither requires nor
  // reads one, binds nothing: it is not read (with a requirement, CompareWithQuote fails
  // it as eventlog.pcrs.none_compared).
  if (!any_judged && !policy.require_event_log && !has_rules) return;
  auto log = ParseEventLogView(evidence.event_log);  // points into `evidence`, which outlives it
  if (!log.ok()) {
    a->Fail("eventlog.malformed", "event log", "a well-formed TCG event log", log.status().message());
    return;
  }
  // Only the quoted banks are compared, so only they are replayed.
  std::vector<uint16_t> banks;
  for (const auto& [bank, unused] : quoted) banks.push_back(bank);
  auto replay = banks.empty() ? ReplayEventLog(*log) : ReplayEventLog(*log, banks);
  if (!replay.ok()) {
    a->Fail("eventlog.replay.invalid", "event log", "a replayable log", replay.status().message());
    return;
  }
  a->Merge(CompareWithQuote(log->banks, *replay, quoted, policy.log_exempt_pcrs));
  // A quoted PCR the log never extends fails unless the policy exempts it: its value
  // (initial or not) says nothing the log can account for.
  for (const auto& [bank, values] : quoted) {
    auto rb = replay->pcrs.find(bank);
    for (const auto& [idx, unused] : values) {
      if (policy.log_exempt_pcrs.count(idx)) continue;
      if (rb == replay->pcrs.end() || !rb->second.count(idx)) {
        if (std::find(log->banks.begin(), log->banks.end(), bank) == log->banks.end()) continue;  // bank.missing
        std::string where = AlgName(bank) + " PCR " + std::to_string(idx);
        bool reported = false;  // as eventlog.pcr.unlogged_extend, when not at its initial value
        for (const auto& f : a->failures()) reported |= f.check == "eventlog.pcr.unlogged_extend" && f.where == where;
        if (reported) continue;
        a->Fail("eventlog.pcr.not_extended", where, "extended by the event log (or listed in event_log.exempt_pcrs)",
                "no event in the log");
      }
    }
  }
  CheckEventRules(policy, *log, a);
}

// Allowlist mode: every measurement is of an allowed file, or under an excluded prefix.
// Violations are judged by CompareImaWithQuote (allowlist mode never allows them).
void CheckImaAllowlist(const Policy& policy, const ImaLog& log, Appraisal* a) {
  const size_t before = a->failures().size();
  size_t reported = 0;  // one failure per offending line would flood a verdict: the first 32
  auto fail = [&](const std::string& check, const std::string& where, const std::string& expected,
                  const std::string& got) {
    if (reported++ < 32) a->Fail(check, where, expected, got);
  };
  for (const ImaEntry& e : log.entries) {
    if (e.violation) continue;
    bool excluded = false;
    for (const std::string& prefix : policy.ima_exclude_prefixes) excluded |= e.path.starts_with(prefix);
    if (excluded) continue;
    const std::string where = "line " + std::to_string(e.line) + " " + e.path;
    const std::string got = e.file_digest_alg_name + ":" + HexEncode(e.file_digest);
    auto it = policy.ima_allowlist.find(e.path);
    if (it == policy.ima_allowlist.end()) {
      fail("ima.allowlist.path_not_listed", where, "a path in the policy's IMA allowlist or under an excluded prefix",
           got);
    } else if (!it->second.count({e.file_digest_alg, e.file_digest})) {
      std::string expected = "one of [";
      size_t n = 0;
      for (const auto& [alg_id, d] : it->second) expected += (n++ ? ", " : "") + AlgName(alg_id) + ":" + HexEncode(d);
      fail("ima.allowlist.digest_not_allowed", where, expected + "]", got);
    }
  }
  if (reported > 32)
    a->Fail("ima.allowlist.more", "IMA log", "every measurement allowed",
            std::to_string(reported - 32) + " more measurements not allowed");
  if (a->failures().size() == before) a->Pass("ima.allowlist");
}

void CheckIma(const Policy& policy, const EvidenceParts& evidence, const PcrValues& quoted, Appraisal* a) {
  bool pcr10_quoted = false;
  for (const auto& b : policy.quote_selection.banks) pcr10_quoted |= (b.select & (1u << kImaPcr)) != 0;
  bool configured = policy.require_ima_log || !policy.ima_files.empty() || policy.ima_allowlist_mode;
  if (evidence.ima_log.empty()) {
    bool needed = policy.require_ima_log;
    for (const auto& r : policy.ima_files) needed |= r.required;
    if (needed) a->Fail("ima.missing", "evidence", "an IMA measurement list", "none");
    return;
  }
  // An IMA log the quote does not cover is not read at all.
  if (!pcr10_quoted && !configured) return;
  auto log = ParseImaLog(evidence.ima_log, ImaTemplateHashAlgOf(evidence.ima_log));
  if (!log.ok()) {
    a->Fail("ima.log.malformed", "IMA log", "a well-formed ima-ng measurement list", log.status().message());
    return;
  }
  a->Merge(CompareImaWithQuote(*log, quoted, policy.ima_allow_violations));
  size_t before = a->failures().size();
  for (const ImaFileRule& rule : policy.ima_files) {
    size_t seen = 0;
    for (const ImaEntry& e : log->entries) {
      // A violation's path and digest are not covered by anything (it is replayed as all
      // ff whatever the line says): it never counts as a measurement of a file.
      if (e.violation || e.path != rule.path) continue;
      ++seen;
      if (!rule.digests.count({e.file_digest_alg, e.file_digest})) {
        std::string expected = "one of [";
        size_t n = 0;
        for (const auto& [alg_id, d] : rule.digests)
          expected += (n++ ? ", " : "") + AlgName(alg_id) + ":" + HexEncode(d);
        a->Fail("ima.file.digest_not_allowed", "line " + std::to_string(e.line) + " " + e.path, expected + "]",
                e.file_digest_alg_name + ":" + HexEncode(e.file_digest));
      }
    }
    if (seen == 0 && rule.required) {
      a->Fail("ima.file.missing", rule.path, "measured by IMA", "not in the IMA log");
    }
  }
  if (!policy.ima_files.empty() && a->failures().size() == before) a->Pass("ima.files");
  if (policy.ima_allowlist_mode) CheckImaAllowlist(policy, *log, a);
}

}  // namespace

Result<crypto::Digest256> QualifyingData(std::span<const uint8_t> nonce,
                                         const std::optional<crypto::Digest256>& bound_digest) {
  if (nonce.empty() || nonce.size() > 32) {
    return InvalidInput("nonce is " + std::to_string(nonce.size()) + " bytes, expected 1..32");
  }
  crypto::Sha256Hasher h;
  h.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kQualifyingLabel), sizeof(kQualifyingLabel)));
  const uint8_t len = static_cast<uint8_t>(nonce.size());
  h.Update(std::span<const uint8_t>(&len, 1));
  h.Update(nonce);
  crypto::Digest256 zero{};
  h.Update(bound_digest ? std::span<const uint8_t>(*bound_digest) : std::span<const uint8_t>(zero));
  return h.Final();
}

Result<Verdict> AppraiseEvidence(const Policy& policy, const EvidenceParts& evidence, const AppraisalContext& context) {
  if (policy.max_evidence_age_s <= 0) return InvalidInput("policy has no maximum evidence age");
  if (policy.quote_selection.banks.empty()) return InvalidInput("policy selects no PCRs to quote");
  if (context.now <= 0 || context.nonce_issued_at <= 0) {
    return InvalidInput("appraisal context needs now and nonce_issued_at (unix seconds)");
  }
  if (!policy.Accepts(context.ak_form)) {
    std::string forms;
    for (AkForm f : policy.ak_forms) forms += std::string(forms.empty() ? "" : ", ") + AkFormName(f);
    return InvalidInput("policy '" + policy.name + "' does not accept an AK given as " + AkFormName(context.ak_form) +
                        " (its ak_forms: " + forms + ")");
  }
  Verdict v;
  QuoteExpectations expect;
  TpmtPublic ak;
  switch (context.ak_form) {
    case AkForm::kEnrolment:
    case AkForm::kTpmPublic: {
      if (context.ak_public.empty()) return InvalidInput("appraisal context has no AK public (from the enrolment)");
      auto parsed = ParseTpmtPublic(context.ak_public);
      if (!parsed.ok()) return parsed.status().Annotate("the enrolled AK public (TPMT_PUBLIC)");
      ak = std::move(*parsed);
      break;
    }
    case AkForm::kPublicKey: {
      auto key = AkKeyFromSpki(context.ak_key);
      if (!key.ok()) return key.status().Annotate("the AK public key");
      ak = std::move(*key);
      expect.ak_known = AkKnowledge::kKeyOnly;
      break;
    }
    case AkForm::kCertificate: {
      ASSIGN_OR_RETURN(AkCertificate cert, AppraiseAkCertificate(context.ak_key, policy.ak_trust, context.now));
      v.appraisal.Merge(cert.appraisal);
      if (!cert.key) return v;  // a certificate that does not parse certifies no key
      ak = std::move(*cert.key);
      expect.ak_known = AkKnowledge::kKeyOnly;
      break;
    }
  }
  if (context.qualifying_data == QualifyingDataForm::kRawNonce) {
    if (context.nonce.empty() || context.nonce.size() > 64)
      return InvalidInput("nonce is " + std::to_string(context.nonce.size()) + " bytes, expected 1..64 (raw nonce)");
    if (context.bound_digest) return InvalidInput("a raw-nonce quote binds nothing but the nonce: no bound digest");
    expect.extra_data = context.nonce;
  } else {
    ASSIGN_OR_RETURN(crypto::Digest256 qd, QualifyingData(context.nonce, context.bound_digest));
    expect.extra_data.assign(qd.begin(), qd.end());
  }
  expect.selection = policy.quote_selection;
  expect.ak_policy = policy.ak;
  expect.previous = context.last_clock;
  v.appraisal.Merge(AppraiseQuote(ak, evidence.quote, expect));
  auto attest = QuotedAttest(evidence.quote);
  if (attest.ok()) v.clock = attest->clock_info;

  CheckEvidenceAge(policy, context, &v.appraisal);
  // The logs and reference values are judged against the reported PCR values; those are
  // bound to the signature by the quote's PCR digest, which AppraiseQuote checked (a
  // failure there fails the verdict whatever the rest says).
  const PcrValues& quoted = evidence.quote.pcrs;
  if (!policy.pcr_values.empty()) CheckPcrValues(policy, quoted, &v.appraisal);
  CheckBootLog(policy, evidence, quoted, &v.appraisal);
  CheckIma(policy, evidence, quoted, &v.appraisal);
  return v;
}

Status VerifyQuoteOrigin(ByteSpan ak_public, const QuoteEvidence& quote, std::span<const uint8_t> nonce,
                         const std::optional<crypto::Digest256>& bound_digest) {
  auto ak = ParseTpm2bPublic(ak_public);
  if (!ak.ok()) return ak.status().Annotate("the enrolled AK public (TPM2B_PUBLIC)");
  ASSIGN_OR_RETURN(crypto::Digest256 qd, QualifyingData(nonce, bound_digest));
  QuoteExpectations expect;
  expect.extra_data.assign(qd.begin(), qd.end());
  const Appraisal a = AppraiseQuote(*ak, quote, expect);
  // A signed TPMS_ATTEST that is not a quote (wrong magic: TPM2_Sign over chosen bytes;
  // wrong type: another attestation) is not evidence of anything.
  for (const char* check : {"quote.magic", "quote.type", "quote.signature", "quote.extra_data"}) {
    if (std::find(a.passed().begin(), a.passed().end(), check) != a.passed().end()) continue;
    for (const Finding& f : a.failures()) {
      if (f.check.starts_with(check) || f.check.starts_with("quote.attest")) return PermissionDenied(f.check + " at " + f.where);
    }
    return PermissionDenied(std::string(check) + " did not pass");
  }
  return OkStatus();
}

Result<std::string> FindImaMeasurement(const EvidenceParts& evidence, const crypto::Digest256& sha256) {
  const std::string want = "sha256:" + HexEncode(sha256);
  if (evidence.ima_log.empty()) return FailedPrecondition("the evidence has no IMA log to show " + want + " measured");
  auto log = ParseImaLog(evidence.ima_log, ImaTemplateHashAlgOf(evidence.ima_log));
  if (!log.ok()) return FailedPrecondition("the IMA log does not parse: " + log.status().message());
  // Bound to the signed quote only through a quoted PCR 10 that the log replays to.
  Appraisal bound = CompareImaWithQuote(*log, evidence.quote.pcrs, /*allow_violations=*/true);
  if (!bound.ok()) {
    const Finding& f = bound.failures().front();
    return FailedPrecondition("the IMA log is not bound to the quote (" + f.check + " at " + f.where + ")");
  }
  for (const ImaEntry& e : log->entries) {
    if (!e.violation && e.file_digest_alg == alg::kSha256 &&
        std::equal(e.file_digest.begin(), e.file_digest.end(), sha256.begin(), sha256.end()))
      return e.path;
  }
  return FailedPrecondition("no measurement " + want + " in the quoted IMA log (" +
                            std::to_string(log->entries.size()) + " entries)");
}

std::string VerdictJson(const Verdict& verdict) {
  nlohmann::ordered_json j;
  j["verdict"] = verdict.passed() ? "pass" : "fail";
  j["passed"] = nlohmann::ordered_json::array();
  for (const auto& c : verdict.appraisal.passed()) j["passed"].push_back(c);
  j["failures"] = nlohmann::ordered_json::array();
  for (const auto& f : verdict.appraisal.failures()) {
    nlohmann::ordered_json o;
    o["check"] = f.check;
    o["where"] = f.where;
    o["expected"] = f.expected;
    o["got"] = f.got;
    j["failures"].push_back(std::move(o));
  }
  if (!verdict.appraisal.not_evaluated().empty()) {
    j["not_evaluated"] = nlohmann::ordered_json::array();
    for (const auto& n : verdict.appraisal.not_evaluated()) j["not_evaluated"].push_back({{"check", n.check}, {"why", n.why}});
  }
  // Invalid UTF-8 from evidence (a command line, an IMA path) is replaced, never thrown.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace enclave::attest
