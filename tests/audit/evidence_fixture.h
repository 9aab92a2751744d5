// Real attestation inputs for the archived-evidence tests: a synthetic measured boot and a
// quote signed by a test AK (tests/attest/boot_fixture.h, written independently of
// attest/), wrapped in the bundle files a host sends, and a policy on disk whose EK root
// file sits outside the policy's folder ("../roots/root.pem"), so the archive has to
// rebuild a layout with "..".
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "boot_fixture.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/verifier.h"
#include "enclave/audit/evidence_archive.h"

namespace enclave::audit::testing {

constexpr int64_t kIssuedAt = 1767225600;  // 2026-01-01T00:00:00Z

struct SyntheticHost {
  attest_test::Pkey key = attest_test::MakeEcKey();
  attest_test::Pkey ek = attest_test::MakeEcKey();
  std::vector<attest_test::BootEvent> events = attest_test::TypicalBoot();
  std::vector<attest_test::ImaFile> ima = {
      {"/usr/bin/enclave-train", attest_test::Sha256(attest_test::StrBytes("trainer v1"))},
      {"/usr/lib/modules/nvidia.ko", attest_test::Sha256(attest_test::StrBytes("driver 550"))}};
  std::vector<uint32_t> quoted = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  uint64_t clock = 1000;

  attest_test::Bytes AkTpmt() const { return attest_test::EncodeAkPublic(key.get()); }

  std::string EnrolmentBundle() const {
    attest::EnrolmentBundle b;
    attest_test::Be ek_pub, ak_pub, name;
    ek_pub.tpm2b(attest_test::EncodeAkPublic(ek.get()));
    ak_pub.tpm2b(AkTpmt());
    name.u16(0x000B).raw(attest_test::Sha256(AkTpmt()));
    b.ek_public = ek_pub.b;
    b.ak_public = ak_pub.b;
    b.ak_name = name.b;
    b.created_at = kIssuedAt - 86400;
    return attest::EncodeEnrolmentBundle(b);
  }

  // Evidence answering `nonce` (and binding `bound`, when set).
  std::string EvidenceBundle(const std::vector<uint8_t>& nonce,
                             const std::optional<crypto::Digest256>& bound = std::nullopt) const {
    using namespace attest_test;
    attest::EvidenceBundle b;
    b.nonce = nonce;
    b.bound_digest = bound;
    Be name;
    name.u16(0x000B).raw(Sha256(AkTpmt()));
    b.ak_name = name.b;
    attest::PcrBankSelection sel;
    sel.hash = 0x000B;
    for (uint32_t i : quoted) sel.select |= 1u << i;
    b.pcr_selection.banks.push_back(sel);
    auto boot = BootPcrs(events, 0x000B);
    Bytes concat;
    for (uint32_t i : quoted) {
      Bytes v = i == 10 ? ImaPcr10Sha256(ima) : boot.count(i) ? boot[i] : Bytes(32, 0);
      b.pcrs[0x000B][i] = v;
      concat = Cat(concat, v);
    }
    AttestFields f;
    auto qd = attest::QualifyingData(nonce, bound);
    if (!qd.ok()) throw std::runtime_error(qd.status().ToString());
    f.extra.assign(qd->begin(), qd->end());
    f.clock = clock;
    f.sel = {{0x000B, quoted}};
    f.pcr_digest = Sha256(concat);
    b.attest = EncodeAttest(f);
    b.signature = SignAttest(key.get(), b.attest);
    b.event_log = EncodeBootLog(events);
    b.ima_log = ImaLogText(ima);
    b.created_at = kIssuedAt + 5;
    return attest::EncodeEvidenceBundle(b);
  }
};

// The policy the synthetic host meets, as a file: DIR/policies/<name>.json, EK root in
// DIR/roots/root.pem.
inline nlohmann::json PolicyJson() {
  using namespace attest_test;
  nlohmann::json pcrs = nlohmann::json::array();
  for (int i = 0; i <= 10; ++i) pcrs.push_back(i);
  return {
      {"version", 1},
      {"name", "audit-evidence-test"},
      {"quote_pcrs", {{"sha256", pcrs}}},
      {"ek_roots", {{"files", {"../roots/root.pem"}}}},
      {"max_evidence_age_s", 300},
      {"event_log", {{"required", true}, {"exempt_pcrs", {10}}}},
      {"secure_boot", true},
      {"boot_applications", {{"sha256", {Hex(Sha256(StrBytes("shim image"))), Hex(Sha256(StrBytes("grub image")))}}}},
      {"kernel_cmdlines", {"/vmlinuz-6.1 root=/dev/sda1 ro"}},
      {"ima",
       {{"required", true},
        {"files", {{"/usr/bin/enclave-train", {{"digests", {"sha256:" + Hex(Sha256(StrBytes("trainer v1")))}}}}}}}},
  };
}

inline std::string WritePolicy(const std::filesystem::path& dir, const std::string& name, const nlohmann::json& j) {
  if (!std::filesystem::exists(dir / "roots" / "root.pem")) {
    attest_test::WriteFile((dir / "roots" / "root.pem").string(), attest_test::SelfSignedPem("Audit Test EK Root"));
  }
  const std::string path = (dir / "policies" / (name + ".json")).string();
  attest_test::WriteFile(path, j.dump(2) + "\n");
  return path;
}

inline std::vector<uint8_t> TestNonce(uint8_t fill = 0x42) { return std::vector<uint8_t>(16, fill); }

// Inputs of one appraisal by "the broker" for `host`, reading the policy from `policy_path`.
inline VerdictInputs MakeInputs(const SyntheticHost& host, const std::string& policy_path) {
  VerdictInputs in;
  in.actor = "broker@tenant";
  in.host = "gpu-host-7";
  in.job_digest = std::string(64, 'c');
  std::ifstream f(policy_path, std::ios::binary);
  in.policy.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  in.policy_dir = std::filesystem::path(policy_path).parent_path().string();
  in.context.nonce = TestNonce();
  in.context.nonce_issued_at = kIssuedAt;
  in.context.appraised_at = kIssuedAt + 30;
  in.enrolment_bundle = host.EnrolmentBundle();
  in.evidence_bundle = host.EvidenceBundle(in.context.nonce);
  return in;
}

}  // namespace enclave::audit::testing
