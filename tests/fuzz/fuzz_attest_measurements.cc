// libFuzzer target: the semantic reading of a boot event log (attest/measurements.h):
// UEFI_VARIABLE_DATA, separators, GRUB command lines, boot applications, the Secure Boot
// rules, over both the copying (ParseEventLog) and the copy-free (ParseEventLogView) parse.
// Invariants: no crash; both parses accept the same inputs, replay to the same PCRs and
// read the same measurements; a variable that parses re-encodes to the input.
#include <cstdint>
#include <cstdlib>

#include "enclave/attest/event_log.h"
#include "enclave/attest/measurements.h"

using namespace enclave;
using namespace enclave::attest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteSpan in(data, size);
  auto var = ParseUefiVariable(in);
  if (var.ok()) {
    // Header 32 bytes + 2 per name character + the data: exact.
    if (32 + 2 * var->name.size() + var->data.size() != size) std::abort();
  }
  auto log = ParseEventLog(in);
  auto view = ParseEventLogView(in);
  if (log.ok() != view.ok()) std::abort();
  if (!log.ok()) return 0;
  if (log->events.size() != view->events.size() || log->banks != view->banks) std::abort();
  auto r1 = ReplayEventLog(*log);
  auto r2 = ReplayEventLog(*view);
  if (r1.ok() != r2.ok()) std::abort();
  if (r1.ok() && r1->pcrs != r2->pcrs) std::abort();
  Measurements a = ReadMeasurements(*log), b = ReadMeasurements(*view);
  if (a.kernel_cmdlines.size() != b.kernel_cmdlines.size() || a.boot_applications.size() != b.boot_applications.size() ||
      a.secure_boot.config.size() != b.secure_boot.config.size() || a.separators != b.separators ||
      a.problems.size() != b.problems.size()) {
    std::abort();
  }
  if (CheckSecureBoot(a).ok() != CheckSecureBoot(b).ok()) std::abort();
  return 0;
}
