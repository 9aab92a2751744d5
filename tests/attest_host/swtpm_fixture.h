// A fresh swtpm (TPM 2.0 simulator) for one test: a new state directory, manufactured by
// swtpm_setup with an RSA and an ECC EK, EK certificates and a platform certificate issued
// by a local CA made fresh for this fixture (in the temporary directory, nothing in /var
// or /etc), then `swtpm socket` on two free adjacent loopback ports (the swtpm TCTI needs
// the control channel on port+1). The destructor stops swtpm and removes the directory.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "enclave/common/status.h"

namespace enclave::testing {

class SwtpmFixture {
 public:
  // True when swtpm, swtpm_setup and swtpm_localca are installed (the only reason a TPM
  // test may skip).
  static bool Installed();
  // `ca_dir`: the local CA's folder, shared by every instance started with it (a fleet
  // whose EKs one manufacturer CA certified); empty: a CA of this instance's own.
  static Result<std::unique_ptr<SwtpmFixture>> Start(const std::string& ca_dir = "");
  ~SwtpmFixture();
  SwtpmFixture(const SwtpmFixture&) = delete;
  SwtpmFixture& operator=(const SwtpmFixture&) = delete;

  // "swtpm:host=127.0.0.1,port=P", for Tss2_TctiLdr_Initialize and TPM2TOOLS_TCTI.
  const std::string& tcti() const { return tcti_; }
  int port() const { return port_; }
  // The local CA's root certificate: the EK root a verifier would trust.
  std::string ca_root_cert() const { return ca_dir_ + "/swtpm-localca-rootca-cert.pem"; }
  // The intermediate that signed the EK certificates (chains to ca_root_cert()).
  std::string ca_issuer_cert() const { return ca_dir_ + "/issuercert.pem"; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  // Stops swtpm (SIGTERM, then SIGKILL after 5 s); idempotent.
  void Stop();

 private:
  SwtpmFixture() = default;
  std::string ca_dir_;
  Status Manufacture();
  Status Launch();

  std::string dir_;
  std::string tcti_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace enclave::testing
