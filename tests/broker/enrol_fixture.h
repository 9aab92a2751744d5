// The fixture of the broker tests with a real TPM: one swtpm per test binary, a broker
// process per test, and the host side driven through the attest host library.
#pragma once

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "broker_process.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/host/agent.h"
#include "enclave/attest/host/tpm.h"
#include "enclave/audit/verify.h"
#include "enclave/broker/client.h"
#include "enclave/broker/messages.h"
#include "enclave/broker/release.h"
#include "enclave/broker/service.h"
#include "enclave/broker/store.h"
#include "enclave/common/bytes.h"
#include "swtpm_fixture.h"

namespace enclave::broker {

using attest::host::HostState;
using attest::host::Tpm;
using enclave::testing::SwtpmFixture;
using testing::BrokerProcess;
using testing::BrokerSettings;

inline int64_t Now() { return static_cast<int64_t>(::time(nullptr)); }

class EnrolAttestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!SwtpmFixture::Installed()) return;
    auto f = SwtpmFixture::Start();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fixture_ = std::move(f).value().release();
  }
  static void TearDownTestSuite() {
    delete fixture_;
    fixture_ = nullptr;
  }
  void SetUp() override {
    if (fixture_ == nullptr) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
    work_ = fixture_->dir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(work_);
    std::filesystem::create_directories(work_);
    settings_.ek_root_files = {fixture_->ca_root_cert()};
    settings_.ek_intermediate_files = {fixture_->ca_issuer_cert()};
    auto t = Tpm::Open(fixture_->tcti());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tpm_ = std::move(t).value();
  }
  void TearDown() override {
    if (broker_) {
      EXPECT_TRUE(broker_->Alive()) << "the broker died: " << broker_->log();
    }
    broker_.reset();
    tpm_.reset();
  }

  void StartBroker() {
    auto b = BrokerProcess::Start(work_ + "/broker", settings_);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    broker_ = std::move(b).value();
  }
  HostState State(const std::string& name) {
    auto s = HostState::Open(work_ + "/" + name, true);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  // POST /v1/enrolments with a fresh enrolment of `state`.
  BrokerProcess::Answer PostEnrolment(const HostState& state, attest::EnrolmentBundle* out = nullptr) {
    attest::host::EnrollOptions o;
    o.force = true;
    auto bundle = attest::host::Enroll(*tpm_, state, o, Now());
    EXPECT_TRUE(bundle.ok()) << bundle.status().ToString();
    if (out) *out = *bundle;
    return broker_->Post("/v1/enrolments", attest::EncodeEnrolmentBundle(*bundle));
  }

  // The whole enrolment; the host id.
  std::string Enrol(const HostState& state) {
    auto a = PostEnrolment(state);
    EXPECT_EQ(a.status, 201) << a.body;
    auto c = ParseEnrolmentChallenge(a.body);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    auto challenge = attest::ParseChallengeBundle(c->challenge_bundle);
    EXPECT_TRUE(challenge.ok()) << challenge.status().ToString();
    auto response = attest::host::Activate(*tpm_, state, *challenge);
    EXPECT_TRUE(response.ok()) << response.status().ToString();
    auto done = broker_->Post("/v1/enrolments/" + c->challenge_id + "/activation",
                              attest::EncodeActivationResponse(*response));
    EXPECT_EQ(done.status, 201) << done.body;
    const std::string host_id = done.json()["host_id"].get<std::string>();
    enrolled_.insert_or_assign(host_id, state);  // the AK that signs this host's requests now
    return host_id;
  }

  // A nonce request for `host_id` signed with the AK of `state`, by default the one it was
  // last enrolled with here (a host never enrolled here: unsigned, to be refused anyway).
  NonceRequest SignedNonceRequest(const std::string& host_id, const HostState* state = nullptr) {
    NonceRequest r{host_id, {}};
    auto it = enrolled_.find(host_id);
    if (state == nullptr && it == enrolled_.end()) return r;
    std::lock_guard<std::mutex> lock(tpm_mu_);  // one TPM command sequence at a time
    auto s = attest::host::SignNonceRequest(*tpm_, state ? *state : it->second, host_id);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) r.signed_request = *s;
    return r;
  }
  // What BrokerClient::SetNonceSigner takes, for the hosts enrolled here.
  BrokerClient::NonceSigner Signer() {
    return [this](const std::string& host_id) -> Result<attest::SignedNonceRequest> {
      if (!enrolled_.count(host_id)) return NotFound("test: host " + host_id + " was not enrolled here");
      return SignedNonceRequest(host_id).signed_request;
    };
  }

  NonceIssued Nonce(const std::string& host_id) {
    auto a = broker_->Post("/v1/nonces", EncodeNonceRequest(SignedNonceRequest(host_id)));
    EXPECT_EQ(a.status, 201) << a.body;
    auto n = ParseNonceIssued(a.body);
    EXPECT_TRUE(n.ok()) << n.status().ToString() << ": " << a.body;
    return *n;
  }

  attest::EvidenceBundle Evidence(const HostState& state, const NonceIssued& n) {
    auto sel = attest::PcrSelection::FromString(n.pcr_selection);
    EXPECT_TRUE(sel.ok()) << n.pcr_selection;
    crypto::Digest256 bound{};
    bound.fill(0x42);
    auto logs = [] { return Result<attest::host::HostLogs>(attest::host::HostLogs{}); };
    auto ev = attest::host::MakeEvidence(*tpm_, state, *sel, n.nonce, bound, logs, Now());
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    return *ev;
  }

  // Simulated IMA on this test process's swtpm (attest::host::SimulateImaMeasurement): the
  // files a workload runs, measured into PCR 10 once each, and the log that shows them.
  std::string ImaLogPath() const { return fixture_->dir() + "/ima.log"; }
  void Measure(const std::string& file) {
    static std::set<std::string> measured;  // one swtpm (and PCR 10) per test process
    const std::string path = std::filesystem::canonical(file).string();
    if (!measured.insert(path).second) return;
    Status s = attest::host::SimulateImaMeasurement(*tpm_, path, path, ImaLogPath());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::string ImaLog() const {
    return std::filesystem::exists(ImaLogPath()) ? testing::ReadText(ImaLogPath()) : std::string();
  }
  // The flag that hands the simulated log to enclave-attest and enclave-train.
  std::string ImaLogFlag() const { return "--ima-log=" + ImaLogPath(); }
  // This test binary as the workload of requests the test makes itself (measured first).
  Workload TestWorkload() {
    Measure("/proc/self/exe");
    auto w = WorkloadOfExecutable("/proc/self/exe", std::filesystem::canonical("/proc/self/exe").string());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? *w : Workload{};
  }
  static crypto::Digest256 WorkloadOfFile(const std::string& file) {
    auto w = WorkloadOfExecutable(file, file);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? WorkloadDigest(*w) : crypto::Digest256{};
  }

  // Every entry of the broker's audit log, after verifying the log.
  std::vector<audit::Entry> AuditEntries() {
    std::vector<audit::Entry> entries;
    audit::VerifyOptions o;
    o.on_entry = [&](uint64_t, uint64_t, ByteSpan, const audit::Entry& e) {
      entries.push_back(e);
      return OkStatus();
    };
    auto v = audit::VerifyLog(broker_->Path("audit"), broker_->audit_key(), o);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return entries;
  }

  nlohmann::json HostsJson() {
    std::string out;
    int rc = BrokerProcess::RunBroker({"hosts", "--config", broker_->config(), "--json"}, "", &out);
    EXPECT_EQ(rc, 0) << out;
    return nlohmann::json::parse(out, nullptr, false);
  }

  static SwtpmFixture* fixture_;
  std::string work_;
  BrokerSettings settings_;
  std::unique_ptr<Tpm> tpm_;
  std::unique_ptr<BrokerProcess> broker_;
  std::map<std::string, HostState> enrolled_;
  std::mutex tpm_mu_;  // host id -> the state it was last enrolled with
};
inline SwtpmFixture* EnrolAttestTest::fixture_ = nullptr;

}  // namespace enclave::broker
