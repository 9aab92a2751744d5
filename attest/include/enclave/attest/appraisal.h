// The outcome of an appraisal: every check that ran, and for each failure a
// machine-readable reason {check, where, expected, got}, as Keylime reports
// (`component.check.reason`, e.g. "quote.extra_data.mismatch").
//
// Fail-closed: an Appraisal passes only when it has at least one passed check and no
// failure. A Status error from an appraisal function means "could not evaluate" (bad
// arguments from the caller, an OpenSSL failure), never "pass".
#pragma once

#include <map>
#include <string>
#include <vector>

namespace enclave::attest {

struct Finding {
  std::string check;     // "quote.extra_data.mismatch"
  std::string where;     // "sha256 PCR 7", "event 12", "" when not applicable
  std::string expected;  // what the verifier required (hex for bytes)
  std::string got;       // what the evidence had
};

// A check the evidence could not support (an AK known only by its public key has no
// attributes to check): neither passed nor failed, and listed so that it is never mistaken
// for a pass. Only evidence forms the policy accepts explicitly produce these.
struct NotEvaluatedCheck {
  std::string check;  // "ak.attributes"
  std::string why;    // "the AK is a bare public key: no TPMA_OBJECT"
};

class Appraisal {
 public:
  void Pass(std::string check) { passed_.push_back(std::move(check)); }
  void NotEvaluated(std::string check, std::string why) {
    not_evaluated_.push_back({std::move(check), std::move(why)});
  }
  void Fail(std::string check, std::string where, std::string expected, std::string got) {
    failures_.push_back({std::move(check), std::move(where), std::move(expected), std::move(got)});
  }
  void Merge(const Appraisal& other);

  bool ok() const { return failures_.empty() && !passed_.empty(); }
  const std::vector<std::string>& passed() const { return passed_; }
  const std::vector<Finding>& failures() const { return failures_; }
  const std::vector<NotEvaluatedCheck>& not_evaluated() const { return not_evaluated_; }
  // True when some failure's check equals `check`.
  bool Failed(const std::string& check) const;
  // "quote.extra_data.mismatch (expected ab.., got cd..); ..." for logs and tests.
  std::string Summary() const;

 private:
  std::vector<std::string> passed_;
  std::vector<Finding> failures_;
  std::vector<NotEvaluatedCheck> not_evaluated_;
};

// Quoted or replayed PCR values: bank (hash alg id) -> PCR index -> value.
using PcrValues = std::map<uint16_t, std::map<uint32_t, std::vector<uint8_t>>>;

}  // namespace enclave::attest
