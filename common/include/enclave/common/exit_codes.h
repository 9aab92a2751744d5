// Process exit codes of every enclave-* binary. Append-only: scripts and monitoring
// depend on these numbers. Documented in docs/exit-codes.md.
#pragma once

#include "enclave/common/status.h"

namespace enclave {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,           // a bug; please report
  kExitUsage = 2,              // bad command line
  kExitInvalidInput = 3,       // malformed input file or value
  kExitAuthFailed = 4,         // authentication failed: tampered, truncated, wrong key
  kExitPermissionDenied = 5,   // wrong passphrase, refused by policy
  kExitNotFound = 6,           // a file, key or entry does not exist
  kExitAlreadyExists = 7,      // refusing to overwrite
  kExitFailedPrecondition = 8, // state does not allow it
  kExitUnsupported = 9,        // unknown format version, suite or feature
  kExitUnavailable = 10,       // service or device unreachable
  kExitIo = 11,                // read, write or sync failed
  kExitPolicyDenied = 12,      // attestation: evaluated, and the policy says no
  kExitNotEvaluated = 13,      // attestation: could not evaluate (bad evidence file, policy, TPM error)
  kExitVerdictDiffers = 14,    // audit: a recomputed attestation verdict differs from the recorded one
  kExitInterrupted = 15,       // stopped by SIGINT or SIGTERM at a safe point (enclave-train: after a step)
};

int ExitCodeFor(const Status& status);

}  // namespace enclave
