// `enclave-attest` end to end against swtpm, as separate processes with real files:
// a simulated measured boot (a synthetic crypto-agile event log and an ima-ng log whose
// events are extended into swtpm's PCRs) goes through enroll -> challenge -> activate ->
// confirm -> quote -> verify and passes; then each tampering is refused with its finding
// and exit code 12, and unusable input is exit 13. Interop with tpm2-tools: our quotes
// pass tpm2_checkquote, tpm2_quote's quotes pass `enclave-attest verify`, and our
// challenges activate with tpm2_activatecredential.
#include <openssl/evp.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "boot_fixture.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/credential.h"
#include "enclave/attest/host/tpm.h"
#include "swtpm_fixture.h"
#include "test_util.h"

#ifndef ENCLAVE_ATTEST_BIN
#error "ENCLAVE_ATTEST_BIN must name the enclave-attest binary"
#endif

namespace enclave::attest {
namespace {

using testing::Bytes;
using testing::Hex;
using testing::SwtpmFixture;

constexpr int kExitPolicyDenied = 12;
constexpr int kExitNotEvaluated = 13;

std::string ReadString(const std::string& path) {
  Bytes b = testing::ReadFileBytes(path);
  return std::string(b.begin(), b.end());
}
void WriteString(const std::string& path, const std::string& s) { testing::WriteFileBytes(path, Bytes(s.begin(), s.end())); }

// The qualifying data as docs/formats/evidence.md defines it, computed here with OpenSSL
// (not with the library): SHA-256("enclave-attest quote v1" || 00 || u8 len || nonce ||
// bound digest or 32 zero bytes).
Bytes QualifyingDataHere(const Bytes& nonce, const Bytes& bound) {
  std::string label = "enclave-attest quote v1";
  Bytes m(label.begin(), label.end());
  m.push_back(0);
  m.push_back(static_cast<uint8_t>(nonce.size()));
  m.insert(m.end(), nonce.begin(), nonce.end());
  Bytes b = bound.empty() ? Bytes(32, 0) : bound;
  m.insert(m.end(), b.begin(), b.end());
  return testing::Sha(EVP_sha256(), m);
}

// One swtpm for the whole suite, with the measured boot extended once.
class EnclaveAttestCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!SwtpmFixture::Installed()) return;
    auto f = SwtpmFixture::Start();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fixture_ = std::move(f).value().release();
    const std::string dir = fixture_->dir();
    boot_ = new std::vector<attest_test::BootEvent>(attest_test::TypicalBoot());
    ima_ = new std::vector<attest_test::ImaFile>{
        {"/usr/bin/enclave-train", testing::Sha(EVP_sha256(), {'t', 'r', 'a', 'i', 'n'})},
        {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", testing::Sha(EVP_sha256(), {'c', 'u', 'd', 'a'})}};
    testing::WriteFileBytes(dir + "/boot.log", attest_test::EncodeBootLog(*boot_));
    WriteString(dir + "/ima.log", attest_test::ImaLogText(*ima_));

    // Extend exactly those events into swtpm: every bank of every event, then PCR 10 with
    // the IMA template hashes (SHA-1 as logged; SHA-256 of the template data).
    auto tpm = host::Tpm::Open(fixture_->tcti());
    ASSERT_TRUE(tpm.ok()) << tpm.status().ToString();
    for (const auto& e : *boot_) {
      if (!e.extend) continue;
      const Bytes& measured = e.measured ? *e.measured : e.data;
      ASSERT_TRUE((*tpm)->ExtendPcr(e.pcr, 0x0004, testing::Sha(EVP_sha1(), measured)).ok());
      ASSERT_TRUE((*tpm)->ExtendPcr(e.pcr, 0x000B, testing::Sha(EVP_sha256(), measured)).ok());
    }
    for (const auto& f2 : *ima_) {
      Bytes data = attest_test::ImaTemplateData(f2);
      ASSERT_TRUE((*tpm)->ExtendPcr(10, 0x0004, testing::Sha(EVP_sha1(), data)).ok());
      ASSERT_TRUE((*tpm)->ExtendPcr(10, 0x000B, testing::Sha(EVP_sha256(), data)).ok());
    }
    // The fixture computed the PCR values independently: swtpm must agree.
    auto pcrs = (*tpm)->ReadPcrs({{0x000B, {0, 4, 7, 10}}});
    ASSERT_TRUE(pcrs.ok()) << pcrs.status().ToString();
    auto expected = attest_test::BootPcrs(*boot_, 0x000B);
    EXPECT_EQ(Hex((*pcrs)[0].digest), Hex(expected[0]));
    EXPECT_EQ(Hex((*pcrs)[2].digest), Hex(expected[7]));
    EXPECT_EQ(Hex((*pcrs)[3].digest), Hex(attest_test::ImaPcr10Sha256(*ima_)));

    WritePolicy(dir + "/policy.json", "[\"" + fixture_->ca_root_cert() + "\"]", "[\"" + fixture_->ca_issuer_cert() + "\"]");
    // A CA nobody trusts, for the untrusted-EK-root case.
    attest_test::WriteFile(dir + "/untrusted-root.pem", attest_test::SelfSignedPem("Untrusted TPM Vendor"));
    WritePolicy(dir + "/policy-untrusted.json", "[\"" + dir + "/untrusted-root.pem\"]", "[]");
  }
  static void TearDownTestSuite() {
    delete fixture_;
    fixture_ = nullptr;
    delete boot_;
    delete ima_;
  }

  static void WritePolicy(const std::string& path, const std::string& roots, const std::string& intermediates) {
    const std::string train = Hex((*ima_)[0].sha256);
    WriteString(path, R"({
  "version": 1,
  "name": "enclave-attest CLI test",
  "quote_pcrs": {"sha256": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]},
  "ek_roots": {"files": )" + roots + R"(, "intermediates": )" + intermediates + R"(},
  "max_evidence_age_s": 300,
  "event_log": {"required": true, "exempt_pcrs": [10]},
  "secure_boot": true,
  "kernel_cmdlines": ["/vmlinuz-6.1 root=/dev/sda1 ro"],
  "ima": {"required": true, "files": {"/usr/bin/enclave-train": {"digests": ["sha256:)" + train + R"("]}}}
}
)");
  }

  void SetUp() override {
    if (fixture_ == nullptr) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
    work_ = fixture_->dir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(work_);
    std::filesystem::create_directories(work_);
  }

  std::string P(const std::string& name) const { return work_ + "/" + name; }
  static std::string Dir(const std::string& name) { return fixture_->dir() + "/" + name; }

  testing::ToolRun Cli(std::vector<std::string> args) {
    args.insert(args.begin(), ENCLAVE_ATTEST_BIN);
    return testing::RunTool(args, P("cli-" + std::to_string(++runs_) + ".log"));
  }
  // Host verbs get the fixture's TPM and this test's state directory.
  testing::ToolRun Host(std::vector<std::string> args, const std::string& state = "state") {
    args.push_back("--tcti");
    args.push_back(fixture_->tcti());
    args.push_back("--state");
    args.push_back(P(state));
    return Cli(std::move(args));
  }

  // enroll -> challenge -> activate -> confirm; expects every step to pass.
  void EnrolAndActivate(const std::string& state, const std::string& policy) {
    auto e = Host({"enroll", "--out", P(state + "-enrolment.json")}, state);
    ASSERT_EQ(e.exit_code, 0) << e.output;
    auto c = Cli({"challenge", "--enrolment", P(state + "-enrolment.json"), "--policy", policy, "--out",
                  P(state + "-challenge.json")});
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_NE(c.output.find("\"verdict\":\"pass\""), std::string::npos) << c.output;
    EXPECT_NE(c.output.find("\"ek.cert.chain\""), std::string::npos) << c.output;
    auto a = Host({"activate", "--challenge", P(state + "-challenge.json"), "--out", P(state + "-response.json")}, state);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto k = Cli({"confirm", "--challenge", P(state + "-challenge.json"), "--response", P(state + "-response.json"),
                  "--enrolment", P(state + "-enrolment.json")});
    ASSERT_EQ(k.exit_code, 0) << k.output;
    EXPECT_NE(k.output.find("\"activation.secret\""), std::string::npos) << k.output;
  }

  testing::ToolRun Quote(const std::string& nonce, const std::string& out, const std::string& state = "state") {
    return Host({"quote", "--nonce", nonce, "--policy", Dir("policy.json"), "--out", out, "--event-log",
                 Dir("boot.log"), "--ima-log", Dir("ima.log")},
                state);
  }
  testing::ToolRun Verify(const std::string& evidence, const std::string& nonce, const std::string& ak,
                          std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"verify", "--evidence", evidence, "--policy", Dir("policy.json"),
                                     "--nonce", nonce, "--ak", ak};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  }
  static bool HasFinding(const testing::ToolRun& r, const std::string& check) {
    return r.output.find("\"check\":\"" + check) != std::string::npos;
  }

  EvidenceBundle LoadEvidence(const std::string& path) {
    auto b = ParseEvidenceBundle(ReadString(path));
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? *b : EvidenceBundle{};
  }

  static SwtpmFixture* fixture_;
  static std::vector<attest_test::BootEvent>* boot_;
  static std::vector<attest_test::ImaFile>* ima_;
  std::string work_;
  int runs_ = 0;
};
SwtpmFixture* EnclaveAttestCliTest::fixture_ = nullptr;
std::vector<attest_test::BootEvent>* EnclaveAttestCliTest::boot_ = nullptr;
std::vector<attest_test::ImaFile>* EnclaveAttestCliTest::ima_ = nullptr;

const char kNonce[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

TEST_F(EnclaveAttestCliTest, MeasuredBootFlowVerifiesAndEachTamperingIsRefused) {
  ASSERT_NO_FATAL_FAILURE(EnrolAndActivate("state", Dir("policy.json")));
  const std::string ev = P("evidence.json"), ak = P("state-enrolment.json");
  auto q = Quote(kNonce, ev);
  ASSERT_EQ(q.exit_code, 0) << q.output;

  // The whole flow passes, with the log, Secure Boot, command-line and IMA checks in it.
  auto ok = Verify(ev, kNonce, ak, {"--clock-state", P("clock.json")});
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  for (const char* check : {"\"quote.signature\"", "\"quote.extra_data\"", "\"quote.pcr_digest\"", "\"eventlog.pcrs\"",
                            "\"secureboot.enabled\"", "\"cmdline\"", "\"ima.pcr\"", "\"ima.files\""}) {
    EXPECT_NE(ok.output.find(check), std::string::npos) << check << " not in " << ok.output;
  }
  EXPECT_EQ(ok.output.find("\"failures\":[]"), ok.output.find("\"failures\""));

  EvidenceBundle good = LoadEvidence(ev);
  auto tampered = [&](const std::string& name, const std::function<void(EvidenceBundle&)>& change) {
    EvidenceBundle b = good;
    change(b);
    WriteString(P(name), EncodeEvidenceBundle(b));
    return Verify(P(name), kNonce, ak);
  };

  // A changed event: GRUB measured another image; the log no longer replays to the quote.
  {
    auto events = *boot_;
    for (auto& e : events) {
      if (e.measured && *e.measured == attest_test::StrBytes("grub image")) e.measured = attest_test::StrBytes("evil grub");
    }
    auto r = tampered("changed-event.json", [&](EvidenceBundle& b) { b.event_log = attest_test::EncodeBootLog(events); });
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "eventlog.pcr.mismatch")) << r.output;
  }
  // A changed PCR value: no longer the quoted digest.
  {
    auto r = tampered("changed-pcr.json", [](EvidenceBundle& b) { b.pcrs[0x000B][7][0] ^= 1; });
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "quote.pcr_digest.mismatch")) << r.output;
  }
  // A changed IMA line (another trainer binary) no longer replays to PCR 10.
  {
    auto files = *ima_;
    files[0].sha256[0] ^= 1;
    auto r = tampered("changed-ima.json", [&](EvidenceBundle& b) { b.ima_log = attest_test::ImaLogText(files); });
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "ima.pcr.mismatch")) << r.output;
  }
  // A forged signature.
  {
    auto r = tampered("forged-signature.json", [](EvidenceBundle& b) { b.signature[b.signature.size() - 5] ^= 1; });
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "quote.signature.invalid")) << r.output;
  }
  // A wrong nonce.
  {
    std::string other = kNonce;
    other[0] = '1';
    auto r = Verify(ev, other, ak);
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "quote.extra_data.mismatch")) << r.output;
  }
  // Data bound by the verifier that the host did not bind.
  {
    WriteString(P("job.json"), "{\"job\": 1}\n");
    auto r = Verify(ev, kNonce, ak, {"--bind", P("job.json")});
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "quote.extra_data.mismatch")) << r.output;
  }
  // A replayed quote: the clock state remembers the first acceptance.
  {
    auto r = Verify(ev, kNonce, ak, {"--clock-state", P("clock.json")});
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "quote.clock.not_increasing")) << r.output;
  }
  // A reset counter that went back: the verifier saw a later reset before.
  {
    auto attest = ParseTpmsAttest(good.attest);
    ASSERT_TRUE(attest.ok()) << attest.status().ToString();
    ClockInfo seen = attest->clock_info;
    seen.reset_count += 1;
    seen.clock = 1;
    WriteString(P("clock-later.json"), EncodeClockState(seen));
    auto r = Verify(ev, kNonce, ak, {"--clock-state", P("clock-later.json")});
    EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
    EXPECT_TRUE(HasFinding(r, "quote.clock.reset_count.decreased")) << r.output;
    // A refused quote leaves the stored clock as it was.
    EXPECT_EQ(ReadString(P("clock-later.json")), EncodeClockState(seen));
  }
  // Evidence that cannot be evaluated: exit 13, no verdict.
  {
    WriteString(P("garbage.json"), "{\"format\": \"enclave-attest evidence v1\"}");
    auto r = Verify(P("garbage.json"), kNonce, ak);
    EXPECT_EQ(r.exit_code, kExitNotEvaluated) << r.output;
    EXPECT_NE(r.output.find("could not evaluate"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("\"verdict\""), std::string::npos) << r.output;
  }
}

TEST_F(EnclaveAttestCliTest, QuoteBindsTheBoundFileAndVerifiesOnlyWithIt) {
  ASSERT_NO_FATAL_FAILURE(EnrolAndActivate("state", Dir("policy.json")));
  WriteString(P("job.json"), "{\"job\": \"train\"}\n");
  const std::string ev = P("evidence.json");
  auto q = Host({"quote", "--nonce", "abcd", "--bind", P("job.json"), "--policy", Dir("policy.json"), "--out", ev,
                 "--event-log", Dir("boot.log"), "--ima-log", Dir("ima.log")});
  ASSERT_EQ(q.exit_code, 0) << q.output;
  // The qualifying data is the documented one, recomputed here.
  EvidenceBundle b = LoadEvidence(ev);
  auto attest = ParseTpmsAttest(b.attest);
  ASSERT_TRUE(attest.ok());
  Bytes job = testing::ReadFileBytes(P("job.json"));
  EXPECT_EQ(Hex(attest->extra_data), Hex(QualifyingDataHere({0xab, 0xcd}, testing::Sha(EVP_sha256(), job))));

  auto with = Verify(ev, "abcd", P("state-enrolment.json"), {"--bind", P("job.json")});
  EXPECT_EQ(with.exit_code, 0) << with.output;
  WriteString(P("job2.json"), "{\"job\": \"exfiltrate\"}\n");
  auto other = Verify(ev, "abcd", P("state-enrolment.json"), {"--bind", P("job2.json")});
  EXPECT_EQ(other.exit_code, kExitPolicyDenied) << other.output;
  auto without = Verify(ev, "abcd", P("state-enrolment.json"));
  EXPECT_EQ(without.exit_code, kExitPolicyDenied) << without.output;
}

TEST_F(EnclaveAttestCliTest, AQuoteDoesNotVerifyWithAnotherHostsAk) {
  ASSERT_NO_FATAL_FAILURE(EnrolAndActivate("a", Dir("policy.json")));
  ASSERT_NO_FATAL_FAILURE(EnrolAndActivate("b", Dir("policy.json")));
  auto q = Quote(kNonce, P("evidence.json"), "a");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_EQ(Verify(P("evidence.json"), kNonce, P("a-enrolment.json")).exit_code, 0);
  auto r = Verify(P("evidence.json"), kNonce, P("b-enrolment.json"));
  EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
  EXPECT_TRUE(HasFinding(r, "quote.signature.invalid")) << r.output;
}

TEST_F(EnclaveAttestCliTest, ChallengeRefusesAnUntrustedEkRootAndAnAkWithoutFixedTpm) {
  auto e = Host({"enroll", "--out", P("enrolment.json")});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  // The genuine EK certificate, but the policy trusts another vendor root.
  auto untrusted = Cli({"challenge", "--enrolment", P("enrolment.json"), "--policy", Dir("policy-untrusted.json"),
                        "--out", P("challenge.json")});
  EXPECT_EQ(untrusted.exit_code, kExitPolicyDenied) << untrusted.output;
  EXPECT_TRUE(HasFinding(untrusted, "ek.cert.chain.untrusted")) << untrusted.output;
  EXPECT_FALSE(std::filesystem::exists(P("challenge.json"))) << "a challenge was written for a refused enrolment";

  // The same enrolment with fixedTPM cleared in the AK's attributes (and the name made to
  // match, so only the attribute is wrong): refused before any challenge, and a quote
  // checked against that AK public is refused too.
  auto bundle = ParseEnrolmentBundle(ReadString(P("enrolment.json")));
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  Bytes& pub = bundle->ak_public;  // TPM2B: size(2) type(2) nameAlg(2) objectAttributes(4)
  ASSERT_GT(pub.size(), 10u);
  ASSERT_TRUE(pub[9] & 0x02) << "the enrolled AK has no fixedTPM to begin with";
  pub[9] = static_cast<uint8_t>(pub[9] & ~0x02);
  Bytes tpmt(pub.begin() + 2, pub.end());
  Bytes name = {0x00, 0x0B};
  Bytes h = testing::Sha(EVP_sha256(), tpmt);
  name.insert(name.end(), h.begin(), h.end());
  bundle->ak_name = name;
  WriteString(P("enrolment-no-fixedtpm.json"), EncodeEnrolmentBundle(*bundle));
  auto no_fixed = Cli({"challenge", "--enrolment", P("enrolment-no-fixedtpm.json"), "--policy", Dir("policy.json"),
                       "--out", P("challenge.json")});
  EXPECT_EQ(no_fixed.exit_code, kExitPolicyDenied) << no_fixed.output;
  EXPECT_TRUE(HasFinding(no_fixed, "ak.attributes.fixed_tpm.missing")) << no_fixed.output;
  EXPECT_FALSE(HasFinding(no_fixed, "ek.cert")) << no_fixed.output;

  auto q = Quote(kNonce, P("evidence.json"));
  ASSERT_EQ(q.exit_code, 0) << q.output;
  auto v = Verify(P("evidence.json"), kNonce, P("enrolment-no-fixedtpm.json"));
  EXPECT_EQ(v.exit_code, kExitPolicyDenied) << v.output;
  EXPECT_TRUE(HasFinding(v, "ak.attributes.fixed_tpm.missing")) << v.output;
}

TEST_F(EnclaveAttestCliTest, ConfirmRefusesAWrongSecretAndAnotherEnrolment) {
  ASSERT_NO_FATAL_FAILURE(EnrolAndActivate("state", Dir("policy.json")));
  auto response = ParseActivationResponse(ReadString(P("state-response.json")));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  response->secret[0] ^= 1;
  WriteString(P("bad-response.json"), EncodeActivationResponse(*response));
  auto r = Cli({"confirm", "--challenge", P("state-challenge.json"), "--response", P("bad-response.json"),
                "--enrolment", P("state-enrolment.json")});
  EXPECT_EQ(r.exit_code, kExitPolicyDenied) << r.output;
  EXPECT_TRUE(HasFinding(r, "activation.secret.mismatch")) << r.output;

  WriteString(P("other-enrolment.json"), ReadString(P("state-enrolment.json")) + " ");
  auto e = Cli({"confirm", "--challenge", P("state-challenge.json"), "--response", P("state-response.json"),
                "--enrolment", P("other-enrolment.json")});
  EXPECT_EQ(e.exit_code, kExitPolicyDenied) << e.output;
  EXPECT_TRUE(HasFinding(e, "activation.enrolment.mismatch")) << e.output;

  // A challenge made for another AK is refused by the host before the TPM sees it.
  auto other = ParseChallengeBundle(ReadString(P("state-challenge.json")));
  ASSERT_TRUE(other.ok());
  other->ak_name.back() ^= 1;
  WriteString(P("other-challenge.json"), EncodeChallengeBundle(*other));
  auto a = Host({"activate", "--challenge", P("other-challenge.json"), "--out", P("r2.json")});
  EXPECT_EQ(a.exit_code, 3) << a.output;
  EXPECT_FALSE(std::filesystem::exists(P("r2.json")));
}

TEST_F(EnclaveAttestCliTest, CheckIsOneShotAndKeepsTheClock) {
  const std::vector<std::string> check = {"check", "--policy", Dir("policy.json"), "--event-log", Dir("boot.log"),
                                          "--ima-log", Dir("ima.log")};
  auto first = Host(check);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("\"activation.secret\""), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("\"ima.files\""), std::string::npos) << first.output;
  EXPECT_TRUE(std::filesystem::exists(P("state/last_clock.json")));
  // The second run reuses the enrolment and checks the clock against the first.
  auto second = Host(check);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("\"quote.clock.monotonic\""), std::string::npos) << second.output;
  // Without the boot log the policy says no.
  auto no_log = Host({"check", "--policy", Dir("policy.json"), "--event-log=", "--ima-log", Dir("ima.log")});
  EXPECT_EQ(no_log.exit_code, kExitPolicyDenied) << no_log.output;
  EXPECT_TRUE(HasFinding(no_log, "eventlog.missing")) << no_log.output;
  // A policy that does not parse: could not evaluate.
  WriteString(P("bad-policy.json"), "{\"version\": 2}");
  auto bad = Host({"check", "--policy", P("bad-policy.json")});
  EXPECT_EQ(bad.exit_code, kExitNotEvaluated) << bad.output;
}

// Interop 1: a quote from `enclave-attest quote` verifies with tpm2_checkquote, given the
// qualifying data computed here from the documented formula.
TEST_F(EnclaveAttestCliTest, OurQuotesVerifyWithTpm2Checkquote) {
  ASSERT_TRUE(testing::InPath("tpm2_checkquote")) << "tpm2-tools not installed (scripts/install-deps)";
  ASSERT_NO_FATAL_FAILURE(EnrolAndActivate("state", Dir("policy.json")));
  WriteString(P("job.json"), "job\n");
  auto q = Host({"quote", "--nonce", kNonce, "--bind", P("job.json"), "--pcrs", "sha256:0,4,7,10+sha1:0,10", "--out",
                 P("evidence.json"), "--event-log=", "--ima-log="});
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EvidenceBundle b = LoadEvidence(P("evidence.json"));
  auto enrol = ParseEnrolmentBundle(ReadString(P("state-enrolment.json")));
  ASSERT_TRUE(enrol.ok());
  testing::WriteFileBytes(P("ak.pub"), enrol->ak_public);
  testing::WriteFileBytes(P("quote.msg"), b.attest);
  testing::WriteFileBytes(P("quote.sig"), b.signature);
  Bytes values;  // tpm2_pcrread -o layout: selection order
  for (uint16_t bank : {uint16_t{0x000B}, uint16_t{0x0004}}) {
    for (const auto& [idx, v] : b.pcrs[bank]) values.insert(values.end(), v.begin(), v.end());
  }
  testing::WriteFileBytes(P("pcrs.bin"), values);
  Bytes nonce = *HexDecode(kNonce);
  Bytes qd = QualifyingDataHere(nonce, testing::Sha(EVP_sha256(), testing::ReadFileBytes(P("job.json"))));
  auto ok = testing::RunTool({"tpm2_checkquote", "-u", P("ak.pub"), "-m", P("quote.msg"), "-s", P("quote.sig"), "-f",
                              P("pcrs.bin"), "-l", "sha256:0,4,7,10+sha1:0,10", "-g", "sha256", "-q", Hex(qd)},
                             P("checkquote.log"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  Bytes wrong = QualifyingDataHere(nonce, {});
  auto bad = testing::RunTool({"tpm2_checkquote", "-u", P("ak.pub"), "-m", P("quote.msg"), "-s", P("quote.sig"), "-f",
                               P("pcrs.bin"), "-l", "sha256:0,4,7,10+sha1:0,10", "-g", "sha256", "-q", Hex(wrong)},
                              P("checkquote-bad.log"));
  EXPECT_NE(bad.exit_code, 0) << "tpm2_checkquote accepted the wrong qualifying data: " << bad.output;
}

// Interop 2 and 3 with tpm2-tools as the host: its EK and AK (tpm2_createek,
// tpm2_createak), our challenge activated by tpm2_activatecredential and confirmed, and
// its quote (tpm2_quote with our qualifying data) verified by `enclave-attest verify`.
TEST_F(EnclaveAttestCliTest, Tpm2ToolsHostActivatesOurChallengeAndItsQuoteVerifies) {
  for (const char* tool : {"tpm2_createek", "tpm2_createak", "tpm2_nvread", "tpm2_startauthsession", "tpm2_policysecret",
                           "tpm2_activatecredential", "tpm2_flushcontext", "tpm2_quote", "tpm2_pcrread"}) {
    ASSERT_TRUE(testing::InPath(tool)) << tool << " not installed (scripts/install-deps installs tpm2-tools)";
  }
  const std::string tcti = fixture_->tcti();
  auto run = [&](std::vector<std::string> argv) {
    std::string name = argv[0];
    argv.insert(argv.begin() + 1, {"-T", tcti});
    auto r = testing::RunTool(argv, P(name + ".log"));
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    return r.exit_code == 0;
  };
  ASSERT_TRUE(run({"tpm2_createek", "-c", P("ek.ctx"), "-G", "rsa", "-u", P("ek.pub")}));
  ASSERT_TRUE(run({"tpm2_flushcontext", "-t"}));
  ASSERT_TRUE(run({"tpm2_createak", "-C", P("ek.ctx"), "-c", P("ak.ctx"), "-G", "ecc", "-g", "sha256", "-s", "ecdsa",
                   "-u", P("ak.pub"), "-n", P("ak.name")}));
  ASSERT_TRUE(run({"tpm2_flushcontext", "-t"}));
  ASSERT_TRUE(run({"tpm2_nvread", "0x01c00002", "-C", "o", "-o", P("ek-cert.der")}));

  // The enrolment bundle, assembled from tpm2-tools' files.
  EnrolmentBundle enrol;
  enrol.ek_public = testing::ReadFileBytes(P("ek.pub"));
  enrol.ek_certificates.push_back({0x01C00002, testing::ReadFileBytes(P("ek-cert.der"))});
  enrol.ak_public = testing::ReadFileBytes(P("ak.pub"));
  enrol.ak_name = testing::ReadFileBytes(P("ak.name"));
  enrol.created_at = 1;
  WriteString(P("enrolment.json"), EncodeEnrolmentBundle(enrol));
  auto c = Cli({"challenge", "--enrolment", P("enrolment.json"), "--policy", Dir("policy.json"), "--out",
                P("challenge.json")});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto challenge = ParseChallengeBundle(ReadString(P("challenge.json")));
  ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
  testing::WriteFileBytes(P("cred.bin"),
                          EncodeTpm2ToolsCredential({challenge->credential_blob, challenge->encrypted_secret}));
  ASSERT_TRUE(run({"tpm2_startauthsession", "--policy-session", "-S", P("session.ctx")}));
  ASSERT_TRUE(run({"tpm2_policysecret", "-S", P("session.ctx"), "-c", "e"}));
  bool activated = run({"tpm2_activatecredential", "-c", P("ak.ctx"), "-C", P("ek.ctx"), "-i", P("cred.bin"), "-o",
                        P("secret.bin"), "-P", "session:" + P("session.ctx")});
  run({"tpm2_flushcontext", P("session.ctx")});
  run({"tpm2_flushcontext", "-t"});
  ASSERT_TRUE(activated);
  WriteString(P("response.json"), EncodeActivationResponse({enrol.ak_name, testing::ReadFileBytes(P("secret.bin"))}));
  auto k = Cli({"confirm", "--challenge", P("challenge.json"), "--response", P("response.json"), "--enrolment",
                P("enrolment.json")});
  EXPECT_EQ(k.exit_code, 0) << k.output;

  // tpm2_quote with the qualifying data of our nonce; the evidence bundle from its files.
  Bytes nonce = *HexDecode(kNonce);
  const std::string sel = "sha256:0,1,2,3,4,5,6,7,8,9,10";
  ASSERT_TRUE(run({"tpm2_quote", "-c", P("ak.ctx"), "-l", sel, "-q", Hex(QualifyingDataHere(nonce, {})), "-m",
                   P("quote.msg"), "-s", P("quote.sig"), "-o", P("quote.pcrs"), "-F", "values", "-g", "sha256"}));
  run({"tpm2_flushcontext", "-t"});
  EvidenceBundle b;
  b.nonce = nonce;
  b.ak_name = enrol.ak_name;
  auto selection = PcrSelection::FromString(sel);
  ASSERT_TRUE(selection.ok());
  b.pcr_selection = *selection;
  b.attest = testing::ReadFileBytes(P("quote.msg"));
  b.signature = testing::ReadFileBytes(P("quote.sig"));
  Bytes values = testing::ReadFileBytes(P("quote.pcrs"));
  ASSERT_EQ(values.size(), 11u * 32u);
  for (uint32_t i = 0; i <= 10; ++i) b.pcrs[0x000B][i] = Bytes(values.begin() + i * 32, values.begin() + (i + 1) * 32);
  b.event_log = testing::ReadFileBytes(Dir("boot.log"));
  b.ima_log = ReadString(Dir("ima.log"));
  WriteString(P("evidence.json"), EncodeEvidenceBundle(b));
  auto v = Verify(P("evidence.json"), kNonce, P("ak.pub"));  // the AK as a TPM2B_PUBLIC file
  EXPECT_EQ(v.exit_code, 0) << v.output;
  auto wrong = Verify(P("evidence.json"), "01", P("ak.pub"));
  EXPECT_EQ(wrong.exit_code, kExitPolicyDenied) << wrong.output;
}

}  // namespace
}  // namespace enclave::attest
