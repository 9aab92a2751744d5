// `enclave-attest policy create` (issue 20 §3) end to end: each host is its own swtpm whose
// PCRs hold a synthetic measured boot (boot_fixture.h, extended into the SHA-1 and SHA-256
// banks) and files measured by `enclave-attest ima-simulate`; every step is a separate
// `enclave-attest` process. The policy made from host A's evidence accepts A's next quote
// (fresh nonce), refuses host B whose boot differs in one event (naming the checks), and its
// IMA allowlist refuses A once A has run one file more. Evidence that does not verify
// against itself is refused with exit 4, unusable input with the documented codes.
#include <openssl/evp.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "boot_fixture.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/host/tpm.h"
#include "swtpm_fixture.h"
#include "test_util.h"

#ifndef ENCLAVE_ATTEST_BIN
#error "ENCLAVE_ATTEST_BIN must name the enclave-attest binary"
#endif

namespace enclave::attest {
namespace {

using testing::Bytes;
using testing::SwtpmFixture;

std::string ReadString(const std::string& path) {
  Bytes b = testing::ReadFileBytes(path);
  return std::string(b.begin(), b.end());
}
void WriteString(const std::string& path, const std::string& s) {
  testing::WriteFileBytes(path, Bytes(s.begin(), s.end()));
}

// What the golden host quotes: SHA-1 for the boot PCRs, SHA-256 for them and IMA's PCR 10
// (ima-simulate extends the SHA-256 bank only).
constexpr char kSelection[] = "sha1:0,1,2,3,4,5,6,7,8,9+sha256:0,1,2,3,4,5,6,7,8,9,10";

// One host: its own swtpm, boot log and IMA log, enrolled with its own state directory.
struct TestHost {
  std::unique_ptr<SwtpmFixture> tpm;
  std::string dir, boot_log, ima_log, state, enrolment;
};

class PolicyCreateCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SwtpmFixture::Installed()) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
    work_ = ::testing::TempDir() + "policy_create_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
            "_" + std::to_string(getpid());
    std::filesystem::remove_all(work_);
    std::filesystem::create_directories(work_);
  }
  void TearDown() override {
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(work_);
  }

  std::string P(const std::string& name) const { return work_ + "/" + name; }

  testing::ToolRun Cli(std::vector<std::string> args) {
    args.insert(args.begin(), ENCLAVE_ATTEST_BIN);
    return testing::RunTool(args, P("cli-" + std::to_string(++runs_) + ".log"));
  }
  testing::ToolRun OnHost(const TestHost& h, std::vector<std::string> args) {
    args.insert(args.end(), {"--tcti", h.tpm->tcti(), "--state", h.state});
    return Cli(std::move(args));
  }

  // A fresh swtpm with `events` extended into both banks, the IMA files measured by
  // ima-simulate, and an enrolment. The EK roots a verifier trusts go to P("ek-roots").
  void StartHost(const std::string& name, const std::vector<attest_test::BootEvent>& events, TestHost* h) {
    auto f = SwtpmFixture::Start();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    h->tpm = std::move(*f);
    h->dir = P(name);
    h->boot_log = h->dir + "/boot.log";
    h->ima_log = h->dir + "/ima.log";
    h->state = h->dir + "/state";
    h->enrolment = h->dir + "/enrolment.json";
    std::filesystem::create_directories(h->dir);
    testing::WriteFileBytes(h->boot_log, attest_test::EncodeBootLog(events));
    {
      auto tpm = host::Tpm::Open(h->tpm->tcti());
      ASSERT_TRUE(tpm.ok()) << tpm.status().ToString();
      for (const auto& e : events) {
        const Bytes& measured = e.measured ? *e.measured : e.data;
        ASSERT_TRUE((*tpm)->ExtendPcr(e.pcr, 0x0004, testing::Sha(EVP_sha1(), measured)).ok());
        ASSERT_TRUE((*tpm)->ExtendPcr(e.pcr, 0x000B, testing::Sha(EVP_sha256(), measured)).ok());
      }
    }
    // Every host runs the same image: the same files at the same paths.
    std::filesystem::create_directories(P("image/usr/bin"));
    for (const char* file : {"usr/bin/enclave-train", "usr/bin/python3"}) {
      WriteString(P("image/") + file, std::string("contents of ") + file);
      ASSERT_NO_FATAL_FAILURE(Measure(*h, P("image/") + file));
    }
    auto e = OnHost(*h, {"enroll", "--out", h->enrolment});
    ASSERT_EQ(e.exit_code, 0) << e.output;
    std::filesystem::create_directories(P("ek-roots"));
    std::filesystem::copy_file(h->tpm->ca_root_cert(), P("ek-roots/" + name + "-root.pem"));
    std::filesystem::copy_file(h->tpm->ca_issuer_cert(), P("ek-roots/" + name + "-issuer.pem"));
  }
  // The host runs `file`: ima-simulate appends its line to the IMA log and extends PCR 10.
  void Measure(const TestHost& h, const std::string& file) {
    auto r = Cli({"ima-simulate", file, "--log", h.ima_log, "--tcti", h.tpm->tcti()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // Quotes the PCRs of `policy` (or kSelection before there is a policy).
  testing::ToolRun Quote(const TestHost& h, const std::string& nonce, const std::string& out,
                         const std::string& policy = "") {
    std::vector<std::string> args = {"quote",       "--nonce",  nonce,       "--out",  out,
                                     "--event-log", h.boot_log, "--ima-log", h.ima_log};
    if (policy.empty()) {
      args.insert(args.end(), {"--pcrs", kSelection});
    } else {
      args.insert(args.end(), {"--policy", policy});
    }
    return OnHost(h, args);
  }
  testing::ToolRun Create(const std::string& evidence, const std::string& ak, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"policy", "create", "--evidence", evidence,
                                     "--ak",   ak,       "--ek-roots", P("ek-roots")};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  }
  testing::ToolRun Verify(const std::string& evidence, const std::string& nonce, const TestHost& h,
                          const std::string& policy) {
    return Cli({"verify", "--evidence", evidence, "--policy", policy, "--nonce", nonce, "--ak", h.enrolment});
  }
  static bool Has(const testing::ToolRun& r, const std::string& text) {
    return r.output.find(text) != std::string::npos;
  }
  static bool HasFinding(const testing::ToolRun& r, const std::string& check) { return Has(r, "\"check\":\"" + check); }
  // Every failure of a verdict is one of `checks`.
  static void ExpectOnlyFindings(const testing::ToolRun& r, const std::vector<std::string>& checks) {
    size_t pos = 0;
    while ((pos = r.output.find("\"check\":\"", pos)) != std::string::npos) {
      pos += 9;
      const std::string check = r.output.substr(pos, r.output.find('"', pos) - pos);
      EXPECT_NE(std::find(checks.begin(), checks.end(), check), checks.end()) << check << " in " << r.output;
    }
  }

  std::string work_;
  int runs_ = 0;
};

const char kNonce1[] = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const char kNonce2[] = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const char kNonce3[] = "c3c3c3c3c3c3c3c3";

TEST_F(PolicyCreateCliTest, GoldenPolicyAcceptsTheHostsNextQuoteAndRefusesABootThatDiffersInOneEvent) {
  TestHost a, b;
  ASSERT_NO_FATAL_FAILURE(StartHost("a", attest_test::TypicalBoot(), &a));
  auto other_boot = attest_test::TypicalBoot();
  for (auto& e : other_boot)
    if (e.measured == attest_test::StrBytes("grub image")) e.measured = attest_test::StrBytes("grub image 2.12");
  ASSERT_NO_FATAL_FAILURE(StartHost("b", other_boot, &b));

  auto q1 = Quote(a, kNonce1, P("a1.json"));
  ASSERT_EQ(q1.exit_code, 0) << q1.output;
  auto made = Create(P("a1.json"), a.enrolment, {"--ima", "--out", P("golden.json"), "--name", "fleet golden"});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  // The digest it prints is the file's, which data-use policies pin.
  const std::string text = ReadString(P("golden.json"));
  EXPECT_TRUE(Has(made, "SHA-256 " + testing::Hex(testing::Sha(EVP_sha256(), Bytes(text.begin(), text.end())))))
      << made.output;
  EXPECT_NE(text.find("\"ek_roots\": {\"dir\": \"ek-roots\"}"), std::string::npos) << text;
  // Its EK roots judge the host's enrolment (relative to the policy's folder).
  auto ch = Cli({"challenge", "--enrolment", a.enrolment, "--policy", P("golden.json"), "--out", P("challenge.json")});
  EXPECT_EQ(ch.exit_code, 0) << ch.output;

  // The golden host's next quote, with a fresh nonce, passes every derived rule.
  auto q2 = Quote(a, kNonce2, P("a2.json"), P("golden.json"));
  ASSERT_EQ(q2.exit_code, 0) << q2.output;
  auto ok = Verify(P("a2.json"), kNonce2, a, P("golden.json"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  for (const char* check : {"\"pcr.values\"", "\"eventlog.pcrs\"", "\"event.digests\"", "\"secureboot.enabled\"",
                            "\"bootapp.digests\"", "\"cmdline\"", "\"ima.pcr\"", "\"ima.allowlist\""})
    EXPECT_TRUE(Has(ok, check)) << check << " not in " << ok.output;

  // Host B booted another grub: refused by the boot application rule and PCR 4's value, and
  // by nothing else (its evidence is itself sound).
  auto qb = Quote(b, kNonce3, P("b.json"), P("golden.json"));
  ASSERT_EQ(qb.exit_code, 0) << qb.output;
  auto refused = Verify(P("b.json"), kNonce3, b, P("golden.json"));
  EXPECT_EQ(refused.exit_code, 12) << refused.output;
  EXPECT_TRUE(Has(refused, "{\"check\":\"bootapp.digest.not_allowed\",\"where\":\"event 20 sha256 PCR 4\""))
      << refused.output;
  EXPECT_TRUE(Has(refused, "{\"check\":\"pcr.value.not_allowed\",\"where\":\"sha256 PCR 4\"")) << refused.output;
  ExpectOnlyFindings(refused, {"bootapp.digest.not_allowed", "pcr.value.not_allowed"});

  // One file more on the golden host: the IMA allowlist names it.
  WriteString(P("image/usr/bin/unknown-tool"), "not in the golden image");
  ASSERT_NO_FATAL_FAILURE(Measure(a, P("image/usr/bin/unknown-tool")));
  auto q3 = Quote(a, kNonce1, P("a3.json"), P("golden.json"));
  ASSERT_EQ(q3.exit_code, 0) << q3.output;
  auto extra = Verify(P("a3.json"), kNonce1, a, P("golden.json"));
  EXPECT_EQ(extra.exit_code, 12) << extra.output;
  const std::string tool = std::filesystem::canonical(P("image/usr/bin/unknown-tool")).string();
  EXPECT_TRUE(Has(extra, "{\"check\":\"ima.allowlist.path_not_listed\",\"where\":\"line 3 " + tool + "\""))
      << extra.output;
  ExpectOnlyFindings(extra, {"ima.allowlist.path_not_listed"});
}

TEST_F(PolicyCreateCliTest, EvidenceThatDoesNotVerifyAgainstItselfIsRefused) {
  TestHost a;
  ASSERT_NO_FATAL_FAILURE(StartHost("a", attest_test::TypicalBoot(), &a));
  auto q = Quote(a, kNonce1, P("a.json"));
  ASSERT_EQ(q.exit_code, 0) << q.output;
  const EvidenceBundle good = *ParseEvidenceBundle(ReadString(P("a.json")));
  auto changed = [&](const std::string& name, const std::function<void(EvidenceBundle&)>& change) {
    EvidenceBundle e = good;
    change(e);
    WriteString(P(name), EncodeEvidenceBundle(e));
    return Create(P(name), a.enrolment, {"--out", P(name + ".policy")});
  };
  auto expect_refused = [&](const testing::ToolRun& r, const std::string& name, const std::string& check) {
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_TRUE(Has(r, "does not verify against itself")) << r.output;
    EXPECT_TRUE(Has(r, check)) << r.output;
    EXPECT_FALSE(std::filesystem::exists(P(name + ".policy")));
  };
  // A boot log that is not the quoted one (one event changed).
  auto events = attest_test::TypicalBoot();
  for (auto& e : events)
    if (e.measured == attest_test::StrBytes("shim image")) e.measured = attest_test::StrBytes("shim 16");
  expect_refused(changed("log.json", [&](EvidenceBundle& e) { e.event_log = attest_test::EncodeBootLog(events); }),
                 "log.json", "eventlog.pcr.mismatch");
  expect_refused(changed("sig.json", [](EvidenceBundle& e) { e.signature[e.signature.size() - 2] ^= 1; }), "sig.json",
                 "quote.signature.invalid");
  expect_refused(changed("pcr.json", [](EvidenceBundle& e) { e.pcrs[0x000B][7][0] ^= 1; }), "pcr.json",
                 "quote.pcr_digest.mismatch");
  expect_refused(changed("nonce.json", [](EvidenceBundle& e) { e.nonce[0] ^= 1; }), "nonce.json",
                 "quote.extra_data.mismatch");
  // Another AK than the one that signed (a second enrolment on the same TPM).
  auto e2 = Cli({"enroll", "--out", P("other-enrolment.json"), "--tcti", a.tpm->tcti(), "--state", P("other-state")});
  ASSERT_EQ(e2.exit_code, 0) << e2.output;
  auto other_ak = Create(P("a.json"), P("other-enrolment.json"), {"--out", P("ak.policy")});
  EXPECT_EQ(other_ak.exit_code, 4) << other_ak.output;
  EXPECT_TRUE(Has(other_ak, "evidence.ak_name.mismatch")) << other_ak.output;
  // An IMA log that does not replay to the quoted PCR 10 (its last measurement left out).
  std::string ima = ReadString(a.ima_log);
  ima.erase(ima.rfind('\n', ima.size() - 2) + 1);
  EvidenceBundle short_ima = good;
  short_ima.ima_log = ima;
  WriteString(P("ima.json"), EncodeEvidenceBundle(short_ima));
  expect_refused(Create(P("ima.json"), a.enrolment, {"--ima", "--out", P("ima.json.policy")}), "ima.json",
                 "ima.pcr.mismatch");
}

TEST_F(PolicyCreateCliTest, UnusableInputHasTheDocumentedExitCodes) {
  TestHost a;
  ASSERT_NO_FATAL_FAILURE(StartHost("a", attest_test::TypicalBoot(), &a));
  auto q = OnHost(a, {"quote", "--nonce", kNonce1, "--pcrs", kSelection, "--out", P("no-ima.json"), "--event-log",
                      a.boot_log, "--ima-log="});
  ASSERT_EQ(q.exit_code, 0) << q.output;
  // Without --ima an IMA-less host makes a policy; with it, there is nothing to allow (3).
  EXPECT_EQ(Create(P("no-ima.json"), a.enrolment, {"--out", P("p.json")}).exit_code, 0);
  auto no_ima = Create(P("no-ima.json"), a.enrolment, {"--ima", "--out", P("p2.json")});
  EXPECT_EQ(no_ima.exit_code, 3) << no_ima.output;
  EXPECT_TRUE(Has(no_ima, "no IMA log")) << no_ima.output;
  // The output exists (7) unless --force.
  EXPECT_EQ(Create(P("no-ima.json"), a.enrolment, {"--out", P("p.json")}).exit_code, 7);
  EXPECT_EQ(Create(P("no-ima.json"), a.enrolment, {"--out", P("p.json"), "--force"}).exit_code, 0);
  // No evidence file (6), not an evidence bundle (3), EK roots that are not there (6).
  EXPECT_EQ(Create(P("missing.json"), a.enrolment, {"--out", P("p3.json")}).exit_code, 6);
  WriteString(P("garbage.json"), "{\"format\": \"enclave-attest evidence v1\"}");
  EXPECT_EQ(Create(P("garbage.json"), a.enrolment, {"--out", P("p3.json")}).exit_code, 3);
  auto roots = Cli({"policy", "create", "--evidence", P("no-ima.json"), "--ak", a.enrolment, "--ek-roots",
                    P("no-such-roots"), "--out", P("p3.json")});
  EXPECT_EQ(roots.exit_code, 6) << roots.output;
  EXPECT_FALSE(std::filesystem::exists(P("p3.json")));
  // Usage (2): no --ek-roots.
  EXPECT_EQ(Cli({"policy", "create", "--evidence", P("no-ima.json"), "--ak", a.enrolment}).exit_code, 2);
}

}  // namespace
}  // namespace enclave::attest
