// BENCHMARK BASELINE ONLY. A record layer that neither encrypts nor authenticates: the
// sender writes header || payload straight from the caller's buffer, the receiver reads
// the payload straight into it (what a plaintext transport does). It measures what the
// AEAD and the staging copy cost. Lives outside the plugin's sources; the plugin never
// links it and offers no switch to select it.
#pragma once

#include "transport.h"

namespace enclave::net::testing {

const RecordProtection& PlaintextProtectionForBenchmarkOnly();

}  // namespace enclave::net::testing
