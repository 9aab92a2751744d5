// libFuzzer target: the readers of stored bytes behind `enclave-audit evidence verify`.
// The input is tried as a log entry (ParseEntry, then VerdictRecordFromEntry: the archived
// inputs of an attestation.verdict), as an archived verdict document (ParseVerdictJson)
// and as a policy_files path (CheckArchivedPath). Invariants: no crash; a verdict record
// names only paths CheckArchivedPath accepts; a verdict document that parses survives
// VerdictJson and parses again to the same document; an accepted path is its own
// lexical normal form, so the layout built from it is the one the broker saw.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "enclave/attest/verifier.h"
#include "enclave/audit/event.h"
#include "enclave/audit/evidence_archive.h"

using namespace enclave;
using namespace enclave::audit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ByteSpan all(data, size);
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto entry = ParseEntry(all);
  if (entry.ok()) {
    auto record = VerdictRecordFromEntry(*entry);
    if (record.ok()) {
      for (const ArchivedFile& f : record->policy_files) {
        if (!CheckArchivedPath(f.path).ok()) std::abort();
      }
      if (record->context.nonce.empty() || record->context.nonce.size() > 32) std::abort();
      if (record->context.appraised_at <= 0 || record->context.nonce_issued_at <= 0) std::abort();
    }
  }

  auto doc = ParseVerdictJson(text);
  if (doc.ok()) {
    attest::Verdict v;
    for (const std::string& c : doc->passed) v.appraisal.Pass(c);
    for (const attest::Finding& f : doc->failures) v.appraisal.Fail(f.check, f.where, f.expected, f.got);
    if (v.passed() != doc->pass) std::abort();
    auto again = ParseVerdictJson(attest::VerdictJson(v));
    if (!again.ok() || again->pass != doc->pass || again->passed != doc->passed ||
        again->failures.size() != doc->failures.size()) {
      std::abort();
    }
    for (size_t i = 0; i < doc->failures.size(); ++i) {
      const auto &a = again->failures[i], &b = doc->failures[i];
      if (a.check != b.check || a.where != b.where || a.expected != b.expected || a.got != b.got) std::abort();
    }
  }

  if (size <= 512 && CheckArchivedPath(text).ok()) {
    if (std::filesystem::path(std::string(text)).lexically_normal().generic_string() != text) std::abort();
  }
  return 0;
}
