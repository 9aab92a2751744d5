// Inclusion and consistency proofs in one exchangeable JSON form (docs/formats/audit-log.md,
// section 8): RFC 9162 audit paths and consistency proofs over SHA-256, each tree given by
// its size and root and, when it comes from this log, by the log's signed checkpoint note.
// A proof may carry an entry of this log or a bare leaf hash, so proofs of any RFC 6962
// log (test vectors included) can be checked with the same reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/audit/event.h"
#include "enclave/audit/merkle.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr size_t kMaxProofHashes = 128;

enum class ProofKind { kInclusion, kConsistency };

struct Proof {
  ProofKind kind = ProofKind::kInclusion;
  // Inclusion: leaf `leaf_index` of the tree (new_size, new_root).
  uint64_t leaf_index = 0;
  std::optional<std::vector<uint8_t>> entry;  // this log's entry bytes; else only leaf_hash
  Hash leaf_hash{};                           // = LeafHash(*entry) when entry is set
  // Consistency: the tree (old_size, old_root) is a prefix of (new_size, new_root).
  uint64_t old_size = 0;
  Hash old_root{};
  std::string old_checkpoint;  // signed note; empty: none
  uint64_t new_size = 0;
  Hash new_root{};
  std::string new_checkpoint;  // signed note; empty: none
  std::vector<Hash> path;

  nlohmann::json ToJson() const;
  // Strict: exactly the members of section 8, lower-case hex, at most kMaxProofHashes.
  static Result<Proof> FromJson(const nlohmann::json& j, const std::string& where);
};

// Both verify the whole log first, then prove against its signed chained heads (the one of
// each size, the latest when there are two). NotFound when the log has no such head or entry.
Result<Proof> ProveInclusion(const std::string& dir, const LogPublicKey& key, uint64_t index,
                             std::optional<uint64_t> tree_size);
Result<Proof> ProveConsistency(const std::string& dir, const LogPublicKey& key, uint64_t old_size, uint64_t new_size);

struct ProofResult {
  bool signed_by_log = false;  // the checkpoints were checked with the log key
  std::optional<Entry> entry;  // when the proof carries an entry
};
// With `key`: every checkpoint the proof's kind needs must be there, signed by the key,
// and name the proof's sizes and roots. Without (`key` == nullptr): the hashes only, against
// the roots the proof states (checkpoints, if any, are not read). An entry must be valid
// (section 3) with seq = leaf_index either way. AuthFailed for a proof that does not hold.
Result<ProofResult> VerifyProof(const Proof& proof, const LogPublicKey* key);

}  // namespace enclave::audit
