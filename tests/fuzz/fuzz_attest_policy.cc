// libFuzzer target: the attestation policy parser (strict JSON, attest/policy.h), without
// loading EK roots (ParsePolicyText reads no file). Invariants: no crash; a parsed policy
// quotes at least one PCR, has an evidence age in 1..86400, every reference digest has
// its bank's size, every PCR it judges by value is quoted in that bank, PCRs judged
// through the event log are quoted and not exempt, and the digest is SHA-256 of the input.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "enclave/attest/ima_log.h"
#include "enclave/attest/policy.h"

using namespace enclave;
using namespace enclave::attest;

namespace {

bool Quoted(const Policy& p, uint16_t bank, uint32_t pcr) {
  for (const auto& b : p.quote_selection.banks)
    if (b.hash == bank && (b.select & (1u << pcr))) return true;
  return false;
}

void CheckAllowed(const AllowedDigests& a) {
  if (a.empty()) std::abort();
  for (const auto& [bank, set] : a)
    for (const auto& d : set)
      if (d.size() != HashSize(bank)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto p = ParsePolicyText(text, "/nonexistent-fuzz-base");
  if (!p.ok()) return 0;
  if (p->quote_selection.banks.empty() || p->max_evidence_age_s < 1 || p->max_evidence_age_s > 86400) std::abort();
  // EK roots exactly when enrolments are accepted, AK roots exactly when certificates are.
  const bool ek = !p->ek_roots_dir.empty() || !p->ek_root_files.empty();
  const bool ak = !p->ak_roots_dir.empty() || !p->ak_root_files.empty();
  if (p->ak_forms.empty() || ek != p->Accepts(AkForm::kEnrolment) || ak != p->Accepts(AkForm::kCertificate)) std::abort();
  if (ek && p->ek_roots_dir.empty() == p->ek_root_files.empty()) std::abort();
  if (ak && p->ak_roots_dir.empty() == p->ak_root_files.empty()) std::abort();
  if (p->digest != crypto::Sha256({data, size})) std::abort();
  for (const auto& [pcr, banks] : p->pcr_values) {
    CheckAllowed(banks);
    for (const auto& [bank, unused] : banks)
      if (!Quoted(*p, bank, pcr)) std::abort();
  }
  for (const auto& [pcr, banks] : p->event_digests) {
    CheckAllowed(banks);
    if (p->log_exempt_pcrs.count(pcr)) std::abort();
    for (const auto& [bank, unused] : banks)
      if (!Quoted(*p, bank, pcr)) std::abort();
  }
  if (!p->boot_applications.empty()) CheckAllowed(p->boot_applications);
  for (uint32_t pcr : p->JudgedPcrs()) {
    bool any = false;
    for (const auto& b : p->quote_selection.banks) any |= Quoted(*p, b.hash, pcr);
    if (!any) std::abort();
  }
  for (const auto& rule : p->ima_files) {
    if (rule.path.empty() || rule.path[0] != '/' || rule.digests.empty()) std::abort();
    for (const auto& [alg_id, d] : rule.digests)
      if (d.size() != HashSize(alg_id)) std::abort();
  }
  if (!p->ima_files.empty() && !p->log_exempt_pcrs.count(kImaPcr)) std::abort();
  return 0;
}
