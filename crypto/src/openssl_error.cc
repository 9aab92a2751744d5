#include "enclave/crypto/openssl_error.h"

#include <openssl/err.h>

namespace enclave::crypto {

std::string OpenSslError(std::string_view call) {
  unsigned long e = ERR_get_error();
  char buf[256] = "no OpenSSL error queued";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return std::string(call) + " failed: " + buf;
}

}  // namespace enclave::crypto
