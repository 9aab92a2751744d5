// libFuzzer target: a policy from a golden host (attest/golden_policy.h, `enclave-attest
// policy create`) over any boot event log and IMA list. The target makes the rest of the
// evidence self-consistent (PCRs 0-10 in the log's SHA-1/SHA-256 banks replayed from the
// logs themselves, a quote over them signed by a fixed in-process AK), so inputs reach the
// derivation instead of stopping at the signature.
// Input: byte 0 options (bit 0: --ima; bit 1: exclude /var/log/), u32 LE length of the
// event log, the event log, then the IMA list.
// Invariants: no crash; never an Internal error (a derived policy that does not parse, or
// that the verifier cannot evaluate); a policy made parses, has the digest of its bytes,
// pins every quoted PCR but 10 at its quoted value, has an IMA allowlist exactly with
// --ima, and accepts the evidence it came from when appraised again.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "../attest/attest_test_util.h"
#include "enclave/attest/event_log.h"
#include "enclave/attest/golden_policy.h"
#include "enclave/attest/ima_log.h"
#include "enclave/attest/policy.h"

using namespace enclave;
using namespace enclave::attest;

namespace {

EVP_PKEY* FuzzAk() {
  static attest_test::Pkey key = attest_test::MakeEcKey();
  return key.get();
}

struct Quoted {
  std::vector<uint16_t> banks;
  PcrValues values;
};

// PCRs 0-10 as the logs replay them, in the log's SHA-1 and SHA-256 banks (SHA-256 when it
// has neither): what a TPM that measured exactly these logs would quote.
Quoted ReplayedPcrs(const EvidenceBundle& ev) {
  Quoted q;
  auto log = ParseEventLogView(ev.event_log);
  for (uint16_t b : {alg::kSha1, alg::kSha256})
    if (log.ok() && std::find(log->banks.begin(), log->banks.end(), b) != log->banks.end()) q.banks.push_back(b);
  if (q.banks.empty()) q.banks = {alg::kSha256};
  std::optional<ReplayResult> replay;
  if (log.ok()) {
    auto r = ReplayEventLog(*log, q.banks);
    if (r.ok()) replay = std::move(*r);
  }
  auto ima = ParseImaLog(ev.ima_log, ImaTemplateHashAlgOf(ev.ima_log));
  for (uint16_t bank : q.banks) {
    for (uint32_t i = 0; i <= kImaPcr; ++i) {
      std::vector<uint8_t> v = InitialPcrValue(i, HashSize(bank), replay ? replay->startup_locality : std::nullopt);
      if (replay && replay->pcrs[bank].count(i)) v = replay->pcrs[bank][i];
      if (i == kImaPcr && ima.ok()) {
        auto r = ReplayImaLog(*ima, bank);
        if (r.ok()) v = *r;
      }
      q.values[bank][i] = v;
    }
  }
  return q;
}

EvidenceBundle MakeEvidence(ByteSpan log, ByteSpan ima) {
  EvidenceBundle ev;
  ev.event_log.assign(log.begin(), log.end());
  ev.ima_log.assign(ima.begin(), ima.end());
  ev.nonce = std::vector<uint8_t>(16, 0x5A);
  const Quoted q = ReplayedPcrs(ev);
  attest_test::AttestFields f;
  auto qd = QualifyingData(ev.nonce, std::nullopt);
  f.extra.assign(qd->begin(), qd->end());
  std::vector<uint8_t> concat;
  std::vector<uint32_t> pcrs;
  for (uint32_t i = 0; i <= kImaPcr; ++i) pcrs.push_back(i);
  for (uint16_t bank : q.banks) {
    f.sel.push_back({bank, pcrs});
    ev.pcr_selection.banks.push_back({bank, 3, (1u << (kImaPcr + 1)) - 1});
    for (uint32_t i : pcrs) concat = attest_test::Cat(concat, q.values.at(bank).at(i));
  }
  f.pcr_digest = attest_test::Sha256(concat);
  ev.pcrs = q.values;
  ev.attest = attest_test::EncodeAttest(f);
  ev.signature = attest_test::SignAttest(FuzzAk(), ev.attest);
  const std::vector<uint8_t> ak = attest_test::EncodeAkPublic(FuzzAk());
  ev.ak_name = attest_test::Cat({0x00, 0x0B}, attest_test::Sha256(ak));
  return ev;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const uint8_t flags = data[0];
  const size_t n = std::min<size_t>(size - 5, data[1] | (data[2] << 8) | (data[3] << 16) | (size_t{data[4]} << 24));
  const EvidenceBundle ev = MakeEvidence({data + 5, n}, {data + 5 + n, size - 5 - n});
  const std::vector<uint8_t> ak = attest_test::EncodeAkPublic(FuzzAk());
  GoldenPolicyOptions options;
  options.name = "fuzz";
  options.source = "fuzz input";
  options.ek_roots_dir = "roots";
  options.ima = flags & 1;
  if (flags & 2) options.ima_exclude_prefixes = {"/var/log/"};
  auto g = MakeGoldenPolicy(ev, ak, options);
  if (!g.ok()) {
    if (g.status().code() == Code::kInternal || g.status().message().empty()) std::abort();
    return 0;
  }
  if (!g->self_check.passed()) std::abort();
  auto p = ParsePolicyText(g->text, "/nonexistent-fuzz-base");
  if (!p.ok() || p->digest != crypto::Sha256(AsBytes(g->text))) std::abort();
  if (p->ima_allowlist_mode != options.ima) std::abort();
  for (const auto& [bank, values] : ev.pcrs) {
    for (const auto& [pcr, value] : values) {
      if (pcr == kImaPcr && p->log_exempt_pcrs.count(pcr)) continue;
      auto rule = p->pcr_values.find(pcr);
      if (rule == p->pcr_values.end()) std::abort();
      auto allowed = rule->second.find(bank);
      if (allowed == rule->second.end() || allowed->second != std::set<std::vector<uint8_t>>{value}) std::abort();
    }
  }
  AppraisalContext ctx;
  ctx.ak_public = ak;
  ctx.nonce = ev.nonce;
  ctx.nonce_issued_at = 1700000000;
  ctx.now = ctx.nonce_issued_at + 1;
  auto v = AppraiseEvidence(*p, ToEvidenceParts(ev), ctx);
  if (!v.ok() || !v->passed()) std::abort();
  return 0;
}
