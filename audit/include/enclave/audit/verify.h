// Offline verification of an audit log by someone who holds only the log's public key:
// recompute the Merkle tree from the entries, check every signed tree head against it,
// and check that the log extends the last tree head this auditor accepted (state file),
// so that edits, deletions, reordering, truncation, rollback and forks are detected.
// Also: inclusion proof bundles for a single entry, checkable by a third party.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/audit/event.h"
#include "enclave/audit/merkle.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/status.h"

namespace enclave::audit {

// What an auditor remembers between runs: the newest tree head it accepted.
// JSON: {"format":"enclave-audit-auditor-state","version":1,"log_id":HEX,"tree_head":{...}}
struct AuditorState {
  Hash log_id{};
  SignedTreeHead tree_head;

  nlohmann::json ToJson() const;
  // std::nullopt when the file does not exist (first run).
  static Result<std::optional<AuditorState>> Load(const std::string& path);
  Status Save(const std::string& path) const;  // atomic replace
};

struct VerifyOptions {
  const AuditorState* trusted = nullptr;
  // Called for every entry, in order, after it parsed and its seq matched.
  std::function<Status(uint64_t index, uint64_t offset, ByteSpan bytes, const Entry& entry)> on_entry;
};

struct TreeHeadAt {
  SignedTreeHead sth;
  uint64_t offset = 0;
};

struct VerifyResult {
  std::string path;
  uint64_t file_bytes = 0;
  uint64_t entries = 0;
  std::vector<TreeHeadAt> tree_heads;  // all of them, in file order
  SignedTreeHead latest;
  std::vector<Hash> leaf_hashes;
  // Set when a trusted state was given: the accepted head this log was checked against.
  std::optional<SignedTreeHead> previously_accepted;
};

// Every failure is AuthFailed (or InvalidInput/NotFound/Io for unusable inputs) with a
// message saying where (file offset, entry index, tree size).
Result<VerifyResult> VerifyLog(const std::string& dir, const LogPublicKey& key, const VerifyOptions& options = {});

// A single entry proven against a signed tree head (docs/formats/audit-log.md, "Inclusion proofs").
struct InclusionBundle {
  Hash log_id{};
  uint64_t index = 0;
  std::vector<uint8_t> entry;  // the exact entry bytes
  SignedTreeHead tree_head;
  std::vector<Hash> path;

  nlohmann::json ToJson() const;
  static Result<InclusionBundle> FromJson(const nlohmann::json& j, const std::string& where);
};

// Verifies the whole log first; `tree_size` picks one of its signed tree heads (default:
// the latest).
Result<InclusionBundle> ProveEntry(const std::string& dir, const LogPublicKey& key, uint64_t index,
                                   std::optional<uint64_t> tree_size);
// Checks the log id, the tree head's signature, the entry's schema and seq, and the path.
Result<Entry> VerifyInclusionBundle(const InclusionBundle& bundle, const LogPublicKey& key);

}  // namespace enclave::audit
