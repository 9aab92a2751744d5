// Archived evidence of attestation verdicts (docs/formats/audit-log.md, "Archived
// evidence"): what lets a compliance officer recompute a past verdict offline.
//
// The broker stores every input of an appraisal (evidence bundle, enrolment bundle,
// policy file, the EK root files the policy names) and the verdict it reached, as blobs
// in a content-addressed archive beside the log, DIR/archive/sha256/<64 hex>. The
// attestation.verdict entry names each blob by its SHA-256 and carries the scalar inputs
// (nonce, bound digest, nonce issue time, appraisal time, last clock info), so the Merkle
// log and its signed tree heads make the archive tamper-evident: a blob can be lost or
// altered, never swapped unseen.
//
// RecheckVerdict verifies the log first (an entry of an unverified log proves nothing),
// then loads and digest-checks every blob of one entry and runs attest::AppraiseEvidence
// again with the recorded "now" and last clock info.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/attest/verifier.h"
#include "enclave/audit/event.h"
#include "enclave/audit/log_writer.h"
#include "enclave/audit/verify.h"
#include "enclave/common/bytes.h"
#include "enclave/common/group_sync.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::audit {

inline constexpr char kArchiveDirName[] = "archive";  // DIR/archive/sha256/<hex>
inline constexpr size_t kMaxArchiveBlobBytes = 256u << 20;  // attest::kMaxBundleBytes

// The write-once, content-addressed blob store of one log directory.
class EvidenceArchive {
 public:
  // DIR/archive/sha256; `create` makes the folders (mode 0700) when missing.
  static Result<EvidenceArchive> Open(const std::string& log_dir, bool create);

  // Stores `bytes` under SHA-256(bytes), atomically and durably (file and folder synced)
  // before it returns. An existing blob is never replaced: it must already hold exactly
  // these bytes (AuthFailed otherwise: the archive was altered).
  Result<crypto::Digest256> Put(ByteSpan bytes) const;
  // Put for several blobs with one sync of the folder (shared with concurrent callers):
  // on return every blob, written now or found, is durable.
  Result<std::vector<crypto::Digest256>> PutAll(const std::vector<ByteSpan>& blobs) const;
  // The blob's bytes: NotFound when absent, AuthFailed when they do not hash to `digest`.
  Result<std::vector<uint8_t>> Get(const crypto::Digest256& digest) const;
  std::string PathFor(const crypto::Digest256& digest) const;
  // The bytes of every blob now stored (a directory scan), and the bytes the archive's file
  // system has free for unprivileged writers (statvfs), for a caller's disk budget.
  Result<uint64_t> BytesUsed() const;
  Result<uint64_t> BytesFree() const;

 private:
  explicit EvidenceArchive(std::string dir);
  // Stores one blob without syncing the folder.
  Result<crypto::Digest256> PutUnsynced(ByteSpan bytes) const;
  std::string dir_;
  std::shared_ptr<GroupSync> folder_sync_;  // fsync of dir_, shared by copies
};

// A file the policy names (its EK roots), by its path relative to the policy file's folder.
struct ArchivedFile {
  std::string path;  // normalized, relative; may start with "../"
  crypto::Digest256 sha256{};
};

// The scalar inputs of AppraiseEvidence that are not blobs.
struct VerdictContext {
  std::vector<uint8_t> nonce;                     // 1..32 bytes, as issued by the verifier
  std::optional<crypto::Digest256> bound_digest;  // SHA-256 of the data bound into the quote
  int64_t nonce_issued_at = 0;                    // unix seconds
  int64_t appraised_at = 0;                       // unix seconds: AppraiseEvidence's "now"
  std::optional<attest::ClockInfo> last_clock;    // last clock info accepted for the host
};

// What the broker has when it decides: every input as the bytes it read.
struct VerdictInputs {
  std::string actor;                // who decided, e.g. "broker@tenant"
  std::string host;                 // the host's id
  std::string job_digest;           // optional (empty: none)
  std::string evidence_bundle;      // the host's evidence bundle, as received
  std::string enrolment_bundle;     // the host's enrolment bundle (its AK public)
  std::string policy;               // the policy file's bytes
  std::string policy_dir;           // the folder the policy's relative paths resolve against
  VerdictContext context;
};

// The one path from archived bytes to a verdict, used by the broker and by the re-check
// alike: parse the policy (EK root paths resolving against `policy_dir`), the evidence
// bundle and the enrolment bundle (its AK public), then AppraiseEvidence. A Status error
// means "could not evaluate".
Result<attest::Verdict> AppraiseFromBytes(std::string_view policy, const std::string& policy_dir,
                                          std::string_view evidence_bundle, std::string_view enrolment_bundle,
                                          const VerdictContext& context);
// The same from a policy already parsed (the broker and the re-check keep policies parsed
// from identical bytes: a Policy is a value, nothing in it refers to the files).
Result<attest::Verdict> AppraiseParsed(const attest::Policy& policy, std::string_view evidence_bundle,
                                       std::string_view enrolment_bundle, const VerdictContext& context);

// The files the policy's "ek_roots" names ("files" and "intermediates", or every regular
// file of "dir" not starting with '.'), read from `policy_dir`. Unsupported for an
// absolute path (an archived policy must be relocatable).
Result<std::vector<std::pair<ArchivedFile, std::string>>> PolicyReferencedFiles(std::string_view policy,
                                                                                const std::string& policy_dir);

// The entry's "checks" for a verdict: each passed check {ok: true, reason: "passed"},
// each failure {ok: false, reason: "<where>: expected <e>, got <g>"} (control characters
// replaced, at most 2048 bytes), failures first, at most 1024 in all.
std::vector<CheckOutcome> ChecksFromVerdict(const attest::Verdict& verdict);

// Archives every input and attest::VerdictJson(verdict), then appends the
// attestation.verdict entry; returns its index. Blobs are durable before the entry is
// written, so an acknowledged entry never names a blob that a crash lost.
Result<uint64_t> RecordAttestationVerdict(LogWriter& log, const EvidenceArchive& archive, const VerdictInputs& inputs,
                                          const attest::Verdict& verdict);

// The broker's path: reads the policy's files once, appraises on exactly those bytes laid
// out as RecheckVerdict lays them out (what is archived is what was judged), then records
// as RecordAttestationVerdict does. An input that cannot be evaluated is returned as an
// error and nothing is recorded.
struct RecordedVerdict {
  attest::Verdict verdict;
  uint64_t index = 0;
};
Result<RecordedVerdict> AppraiseAndRecord(LogWriter& log, const EvidenceArchive& archive, const VerdictInputs& inputs);

// The archived inputs an attestation.verdict entry names.
struct VerdictRecord {
  std::string host;
  bool accepted = false;
  crypto::Digest256 evidence_sha256{}, enrolment_sha256{}, policy_sha256{}, result_sha256{};
  std::vector<ArchivedFile> policy_files;
  VerdictContext context;
};
// InvalidInput when `entry` is not an attestation.verdict; FailedPrecondition when it
// archives nothing (written before archiving, or appended by hand); InvalidInput for an
// unusable value (a policy file path that is absolute or not normalized, a time past 2^63).
Result<VerdictRecord> VerdictRecordFromEntry(const Entry& entry);

// A relative path as policy_files stores it: not empty, not absolute, normalized (no "."
// or empty component, ".." only at the start), at most 32 components.
Status CheckArchivedPath(std::string_view path);

// A VerdictJson document read back: {"verdict","passed","failures"}, nothing else.
struct VerdictDoc {
  bool pass = false;
  std::vector<std::string> passed;
  std::vector<attest::Finding> failures;
};
Result<VerdictDoc> ParseVerdictJson(std::string_view text);

enum class RecheckOutcome { kReproduced, kDiffers, kNotEvaluated };

struct RecheckResult {
  VerifyResult log;  // the log verified in full
  uint64_t index = 0;
  Entry entry;
  RecheckOutcome outcome = RecheckOutcome::kNotEvaluated;
  Status not_evaluated;               // kNotEvaluated: why (which blob, which parse)
  std::string recorded_json;          // the archived VerdictJson (when it could be read)
  std::string recomputed_json;        // VerdictJson of the recomputation (when it ran)
  std::vector<std::string> differences;  // kDiffers: one line each
};

// Verifies the log (VerifyLog; against `trusted` when given), then re-checks entry
// `index`. Errors: the log's verification failure, NotFound for an index past the end,
// InvalidInput for an entry that is not an attestation verdict. Everything after that is
// an outcome: reproduced, differs, or not evaluated (an entry without archived inputs, a
// missing or altered blob, an input that does not parse).
Result<RecheckResult> RecheckVerdict(const std::string& dir, const LogPublicKey& key, uint64_t index,
                                     const AuditorState* trusted);

}  // namespace enclave::audit
