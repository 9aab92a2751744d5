// libFuzzer target: TCG event-log parser (crypto-agile and legacy) and replay.
// Invariants: no crash; every crypto-agile event carries exactly the header's banks with
// their sizes; a replay compared with its own values passes.
#include <cstdint>
#include <cstdlib>

#include "enclave/attest/event_log.h"

using namespace enclave;
using namespace enclave::attest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto log = ParseEventLog(ByteSpan(data, size));
  if (!log.ok()) return 0;
  for (const Event& e : log->events) {
    if (e.pcr >= 24 && e.type != ev::kNoAction) std::abort();  // EV_NO_ACTION may name no PCR
    if (log->format == LogFormat::kCryptoAgile && e.index > 0) {
      if (e.digests.size() != log->banks.size()) std::abort();
      for (size_t i = 0; i < e.digests.size(); ++i) {
        if (e.digests[i].alg != log->banks[i] || e.digests[i].digest.size() != HashSize(log->banks[i])) std::abort();
      }
    }
  }
  auto r = ReplayEventLog(*log);
  if (!r.ok() || r->pcrs.empty()) return 0;
  if (!CompareWithQuote(*log, *r, r->pcrs, {}).ok()) std::abort();
  return 0;
}
