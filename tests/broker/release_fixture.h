// The key-release fixture: a broker process with the tenant's keys, an officer's key and a
// signed data-use policy, a swtpm host, and helpers to ask for keys (release_test.cc and
// witnessed_release_test.cc).
#pragma once

#include <sodium.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "enclave/broker/client.h"
#include "enclave/broker/release.h"
#include "enclave/broker/usage_policy.h"
#include "enclave/crypto/model_export.h"
#include "enclave/dataset/sealed_dataset.h"
#include "enrol_fixture.h"

namespace enclave::broker {

inline constexpr char kOfficerKey[] = "officer.key";
inline constexpr char kToken[] = "0123456789abcdef0123456789abcdef-test-admin-token";

// The approved workloads of the test policies: this test binary (the requests it makes
// itself), enclave-train and enclave-attest, as a JSON array of digests (set in SetUp).
inline std::string g_workloads = "[]";

// What the test policies let leave in clear by default: every result but a linear
// model's coefficients (trainer/clear_outputs.h).
inline const char kClearOutputs[] =
    R"(["loss","accuracy","roc_auc","rmse","mae","r2","board_metrics","curves","importance"])";

inline std::string UsagePolicyJson(const std::string& attestation_sha256, uint64_t serial, int lease_s = 600,
                            int reattest_s = 60, const std::string& requester = "alice@hospital.example",
                            const std::string& released_keys = "may-be-written",
                            const std::string& clear_metrics = kClearOutputs) {
  return R"({"format":"enclave-data-use-policy","version":2,"policy_id":"medical","serial":)" + std::to_string(serial) +
         R"(,"description":"test","attestation_policy_sha256":")" + attestation_sha256 +
         R"(","datasets":[{"id":"wdbc","job_kinds":["train","cv"],"requesters":[")" + requester +
         R"("],"workloads":)" + g_workloads + R"(},{"id":"other","job_kinds":["cv"],"requesters":["*"],"workloads":)" +
         g_workloads + R"(}],"cipher_suites":["aes-256-gcm"],)"
         R"("lease":{"duration_s":)" + std::to_string(lease_s) + R"(,"reattest_interval_s":)" + std::to_string(reattest_s) +
         R"(},"max_epochs":100,"max_world_size":4,"outputs":{"model":"encrypted-to-export-key",)"
         R"("clear_metrics":)" + clear_metrics + R"(,"released_keys":")" + released_keys + R"("}})";
}

class ReleaseTest : public EnrolAttestTest {
 protected:
  void SetUp() override {
    EnrolAttestTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    settings_.extra_config = "\n[release]\npolicy_signers = [\"officer.pub\"]\nexport_key = \"tenant-export\"\n"
                             "\n[admin]\ntoken_file = \"admin.token\"\n";
    settings_.before_launch = [this](const std::string& dir) -> Status { return PrepareKeys(dir); };
    // PCR 10 is quoted: the IMA log it covers shows which workload asks.
    settings_.quote_pcrs = R"({"sha256": [0, 1, 2, 3, 4, 5, 6, 7, 10]})";
    test_workload_ = TestWorkload();
    g_workloads = "[\"" + HexEncode(WorkloadDigest(test_workload_)) + "\"";
#ifdef ENCLAVE_TRAIN_BIN
    Measure(ENCLAVE_TRAIN_BIN);
    g_workloads += ",\"" + HexEncode(WorkloadOfFile(ENCLAVE_TRAIN_BIN)) + "\"";
#endif
#ifdef ENCLAVE_ATTEST_BIN
    Measure(ENCLAVE_ATTEST_BIN);
    g_workloads += ",\"" + HexEncode(WorkloadOfFile(ENCLAVE_ATTEST_BIN)) + "\"";
#endif
    g_workloads += "]";
  }

  // The broker folder gets the keys and the sealed sample dataset before the broker starts.
  void PrepareKeysAndSampleBeforeLaunch() {
    settings_.before_launch = [this](const std::string& dir) -> Status {
      RETURN_IF_ERROR(PrepareKeys(dir));
      return SealSample(dir).status();
    };
  }

  // Officer key, admin token, and the tenant's data keys and export key (once per folder).
  Status PrepareKeys(const std::string& dir) {
    if (std::filesystem::exists(dir + "/" + kOfficerKey)) return OkStatus();
    ASSIGN_OR_RETURN(PolicySignerKey officer, PolicySignerKey::Generate());
    RETURN_IF_ERROR(officer.Save(dir + "/" + kOfficerKey));
    RETURN_IF_ERROR(SaveSignerPublicKey(dir + "/officer.pub", officer.public_key()));
    testing::WriteText(dir + "/admin.token", std::string(kToken) + "\n");
    ::chmod((dir + "/admin.token").c_str(), 0600);
    ASSIGN_OR_RETURN(crypto::SecretBytes pass, crypto::SecretBytes::CopyFrom(AsBytes(testing::kPassphrase)));
    ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(dir + "/tenant.keystore", pass));
    ASSIGN_OR_RETURN(wdbc_dek_, ks.CreateDataKey("wdbc", crypto::Suite::kAes256Gcm, &wdbc_key_id_));
    ASSIGN_OR_RETURN(crypto::SecretBytes other, ks.CreateDataKey("other", crypto::Suite::kAes256Gcm, &other_key_id_));
    ASSIGN_OR_RETURN(crypto::SecretBytes chacha,
                     ks.CreateDataKey("wdbc-chacha", crypto::Suite::kChaCha20Poly1305, &chacha_key_id_));
    ASSIGN_OR_RETURN(crypto::ExportKeyEntry ek, ks.CreateExportKey("tenant-export"));
    export_public_ = ek.public_key;
    return OkStatus();
  }

  // A small two-class CSV sealed as dataset "wdbc" under a fresh DEK of the tenant
  // keystore (DIR/wdbc.sealed); the key id, hex.
  static Result<std::string> SealSample(const std::string& dir) {
    std::string csv = "a,b,label\n";
    for (int i = 0; i < 40; ++i) {
      const bool yes = i % 2 == 0;
      csv += std::to_string(i % 7 + (yes ? 10 : 0)) + "," + std::to_string(i % 5) + "," + (yes ? "yes" : "no") + "\n";
    }
    ASSIGN_OR_RETURN(dataset::DatasetInfo info, SealAsWdbc(dir, "data.csv", csv));
    return HexEncode(info.header.params.key_id);
  }

  // `csv` (label column "label", positive "yes") written to DIR/`name` and sealed as
  // dataset "wdbc" under a fresh DEK of the tenant keystore, to DIR/wdbc.sealed.
  static Result<dataset::DatasetInfo> SealAsWdbc(const std::string& dir, const std::string& name,
                                                 const std::string& csv) {
    testing::WriteText(dir + "/" + name, csv);
    ASSIGN_OR_RETURN(crypto::SecretBytes pass, crypto::SecretBytes::CopyFrom(AsBytes(testing::kPassphrase)));
    ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(dir + "/tenant.keystore", pass));
    dataset::SealOptions o;
    o.csv_path = dir + "/" + name;
    o.out_path = dir + "/wdbc.sealed";
    o.label.column = "label";
    o.label.positive = "yes";
    o.dataset_id = "wdbc";
    return dataset::SealCsv(o, ks);
  }

  std::string JobToml(const std::string& output_dir, const std::string& job_id) {
    return "output_dir = \"" + output_dir + "\"\n[broker]\nurl = \"https://127.0.0.1:" + std::to_string(broker_->port()) +
           "\"\nca = \"" + broker_->Path("tls.crt") +
           "\"\npolicy = \"medical\"\nrequester = \"alice@hospital.example\"\njob_id = \"" + job_id +
           "\"\n[[datasets]]\nid = \"wdbc\"\npath = \"" + broker_->Path("wdbc.sealed") +
           "\"\n[training]\nepochs = 20\nvalidation_fraction = 0.25\n";
  }

  // Keys, and a dataset "wdbc" big enough that 100 epochs of a wide MLP outlast the first
  // renewal (20 s in) by far: each epoch is about 25 GFLOP (seconds on one core), 100
  // epochs minutes.
  Status PrepareKeysAndBigSample(const std::string& dir) {
    RETURN_IF_ERROR(PrepareKeys(dir));
    if (std::filesystem::exists(dir + "/wdbc.sealed")) return OkStatus();
    std::string csv = "a,b,c,d,label\n";
    for (int i = 0; i < 20000; ++i) {
      const bool yes = i % 2 == 0;
      csv += std::to_string(i % 97 + (yes ? 50 : 0)) + "," + std::to_string(i % 13) + "," + std::to_string(i % 7) + "," +
             std::to_string(i % 5) + "," + (yes ? "yes" : "no") + "\n";
    }
    return SealAsWdbc(dir, "big.csv", csv).status();
  }

#ifdef ENCLAVE_ATTEST_BIN
  // Starts the broker, activates the test policy and registers a host whose state is in
  // WORK/`state_name` with `enclave-attest register`; *host gets the host flags
  // (--state, --tcti) that enclave-attest and enclave-train take.
  void StartAndRegister(const std::string& state_name, std::vector<std::string>* host, int lease_s = 600,
                        int reattest_s = 60) {
    StartBroker();
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_EQ(Activate(UsagePolicyJson(AttestationPolicySha256(), 1, lease_s, reattest_s)).status, 200);
    *host = {"--state", work_ + "/" + state_name, "--tcti", fixture_->tcti()};
    std::vector<std::string> reg = {"register", "--broker", "https://127.0.0.1:" + std::to_string(broker_->port()),
                                    "--ca", broker_->Path("tls.crt")};
    reg.insert(reg.end(), host->begin(), host->end());
    std::string out;
    ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_ATTEST_BIN, reg, "", &out), 0) << out;
  }
#endif

#ifdef ENCLAVE_TRAIN_BIN
  // Runs enclave-train with `args` and revokes job `job_id` once its lease exists (the
  // trainer is training by then); waits for the trainer to end.
  struct RevokedRun {
    bool revoked = false;
    int rc = -1;
    double seconds = 0;  // from the start to the trainer's end
    std::string out;
  };
  RevokedRun RunAndRevoke(const std::vector<std::string>& args, const std::string& job_id) {
    RevokedRun r;
    const auto start = std::chrono::steady_clock::now();
    std::thread trainer([&] { r.rc = BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, args, "", &r.out); });
    for (int i = 0; i < 100 && !r.revoked; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::string leases;
      if (BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--json"}, "", &leases) != 0) continue;
      auto j = nlohmann::json::parse(leases, nullptr, false);
      if (j.is_object() && j["leases"].size() == 1) {
        r.revoked = PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", job_id, "test"})).status == 200;
      }
    }
    trainer.join();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
#endif

  std::string AttestationPolicySha256() {
    return HexEncode(crypto::Sha256(AsBytes(testing::ReadText(broker_->Path("policy.json")))));
  }

  // Signs `policy` with the officer key and activates it through the admin API.
  BrokerProcess::Answer Activate(const std::string& policy, const std::string& token = kToken) {
    auto key = PolicySignerKey::Load(broker_->Path(kOfficerKey));
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    auto sig = SignUsagePolicy(policy, *key);
    EXPECT_TRUE(sig.ok()) << sig.status().ToString();
    return PostAdmin("/v1/admin/policies", EncodePolicyActivation({policy, *sig}), token);
  }
  BrokerProcess::Answer PostAdmin(const std::string& path, const std::string& body, const std::string& token = kToken) {
    auto c = broker_->Client();
    httplib::Headers h{{"Authorization", "Bearer " + token}};
    auto r = c->Post(path.c_str(), h, body, "application/json");
    if (!r) return {0, "no answer"};
    return {r->status, r->body};
  }

  std::unique_ptr<BrokerClient> Client() {
    auto c = BrokerClient::Create("https://127.0.0.1:" + std::to_string(broker_->port()), broker_->Path("tls.crt"));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    (*c)->SetNonceSigner(Signer());
    return std::move(c).value();
  }

  // A quoter that binds exactly what it is given; `tamper` changes the binding first.
  BrokerClient::Quoter Quoter(const HostState& state, bool tamper = false) {
    return [this, &state, tamper](const NonceIssued& n, const crypto::Digest256& bound) -> Result<attest::EvidenceBundle> {
      crypto::Digest256 b = bound;
      if (tamper) b[0] ^= 1;
      ASSIGN_OR_RETURN(attest::PcrSelection sel, attest::PcrSelection::FromString(n.pcr_selection));
      auto logs = [this] {
        attest::host::HostLogs l;
        l.ima_log = ImaLog();
        return Result<attest::host::HostLogs>(l);
      };
      return attest::host::MakeEvidence(*tpm_, state, sel, n.nonce, b, logs, Now());
    };
  }

  ReleaseRequest Request(const std::string& job_id = "job-1", uint32_t rank = 0, uint32_t world = 1) {
    ReleaseRequest r;
    r.policy_id = "medical";
    r.job.job_id = job_id;
    r.job.job_digest.fill(0x5a);
    r.job.kind = "train";
    r.job.requester = "alice@hospital.example";
    r.job.datasets = {"wdbc"};
    r.job.epochs = 50;
    r.job.world_size = world;
    r.job.clear_metrics = {"loss", "accuracy"};
    r.rank = rank;
    r.keys = {{"wdbc", wdbc_key_id_}};
    r.workload = test_workload_;
    r.job.workload_digest = WorkloadDigest(r.workload);
    return r;
  }

  // Starts the broker, enrols `state`, activates the usage policy; the host id.
  std::string Ready(const HostState& state, int lease_s = 600, int reattest_s = 60) {
    StartBroker();
    if (HasFatalFailure()) return "";
    const std::string host = Enrol(state);
    auto a = Activate(UsagePolicyJson(AttestationPolicySha256(), 1, lease_s, reattest_s));
    EXPECT_EQ(a.status, 200) << a.body;
    return host;
  }

  size_t CountType(audit::EventType type) {
    size_t n = 0;
    for (const auto& e : AuditEntries()) n += e.event.type == type;
    return n;
  }

  crypto::SecretBytes wdbc_dek_;
  crypto::Id128 wdbc_key_id_{}, other_key_id_{}, chacha_key_id_{};
  Workload test_workload_;
  crypto::X25519PublicKey export_public_{};
};

}  // namespace enclave::broker
