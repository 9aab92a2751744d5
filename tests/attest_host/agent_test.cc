// The host agent (attest/host/agent.h) against swtpm: the state directory, enrolment,
// logs read to EOF, the default TCTI, evidence whose qualifying data is the documented
// one, a retry when a measurement lands during the quote, and no TPM handle left after
// hundreds of quotes.
#include "enclave/attest/host/agent.h"

#include <sys/stat.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "enclave/attest/credential.h"
#include "enclave/attest/verifier.h"
#include "swtpm_fixture.h"
#include "test_util.h"

namespace enclave::attest::host {
namespace {

using testing::Bytes;
using testing::Hex;
using testing::SwtpmFixture;

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SwtpmFixture::Installed()) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
    auto f = SwtpmFixture::Start();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fixture_ = std::move(f).value();
    auto t = Tpm::Open(fixture_->tcti());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tpm_ = std::move(t).value();
    auto s = HostState::Open(Path("host-state"), /*create=*/true);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    state_ = std::make_unique<HostState>(std::move(s).value());
  }
  void TearDown() override {
    tpm_.reset();
    fixture_.reset();
  }
  std::string Path(const std::string& name) { return fixture_->dir() + "/" + name; }

  static LogSource NoLogs() {
    return [] { return Result<HostLogs>(HostLogs{}); };
  }

  std::unique_ptr<SwtpmFixture> fixture_;
  std::unique_ptr<Tpm> tpm_;
  std::unique_ptr<HostState> state_;
};

TEST_F(AgentTest, EnrolKeepsTheAkPrivateInTheStateDirectoryAndRefusesToReplaceIt) {
  EXPECT_FALSE(state_->HasAk());
  auto none = state_->LoadAk();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);

  auto bundle = Enroll(*tpm_, *state_, {}, 1234);
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  // swtpm has the RSA-2048 and the P-384 EK certificates: both are sent, and the EK is RSA.
  ASSERT_EQ(bundle->ek_certificates.size(), 2u);
  EXPECT_EQ(bundle->ek_certificates[0].nv_index, kEkCertNvRsa2048);
  EXPECT_EQ(bundle->ek_certificates[1].nv_index, kEkCertNvEccP384);
  auto cert = tpm_->ReadEkCertificate(EkType::kRsa2048);
  ASSERT_TRUE(cert.ok());
  EXPECT_EQ(bundle->ek_certificates[0].der, *cert);
  auto ek = tpm_->CreateEk(EkType::kRsa2048);
  ASSERT_TRUE(ek.ok());
  EXPECT_EQ(Hex(bundle->ek_public), Hex(ek->pub().public_area));
  EXPECT_EQ(bundle->created_at, 1234);

  struct stat st {};
  ASSERT_EQ(::stat(state_->dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(state_->Path("ak.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto stored = state_->LoadAk();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->blob.pub.name, bundle->ak_name);
  EXPECT_EQ(stored->ek_type, EkType::kRsa2048);
  // The stored private part is the TPM's wrapped TPM2B_PRIVATE, not a key in the clear: it
  // loads under this TPM's EK only (a fresh swtpm has another EK seed).
  auto enrolment = state_->LoadEnrolment();
  ASSERT_TRUE(enrolment.ok()) << enrolment.status().ToString();
  EXPECT_EQ(*enrolment, *bundle);

  auto again = Enroll(*tpm_, *state_, {}, 1235);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists) << again.status().ToString();
  EnrollOptions force;
  force.force = true;
  force.ek_type = EkType::kEccP256;
  auto replaced = Enroll(*tpm_, *state_, force, 1236);
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_NE(Hex(replaced->ak_name), Hex(bundle->ak_name));
  EXPECT_EQ(state_->LoadAk()->ek_type, EkType::kEccP256);
}

TEST_F(AgentTest, TheStoredAkDoesNotLoadInAnotherTpm) {
  ASSERT_TRUE(Enroll(*tpm_, *state_, {}, 1).ok());
  auto stored = state_->LoadAk();
  ASSERT_TRUE(stored.ok());
  tpm_.reset();
  auto other = SwtpmFixture::Start();
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto tpm2 = Tpm::Open((*other)->tcti());
  ASSERT_TRUE(tpm2.ok()) << tpm2.status().ToString();
  auto ek = (*tpm2)->CreateEk(stored->ek_type);
  ASSERT_TRUE(ek.ok()) << ek.status().ToString();
  auto ak = (*tpm2)->LoadAk(*ek, stored->blob);
  EXPECT_FALSE(ak.ok()) << "an AK blob loaded under another TPM's EK";
}

TEST_F(AgentTest, ActivatesTheVerifiersChallengeAndRefusesOneForAnotherAk) {
  auto bundle = Enroll(*tpm_, *state_, {}, 1);
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  auto secret = crypto::SecretBytes::Random(32);
  ASSERT_TRUE(secret.ok());
  auto cred = MakeCredential(bundle->ek_public, bundle->ak_name, *secret);
  ASSERT_TRUE(cred.ok()) << cred.status().ToString();
  ChallengeBundle c;
  c.ak_name = bundle->ak_name;
  c.credential_blob = cred->credential_blob;
  c.encrypted_secret = cred->encrypted_secret;
  auto r = Activate(*tpm_, *state_, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Hex(r->secret), Hex(Bytes(secret->ExposeSecret().begin(), secret->ExposeSecret().end())));
  c.ak_name.back() ^= 1;
  auto wrong = Activate(*tpm_, *state_, c);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Code::kInvalidInput) << wrong.status().ToString();
}

TEST_F(AgentTest, EvidenceCarriesTheDocumentedQualifyingDataAndNoHandleIsLeftAfterManyQuotes) {
  ASSERT_TRUE(Enroll(*tpm_, *state_, {}, 1).ok());
  auto sel = attest::PcrSelection::FromString("sha256:0,1,2,3,4,5,6,7,8,9,10+sha1:10");
  ASSERT_TRUE(sel.ok());
  crypto::Digest256 bound{};
  bound.fill(0x5A);
  constexpr int kQuotes = 200;
  for (int i = 0; i < kQuotes; ++i) {
    Bytes nonce = {static_cast<uint8_t>(i), static_cast<uint8_t>(i >> 8), 0x77};
    auto ev = MakeEvidence(*tpm_, *state_, *sel, nonce, i % 2 ? std::optional(bound) : std::nullopt, NoLogs(), 10 + i);
    ASSERT_TRUE(ev.ok()) << "quote " << i << ": " << ev.status().ToString();
    if (i < 2) {
      auto attest = ParseTpmsAttest(ev->attest);
      ASSERT_TRUE(attest.ok());
      auto qd = QualifyingData(nonce, ev->bound_digest);
      ASSERT_TRUE(qd.ok());
      EXPECT_EQ(Hex(attest->extra_data), Hex(Bytes(qd->begin(), qd->end())));
      EXPECT_EQ(ev->pcr_selection, *sel);
      EXPECT_EQ(ev->pcrs.at(0x000B).size(), 11u);
      EXPECT_EQ(ev->pcrs.at(0x0004).size(), 1u);
    }
  }
  // A refused operation (an AK blob that does not load) leaves nothing either.
  auto stored = state_->LoadAk();
  ASSERT_TRUE(stored.ok());
  StoredAk broken = *stored;
  broken.blob.private_area.back() ^= 1;
  ASSERT_TRUE(state_->SaveAk(broken).ok());
  auto bad = MakeEvidence(*tpm_, *state_, *sel, Bytes{1}, std::nullopt, NoLogs(), 1);
  EXPECT_FALSE(bad.ok());
  auto handles = tpm_->CountLoadedHandles();
  ASSERT_TRUE(handles.ok()) << handles.status().ToString();
  EXPECT_TRUE(handles->empty()) << handles->transient.size() << " transient, " << handles->loaded_sessions.size()
                                << " loaded sessions, " << handles->saved_sessions.size() << " saved sessions left";
}

TEST_F(AgentTest, QuotesAgainWhenTheLogsChangeDuringTheQuote) {
  ASSERT_TRUE(Enroll(*tpm_, *state_, {}, 1).ok());
  auto sel = attest::PcrSelection::FromString("sha256:10");
  ASSERT_TRUE(sel.ok());
  int calls = 0;
  // The IMA log grows once, between the first attempt's two reads: the second attempt is kept.
  LogSource once = [&calls]() -> Result<HostLogs> {
    HostLogs l;
    l.ima_log = ++calls >= 2 ? "b" : "a";
    return l;
  };
  auto ev = MakeEvidence(*tpm_, *state_, *sel, Bytes{1}, std::nullopt, once, 1);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->ima_log, "b");
  EXPECT_EQ(calls, 4);
  LogSource always = [&calls]() -> Result<HostLogs> {
    HostLogs l;
    l.ima_log = std::to_string(++calls);
    return l;
  };
  auto never = MakeEvidence(*tpm_, *state_, *sel, Bytes{1}, std::nullopt, always, 1);
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.status().code(), Code::kUnavailable) << never.status().ToString();
  auto handles = tpm_->CountLoadedHandles();
  ASSERT_TRUE(handles.ok());
  EXPECT_TRUE(handles->empty());
}

TEST(AgentLogs, ReadsToEofAndTreatsAMissingLogAsNone) {
  const std::string dir = ::testing::TempDir() + "/agent-logs-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Bytes ev(200000);
  for (size_t i = 0; i < ev.size(); ++i) ev[i] = static_cast<uint8_t>(i * 7);
  testing::WriteFileBytes(dir + "/ev.bin", ev);
  testing::WriteFileBytes(dir + "/ima.txt", {'1', '0', ' ', 'x', '\n'});
  auto logs = ReadHostLogs({dir + "/ev.bin", dir + "/ima.txt"});
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  EXPECT_EQ(logs->event_log, ev);
  EXPECT_EQ(logs->ima_log, "10 x\n");
  auto missing = ReadHostLogs({dir + "/none.bin", dir + "/none.txt"});
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_TRUE(missing->event_log.empty());
  EXPECT_TRUE(missing->ima_log.empty());
  auto disabled = ReadHostLogs({"", ""});
  ASSERT_TRUE(disabled.ok());
  // A log that exists but cannot be read is an error naming it, not "no log".
  auto dir_as_log = ReadHostLogs({dir, ""});
  ASSERT_FALSE(dir_as_log.ok());
  EXPECT_NE(dir_as_log.status().message().find("boot event log"), std::string::npos) << dir_as_log.status().message();
  // securityfs files report size 0: reading must not trust the size (procfs does the same).
  auto proc = ReadHostLogs({"/proc/self/status", ""});
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  EXPECT_GT(proc->event_log.size(), 0u);
  std::filesystem::remove_all(dir);
}

TEST(AgentTcti, DeviceFirstThenTheStartedSwtpmElseAClearError) {
  const std::string dir = ::testing::TempDir() + "/agent-tcti-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto none = DefaultTcti(dir + "/tpmrm0", dir + "/tcti");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_NE(none.status().message().find(dir + "/tpmrm0"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("--tcti"), std::string::npos) << none.status().message();
  testing::WriteFileBytes(dir + "/tcti", {'s', 'w', 't', 'p', 'm', ':', 'p', 'o', 'r', 't', '=', '1', '\n'});
  auto swtpm = DefaultTcti(dir + "/tpmrm0", dir + "/tcti");
  ASSERT_TRUE(swtpm.ok()) << swtpm.status().ToString();
  EXPECT_EQ(*swtpm, "swtpm:port=1");
  testing::WriteFileBytes(dir + "/tpmrm0", {});
  auto device = DefaultTcti(dir + "/tpmrm0", dir + "/tcti");
  ASSERT_TRUE(device.ok());
  EXPECT_EQ(*device, "device:" + dir + "/tpmrm0");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace enclave::attest::host
