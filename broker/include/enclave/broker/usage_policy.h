// Data-use policies (docs/formats/data-use-policy.md): which datasets a job may receive the
// keys of, for which job kinds and requesters, under which cipher suites, attestation
// policy, lease terms and outputs. A policy is a strict JSON file signed by a compliance
// officer's Ed25519 key (a detached signature file); the broker refuses unsigned or badly
// signed policies, and every decision records the digest of the policy it used.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::broker {

inline constexpr size_t kMaxUsagePolicyBytes = 1u << 20;
// The largest signature file (docs/formats/data-use-policy.md): the verifier, the admin
// activation message and `enclave-broker policy activate` all take this much.
inline constexpr size_t kMaxPolicySignatureBytes = 64u << 10;

// Job kinds the trainer reports: "train" (enclave-train run) and "cv" (enclave-train cv).
struct DatasetRule {
  std::string dataset_id;               // a keystore dataset id
  std::vector<std::string> job_kinds;   // non-empty subset of {"train", "cv"}
  std::vector<std::string> requesters;  // non-empty; "*" allows any requester
  // Approved code, by workload digest (WorkloadDigest in release.h): non-empty, unique.
  // There is no wildcard: a key goes only to code the officer approved.
  std::vector<crypto::Digest256> workloads;
};

// Where released keys may live (the policy's outputs.released_keys).
enum class KeyCustody {
  kProcessMemory,  // "process-memory": only in the attested process's locked memory
  kMayBeWritten,   // "may-be-written": the requester may write them out (development only)
};

struct UsagePolicy {
  std::string policy_id;                      // same charset as dataset ids ("hipaa-medical")
  uint64_t serial = 0;                        // >= 1; activation never goes back to a lower serial
  std::string description;
  crypto::Digest256 attestation_policy_sha256{};  // SHA-256 of the attestation policy file it requires
  std::vector<DatasetRule> datasets;          // non-empty, unique dataset ids
  std::vector<crypto::Suite> cipher_suites;   // non-empty: suites a released DEK may be of
  int64_t lease_s = 0;                        // lease length, 60 .. 86400
  int64_t reattest_interval_s = 0;            // 30 .. lease_s: renew by fresh attestation this often
  uint32_t max_epochs = 0;                    // 1 .. 1000000
  uint32_t max_world_size = 1;                // 1 .. 1024 ranks per job
  std::vector<std::string> clear_metrics;     // metrics allowed to leave in clear (subset of the trainer's)
  bool require_model_export = true;           // the model may leave only encrypted to the export key
  KeyCustody released_keys = KeyCustody::kProcessMemory;
};

// Strict parse (RFC 8259, no duplicate keys, exactly the documented keys and types, every
// range checked); errors are InvalidInput naming the JSON path.
Result<UsagePolicy> ParseUsagePolicy(std::string_view json_text);

// What an attested trainer says about its job (bound into the quote by the release
// request, docs/protocol.md). The attested binary is trusted to report these honestly
// and to keep to them (epochs, outputs).
struct ReleaseClaims {
  std::string job_id;                     // chosen by the job: same charset as dataset ids
  crypto::Digest256 job_digest{};         // SHA-256 of job.toml's bytes
  std::string kind;                       // "train" or "cv"
  std::string requester;                  // the data scientist named in the job
  std::vector<std::string> datasets;      // dataset ids whose keys are asked for
  uint32_t epochs = 0;
  uint32_t world_size = 1;
  std::vector<std::string> clear_metrics; // metrics the job will report in clear
  bool model_export = true;               // the model leaves encrypted to the export key
  crypto::Digest256 workload_digest{};    // WorkloadDigest of the requesting code (release.h)
  bool writes_keys = false;               // the requester writes the released keys out of memory
};

// One reason per rule the request breaks, in a fixed order, each a short sentence naming
// the rule and the value ("dataset 'x' is not in policy 'hipaa-medical'").
struct UsageDecision {
  bool allowed = false;
  std::vector<std::string> reasons;  // empty when allowed
};

// `attestation_policy_sha256`: the digest of the attestation policy the evidence was
// appraised under. `dataset_suites[i]`: the suite of the DEK for claims.datasets[i].
UsageDecision EvaluateRelease(const UsagePolicy& policy, const ReleaseClaims& claims,
                              const crypto::Digest256& attestation_policy_sha256,
                              const std::vector<crypto::Suite>& dataset_suites);

// ---- Signatures -------------------------------------------------------------------------
// Signature input: "enclave data-use policy v1" || 0x00 || SHA-256(policy file bytes).

inline constexpr std::string_view kUsagePolicySignatureLabel = "enclave data-use policy v1";
// The exact bytes that are signed (59 bytes: label, 0x00, the policy file's SHA-256).
std::vector<uint8_t> UsagePolicySignatureInput(const crypto::Digest256& policy_sha256);

inline constexpr size_t kEd25519PublicBytes = 32;
inline constexpr size_t kEd25519SignatureBytes = 64;
using SignerPublicKey = std::array<uint8_t, kEd25519PublicBytes>;

// A compliance officer's signing key. Secret file: "EPOLSK01" || seed[32], mode 0600.
// Public file: JSON {"format":"enclave-policy-signer-public-key","version":1,
// "algorithm":"ed25519","public_key":HEX}.
class PolicySignerKey {
 public:
  static Result<PolicySignerKey> Generate();
  // From a 32-byte Ed25519 seed (libsodium crypto_sign_seed_keypair): test vectors, fuzzing.
  static Result<PolicySignerKey> FromSeed(const crypto::SecretBytes& seed);
  static Result<PolicySignerKey> Load(const std::string& path);
  Status Save(const std::string& secret_path) const;  // never overwrites
  const SignerPublicKey& public_key() const { return public_; }

 private:
  crypto::SecretBytes secret_;  // libsodium's 64-byte form: seed || public key
  SignerPublicKey public_{};
  friend Result<std::string> SignUsagePolicy(std::string_view, const PolicySignerKey&);
};

std::string EncodeSignerPublicKey(const SignerPublicKey& key);
Result<SignerPublicKey> ParseSignerPublicKey(std::string_view text);
Result<SignerPublicKey> LoadSignerPublicKey(const std::string& path);
Status SaveSignerPublicKey(const std::string& path, const SignerPublicKey& key);  // never overwrites

// The detached signature file's text: JSON {"format":"enclave-data-use-policy-signature",
// "version":1,"policy_sha256":HEX,"signer":HEX public key,"signature":HEX}. Refuses
// (InvalidInput) to sign bytes that ParseUsagePolicy refuses.
Result<std::string> SignUsagePolicy(std::string_view policy_bytes, const PolicySignerKey& key);

struct VerifiedPolicy {
  UsagePolicy policy;
  crypto::Digest256 digest{};  // SHA-256 of the policy file bytes
  SignerPublicKey signer{};
};
// Parses the signature file strictly, checks that its policy_sha256 is the digest of
// `policy_bytes`, that the signer is one of `trusted_signers`, and the Ed25519 signature;
// then parses the policy. kAuthFailed for a signature that does not verify or an untrusted
// signer; kInvalidInput for malformed files.
Result<VerifiedPolicy> VerifyUsagePolicy(std::string_view policy_bytes, std::string_view signature_text,
                                         const std::vector<SignerPublicKey>& trusted_signers);

}  // namespace enclave::broker
