// The log's side of C2SP tlog-witness: submit a checkpoint to witnesses with a consistency
// proof from the size each last cosigned, and check every answer against the witness's key
// (docs/formats/witness.md, "Client").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/audit/cosignature.h"
#include "enclave/audit/merkle.h"
#include "enclave/audit/witness_policy.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr size_t kMaxWitnessAnswerBytes = 64 * 1024;

// Keep-alive connections to witnesses, one per URL, for a client that asks them again and
// again (the broker's witnessing): thread-safe; a connection the witness closed is opened
// anew, and a request that fails on a reused connection is sent once more on a new one.
class WitnessConnections {
 public:
  WitnessConnections();
  ~WitnessConnections();
  WitnessConnections(const WitnessConnections&) = delete;
  WitnessConnections& operator=(const WitnessConnections&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

struct WitnessClientOptions {
  int timeout_s = 10;  // connect, and each read and write
  // Without: a connection per request, closed after the answer.
  std::shared_ptr<WitnessConnections> connections;
};

// Asks one witness (its URL: http://HOST:PORT[/PREFIX] or https://...) to cosign
// `checkpoint_note`, the log's signed checkpoint of the tree of the first N of
// `leaf_hashes`. *old_size is the size tried first; when the witness answers 409 with its
// own size, the proof is made from that size and the request sent once more (*old_size is
// then the witness's). The answer must carry a valid cosignature by `witness.key`.
// Errors: Unavailable (unreachable, 5xx), AuthFailed (the witness refused the checkpoint as
// inconsistent with what it cosigned: a fork or a cut log, or a bad cosignature),
// PermissionDenied (the witness does not follow this log or refused its signature),
// InvalidInput (the witness called the request malformed). Each names the witness.
Result<VerifiedCosignature> RequestCosignature(const PolicyWitness& witness, std::string_view checkpoint_note,
                                               std::span<const Hash> leaf_hashes, uint64_t* old_size,
                                               const WitnessClientOptions& options = {});
// The same with proofs from `prove(first, second)` (a consistency proof between the trees
// of those sizes of the log), e.g. LogWriter::ConsistencyProof.
using ConsistencyProver = std::function<Result<std::vector<Hash>>(uint64_t first, uint64_t second)>;
Result<VerifiedCosignature> RequestCosignature(const PolicyWitness& witness, std::string_view checkpoint_note,
                                               const ConsistencyProver& prove, uint64_t* old_size,
                                               const WitnessClientOptions& options = {});

struct WitnessOutcome {
  std::string name;  // the policy's name
  Status status;     // OK when cosigned
  std::optional<VerifiedCosignature> cosignature;
  uint64_t old_size = 0;  // the size the witness had cosigned before
};
struct CosignResult {
  std::vector<WitnessOutcome> outcomes;  // one per policy witness with a URL, in policy order
  bool quorum = false;
  std::string cosigned_note;  // the checkpoint note followed by every cosignature obtained
};
// Every witness of the policy that has a URL, at once; `old_size_hint` is the size to try
// first (the size of the last cosigned checkpoint, or 0).
CosignResult CosignCheckpoint(const WitnessPolicy& policy, std::string_view checkpoint_note,
                              std::span<const Hash> leaf_hashes, uint64_t old_size_hint,
                              const WitnessClientOptions& options = {});
CosignResult CosignCheckpoint(const WitnessPolicy& policy, std::string_view checkpoint_note,
                              const ConsistencyProver& prove, uint64_t old_size_hint,
                              const WitnessClientOptions& options = {});

}  // namespace enclave::audit
