// libFuzzer target: IMA ima-ng ASCII log parser and PCR 10 replay. Invariants: no crash;
// every parsed entry is PCR 10 with a file digest of its algorithm's size and template
// data that hashes to its template hash (or is a violation); a replay compared with
// itself passes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "enclave/attest/ima_log.h"

using namespace enclave;
using namespace enclave::attest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (uint16_t th : {alg::kSha1, alg::kSha256}) {
    auto log = ParseImaLog(text, th);
    if (!log.ok()) continue;
    for (const ImaEntry& e : log->entries) {
      if (e.pcr != kImaPcr || e.file_digest.size() != HashSize(e.file_digest_alg)) std::abort();
      if (!e.violation && *Hash(th, {e.template_data}) != e.template_hash) std::abort();
    }
    auto pcr = ReplayImaLog(*log, alg::kSha256);
    if (!pcr.ok()) std::abort();
    PcrValues quoted;
    quoted[alg::kSha256][kImaPcr] = *pcr;
    if (!CompareImaWithQuote(*log, quoted, true).ok()) std::abort();
  }
  return 0;
}
