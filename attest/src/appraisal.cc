#include "enclave/attest/appraisal.h"

namespace enclave::attest {

void Appraisal::Merge(const Appraisal& other) {
  passed_.insert(passed_.end(), other.passed_.begin(), other.passed_.end());
  failures_.insert(failures_.end(), other.failures_.begin(), other.failures_.end());
  not_evaluated_.insert(not_evaluated_.end(), other.not_evaluated_.begin(), other.not_evaluated_.end());
}

bool Appraisal::Failed(const std::string& check) const {
  for (const auto& f : failures_) {
    if (f.check == check) return true;
  }
  return false;
}

std::string Appraisal::Summary() const {
  if (failures_.empty())
    return passed_.empty() ? "no check ran" : "pass (" + std::to_string(passed_.size()) + " checks)";
  std::string s;
  for (const auto& f : failures_) {
    if (!s.empty()) s += "; ";
    s += f.check;
    if (!f.where.empty()) s += " [" + f.where + "]";
    s += " (expected " + f.expected + ", got " + f.got + ")";
  }
  return s;
}

}  // namespace enclave::attest
