// The one conversion of OpenSSL's error queue into text: "CALL failed: <reason>", and
// the queue is cleared so a later call does not report a stale error.
#pragma once

#include <string>
#include <string_view>

namespace enclave::crypto {

std::string OpenSslError(std::string_view call);

}  // namespace enclave::crypto
