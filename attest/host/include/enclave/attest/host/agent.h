// The host's part of attestation, on top of tpm.h: where the measurement logs are read
// from, the state directory that keeps the attestation key, and the three host operations
// of `enclave-attest` (enrol, answer a credential challenge, make an evidence bundle).
// The bundles are defined in attest/bundle.h and docs/formats/evidence.md.
//
// State directory (created with mode 0700; files 0600, written atomically):
//   ak.json         the AK: its TPM2B_PUBLIC, name, and TPM2B_PRIVATE as TPM2_Create returned
//                   it (sensitive part encrypted by the EK's storage key: it loads only under
//                   this TPM's EK, and the key never exists in the clear outside the TPM);
//                   the EK and AK types. Format "enclave-attest host ak v1".
//   enrolment.json  the enrolment bundle this host sent.
//   last_clock.json the last clock info `enclave-attest check` accepted (verifier side).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "enclave/attest/bundle.h"
#include "enclave/attest/request_signature.h"
#include "enclave/attest/host/tpm.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::attest::host {

// Where Linux exposes the logs (securityfs; root only).
inline constexpr char kDefaultEventLogPath[] = "/sys/kernel/security/tpm0/binary_bios_measurements";
inline constexpr char kDefaultImaLogPath[] = "/sys/kernel/security/ima/ascii_runtime_measurements";
// The resource-managed TPM device, and the file scripts/swtpm-start writes its TCTI to
// (relative to the working directory: the repository root for the scripts).
inline constexpr char kTpmDevice[] = "/dev/tpmrm0";
inline constexpr char kSwtpmTctiFile[] = "out/swtpm/tcti";

// The TCTI to use when none is given: "device:/dev/tpmrm0" when that device exists, else
// the TCTI string in `swtpm_tcti_file` when that file exists, else NotFound saying both.
Result<std::string> DefaultTcti(const std::string& tpm_device = kTpmDevice,
                                const std::string& swtpm_tcti_file = kSwtpmTctiFile);

struct LogPaths {
  std::string event_log = kDefaultEventLogPath;
  std::string ima_log = kDefaultImaLogPath;
};
struct HostLogs {
  std::vector<uint8_t> event_log;  // empty when the file does not exist
  std::string ima_log;             // empty when the file does not exist
  bool operator==(const HostLogs&) const = default;
};
// Reads both logs to EOF (securityfs files report size 0, so the size is not trusted). A
// missing file gives an empty log (a host without measured boot or IMA); a file that
// exists but cannot be read, or is over the limits, is an error naming it.
Result<HostLogs> ReadHostLogs(const LogPaths& paths);

struct StoredAk {
  EkType ek_type = EkType::kRsa2048;
  AkType ak_type = AkType::kEccP256;
  AkBlob blob;
};

class HostState {
 public:
  // Opens (and with `create`, makes, mode 0700) the state directory.
  static Result<HostState> Open(const std::string& dir, bool create);
  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  bool HasAk() const;
  Result<StoredAk> LoadAk() const;
  Status SaveAk(const StoredAk& ak) const;
  Result<EnrolmentBundle> LoadEnrolment() const;
  Status SaveEnrolment(const EnrolmentBundle& bundle) const;
  // nullopt when no clock info was accepted yet.
  Result<std::optional<ClockInfo>> LoadLastClock() const;
  Status SaveLastClock(const ClockInfo& clock) const;

 private:
  explicit HostState(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Writes `data` to `path` atomically (temporary file, fsync, rename), mode 0600.
Status WriteFileAtomically(const std::string& path, std::string_view data, bool allow_overwrite);

// Development and tests on a software TPM only (docs/formats/evidence.md, "Simulated IMA"):
// what the kernel's IMA does when it measures a file. Appends the ima-ng line of `file`'s
// SHA-256 under the name `logged_path` (SHA-256 template hash) to the log at `log_path`
// and extends that template hash into PCR 10 of the SHA-256 bank. On a real host the
// kernel alone writes PCR 10 and the log; `enclave-attest ima-simulate` refuses TPM devices.
Status SimulateImaMeasurement(Tpm& tpm, const std::string& file, const std::string& logged_path,
                              const std::string& log_path);

struct EnrollOptions {
  // nullopt: ECC P-256 when the TPM has that EK certificate (its EK is re-created for every
  // quote, about 8x faster than RSA-2048 on swtpm), else RSA-2048 when it has that one.
  std::optional<EkType> ek_type;
  AkType ak_type = AkType::kEccP256;
  bool force = false;  // replace an existing AK (AlreadyExists otherwise)
};

// Creates the EK (default template) and a fresh AK under it, reads every EK certificate
// index the TPM has (RSA 0x01C00002, ECC 0x01C0000A, ECC P-384 0x01C00016), stores the AK
// and the bundle in `state`, and returns the bundle.
Result<EnrolmentBundle> Enroll(Tpm& tpm, const HostState& state, const EnrollOptions& options, int64_t now);

// TPM2_ActivateCredential of a verifier's challenge with the stored AK. InvalidInput when
// the challenge names another AK; AuthFailed when the TPM refuses it (not for this EK/AK).
Result<ActivationResponse> Activate(Tpm& tpm, const HostState& state, const ChallengeBundle& challenge);

// Where MakeEvidence reads the logs; called before and after the quote.
using LogSource = std::function<Result<HostLogs>()>;

// A quote of `selection` with qualifying data QualifyingData(nonce, bound_digest)
// (verifier.h), the PCR values, and the logs. The PCRs are read before and after the quote
// and the logs before and after; when anything changed in between (a measurement landed
// during the quote) it starts again, at most 5 times, then Unavailable.
Result<EvidenceBundle> MakeEvidence(Tpm& tpm, const HostState& state, const attest::PcrSelection& selection,
                                    ByteSpan nonce, const std::optional<crypto::Digest256>& bound_digest,
                                    const LogSource& logs, int64_t now);

// A nonce request for `host_id` signed with the stored AK (attest/request_signature.h): a
// fresh random salt, and a quote of PCR 0 of the SHA-256 bank (its value means nothing
// here) with qualifying data NonceRequestQualifyingData(host_id, salt).
Result<SignedNonceRequest> SignNonceRequest(Tpm& tpm, const HostState& state, std::string_view host_id);

// host::PcrSelection (the Tpm API's form) of a verifier-side selection.
host::PcrSelection ToHostSelection(const attest::PcrSelection& selection);

}  // namespace enclave::attest::host
