// Which witnesses must have cosigned a checkpoint before an auditor (or the broker) accepts
// it: a C2SP tlog-policy file (docs/formats/witness.md, "Witness policy"), and the check of
// a log's cosigned checkpoint against it.
//
//   log <vkey> [<url>]                 the log (Ed25519 note key named by its origin)
//   witness <name> <vkey> [<url>]      a witness (cosignature/v1 key); the URL is its submission prefix
//   group <name> <k>|any|all <name>... k of the members (witnesses or earlier groups)
//   quorum <name>|none                 exactly once
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/audit/cosignature.h"
#include "enclave/audit/note.h"
#include "enclave/audit/tree_head.h"
#include "enclave/audit/verify.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr size_t kMaxPolicyBytes = 64 * 1024;
inline constexpr size_t kMaxPolicyItems = 64;  // logs, witnesses and groups, each

struct PolicyWitness {
  std::string name;  // the policy's name for it (the key has the cosigner's name)
  WitnessPublicKey key;
  std::string url;  // empty when none
};

struct PolicyLog {
  std::string origin;
  PublicKeyBytes key{};
  std::string url;
};

class WitnessPolicy {
 public:
  static Result<WitnessPolicy> Parse(std::string_view text, const std::string& where);
  static Result<WitnessPolicy> Load(const std::string& path);

  const std::vector<PolicyLog>& logs() const { return logs_; }
  const std::vector<PolicyWitness>& witnesses() const { return witnesses_; }
  bool quorum_none() const { return quorum_ == "none"; }
  // Whether the witnesses with these policy names satisfy the quorum.
  bool Satisfied(const std::set<std::string>& cosigned) const;
  // The quorum in words: "2 of {a, b, c}", "all of {x, 1 of {y, z}}", "none".
  std::string Describe() const;

 private:
  struct Group {
    size_t threshold = 0;
    std::vector<std::string> members;
  };
  bool Holds(const std::string& name, const std::set<std::string>& cosigned, std::map<std::string, bool>* memo) const;
  std::string DescribeName(const std::string& name) const;

  std::vector<PolicyLog> logs_;
  std::vector<PolicyWitness> witnesses_;
  std::map<std::string, Group> groups_;
  std::string quorum_;
};

// The policy's witnesses that cosigned `note` (valid cosignature/v1 lines over its text).
// AuthFailed when a line with a policy witness's name and key id does not verify (a note
// with a forged or damaged cosignature is refused whole, as C2SP signed-note advises).
struct CosignedBy {
  std::string name;  // policy name
  std::string cosigner;  // key name
  uint64_t timestamp = 0;
};
Result<std::vector<CosignedBy>> PolicyCosignatures(const WitnessPolicy& policy, const SignedNote& note);

// The newest checkpoint an auditor accepts under a policy: `cosigned_note` (the log's
// checkpoint with witness cosignature lines) must be signed by the log key, name a chained
// head of the verified log (same size and root), and carry cosignatures that satisfy the
// quorum. AuthFailed (a fork, a cut log, too few cosignatures) or InvalidInput, naming `where`.
struct WitnessedCheckpoint {
  SignedTreeHead head;
  std::vector<CosignedBy> cosigned_by;
  std::vector<std::string> not_cosigned;  // policy witnesses without a valid cosignature
  uint64_t unwitnessed_entries = 0;       // entries of the log after the witnessed tree
};
Result<WitnessedCheckpoint> CheckWitnessedCheckpoint(const VerifyResult& log, const LogPublicKey& key,
                                                     const WitnessPolicy& policy, std::string_view cosigned_note,
                                                     const std::string& where);

// CheckWitnessedCheckpoint on the file `path` (`enclave-audit verify --cosigned`, default
// DIR/cosigned-checkpoint): NotFound when there is none, since then nothing is witnessed.
Result<WitnessedCheckpoint> LoadWitnessedCheckpoint(const VerifyResult& log, const LogPublicKey& key,
                                                    const WitnessPolicy& policy, const std::string& path);

// What the auditor was shown, as `verify --json` and the compliance report give it:
// {"cosigned_checkpoint": path, "tree_size", "root", "quorum": policy.Describe(),
//  "cosigned_by": [{"name", "cosigner", "timestamp", "time"}], "not_cosigned_by": [names],
//  "unwitnessed_entries"}.
nlohmann::json WitnessedCheckpointJson(const WitnessedCheckpoint& w, const WitnessPolicy& policy,
                                       const std::string& path);

}  // namespace enclave::audit
