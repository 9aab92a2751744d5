// The compliance report (docs/formats/audit-log.md, "Compliance report"): what the
// verified log says happened in a period (jobs, datasets and who used them, attested hosts
// and their measurements, policies in force, key releases and leases, failed
// attestations, revocations) and how the log itself was verified.
//
// Fail-closed: BuildReport verifies the whole log first and returns an error, not a
// partial report, when verification fails. The HTML is rendered from the JSON document, so
// both formats carry the same content; every string taken from an entry is HTML-escaped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "enclave/audit/tree_head.h"
#include "enclave/audit/verify.h"
#include "enclave/audit/witness_policy.h"
#include "enclave/common/status.h"

namespace enclave::audit {

struct ReportOptions {
  std::optional<int64_t> from_ms;  // entries with time >= from (inclusive)
  std::optional<int64_t> to_ms;    // entries with time < to (exclusive)
  const AuditorState* trusted = nullptr;  // check consistency with this accepted head (not updated)
  std::string state_path;                 // named in the report when `trusted` is set
  // As `verify --witness-policy`: the cosigned checkpoint at `cosigned_path` (empty:
  // DIR/cosigned-checkpoint) must satisfy the policy's quorum, else there is no report and
  // the error is verify's (AuthFailed when too few witnesses cosigned, NotFound without one).
  const WitnessPolicy* witness_policy = nullptr;
  std::string witness_policy_path;  // named in the report when `witness_policy` is set
  std::string cosigned_path;
  uint64_t generated_at_ms = 0;           // 0: now
};

// The report as a JSON document ("format": "enclave-audit-compliance-report", version 1).
// Its "verdict" says in one place what was verified: the log (entries, signed tree size),
// whether consistency with an auditor's saved head was checked, and whether a witness
// quorum was required and met, by whom.
Result<nlohmann::json> BuildReport(const std::string& dir, const LogPublicKey& key, const ReportOptions& options);

// A self-contained HTML page (inline CSS, no script, no external resource, a CSP that
// forbids both) for a document from BuildReport.
std::string RenderReportHtml(const nlohmann::json& report);

// &, <, >, " and ' as character references.
std::string HtmlEscape(std::string_view s);

}  // namespace enclave::audit
