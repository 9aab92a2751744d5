// The client's check of a witnessed release (release.h, VerifyWitnessedRelease).
#include <optional>
#include <set>
#include <string>

#include "enclave/audit/checkpoint.h"
#include "enclave/broker/release.h"
#include "enclave/common/bytes.h"

namespace enclave::broker {
namespace {

// The entry field `name` must be the string `want`.
Status Expect(const audit::Entry& e, const char* name, const std::string& want, const std::string& where) {
  const auto it = e.event.fields.find(name);
  if (it == e.event.fields.end() || !it->is_string() || it->get<std::string>() != want) {
    return AuthFailed(where + ": the entry's " + name + " is not " + want);
  }
  return OkStatus();
}

}  // namespace

Result<std::vector<audit::CosignedBy>> VerifyWitnessedRelease(const ReleaseGranted& g,
                                                              const std::array<uint8_t, 32>& report_key,
                                                              const audit::WitnessPolicy& policy) {
  if (g.audit_proofs.empty()) {
    return PermissionDenied("the release answer carries no witnessed audit proofs, but the job's witness policy (" +
                            policy.Describe() + ") requires them");
  }
  if (g.audit_proofs.size() != g.keys.size()) return AuthFailed("release answer: one audit proof per key is required");
  // The checkpoint: signed by a log the policy names, cosigned by its quorum.
  const std::string& note_text = g.audit_proofs[0].new_checkpoint;
  ASSIGN_OR_RETURN(audit::SignedNote note, audit::ParseNote(note_text, "release answer: audit checkpoint"));
  std::optional<audit::LogPublicKey> log_key;
  for (const audit::PolicyLog& l : policy.logs()) {
    const audit::LogPublicKey k = audit::LogPublicKey::FromKey(l.key);
    if (audit::VerifyCheckpointNote(note_text, k, "release answer: audit checkpoint").ok()) log_key = k;
  }
  if (!log_key) return AuthFailed("release answer: the audit checkpoint is not signed by a log of the witness policy");
  auto by = audit::PolicyCosignatures(policy, note);
  if (!by.ok()) return AuthFailed("release answer: audit checkpoint: " + by.status().message());
  std::set<std::string> names;
  for (const audit::CosignedBy& c : *by) names.insert(c.name);
  if (!policy.Satisfied(names)) {
    return AuthFailed("release answer: the audit checkpoint is cosigned by " + std::to_string(names.size()) +
                      " witness(es), not by the quorum " + policy.Describe());
  }
  // Each proof, and what its entry says.
  for (size_t i = 0; i < g.audit_proofs.size(); ++i) {
    const std::string where = "release answer: audit_proofs[" + std::to_string(i) + "]";
    auto r = audit::VerifyProof(g.audit_proofs[i], &*log_key);
    if (!r.ok()) return AuthFailed(where + ": " + r.status().message());
    if (!r->entry) return AuthFailed(where + ": carries no entry");
    const audit::Entry& e = *r->entry;
    if (e.event.type != audit::EventType::kKeyReleased) return AuthFailed(where + ": the entry is not key.released");
    RETURN_IF_ERROR(Expect(e, "lease_id", g.lease.lease_id, where));
    RETURN_IF_ERROR(Expect(e, "host", g.lease.host_id, where));
    RETURN_IF_ERROR(Expect(e, "job_id", g.lease.job_id, where));
    RETURN_IF_ERROR(Expect(e, "dataset_id", g.keys[i].dataset_id, where));
    RETURN_IF_ERROR(Expect(e, "key_id", HexEncode(g.keys[i].key_id), where));
    RETURN_IF_ERROR(Expect(e, "report_key", HexEncode(report_key), where));
  }
  return std::move(by).value();
}

}  // namespace enclave::broker
