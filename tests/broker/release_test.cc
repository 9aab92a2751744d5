// Attested key release against the real broker process: swtpm host, TLS on loopback, a
// SQLite store, the audit log, a signed data-use policy activated through the admin API.
#include "release_fixture.h"

namespace enclave::broker {
namespace {

// The rendezvous address grammar: HOST:PORT, or a plugin listen handle (enclave-train's
// ranks), exactly 128 lower-case hex digits after "enclave-net:".
TEST(RendezvousAddressTest, AcceptsHostPortAndNetHandlesOnly) {
  auto parse = [](const std::string& address) {
    return ParseRendezvousRequest(EncodeRendezvousRequest({"00000000000000000000000000000001", address, {}})).ok();
  };
  const std::string hex(128, 'a');
  EXPECT_TRUE(parse("10.0.0.5:40123"));
  EXPECT_TRUE(parse(""));
  EXPECT_TRUE(parse("enclave-net:" + hex));
  EXPECT_TRUE(parse("enclave-net:" + std::string(64, '0') + std::string(64, 'f')));
  EXPECT_FALSE(parse("enclave-net:" + hex.substr(1)));
  EXPECT_FALSE(parse("enclave-net:" + hex + "a"));
  EXPECT_FALSE(parse("enclave-net:" + std::string(128, 'A')));
  EXPECT_FALSE(parse("enclave-net:" + std::string(127, 'a') + "g"));
  EXPECT_FALSE(parse("enclave-nets:" + hex));
  EXPECT_FALSE(parse("10.0.0.5"));
}

bool Same(const crypto::SecretBytes& a, const crypto::SecretBytes& b) {
  return a.size() == b.size() && crypto::ConstantTimeEquals(a.ExposeSecret(), b.ExposeSecret());
}

TEST_F(ReleaseTest, HappyPathReleasesTheKeysSealedToTheAttestedProcessAndLogsFirst) {
  HostState state = State("host");
  const std::string host = Ready(state);
  ASSERT_FALSE(host.empty());
  auto keys = ReleaseKeys::Generate();
  ASSERT_TRUE(keys.ok());
  auto rel = Client()->RequestRelease(host, Request(), *keys, Quoter(state));
  ASSERT_TRUE(rel.ok()) << rel.status().ToString() << "\n" << broker_->log();
  ASSERT_EQ(rel->keys.size(), 1u);
  EXPECT_EQ(rel->keys[0].dataset_id, "wdbc");
  EXPECT_EQ(rel->keys[0].key_id, wdbc_key_id_);
  // The DEK the broker released is the tenant's DEK (read back from the keystore).
  auto pass = crypto::SecretBytes::CopyFrom(AsBytes(testing::kPassphrase));
  auto ks = crypto::Keystore::Unlock(broker_->Path("tenant.keystore"), *pass);
  ASSERT_TRUE(ks.ok());
  auto dek = ks->GetDataKey("wdbc", wdbc_key_id_);
  ASSERT_TRUE(dek.ok());
  EXPECT_TRUE(Same(rel->keys[0].dek, *dek));
  EXPECT_EQ(rel->job_key.size(), 32u);
  EXPECT_EQ(rel->export_key.public_key, export_public_);
  EXPECT_EQ(rel->export_key.keystore_id, ks->id());
  EXPECT_EQ(rel->lease.host_id, host);
  EXPECT_GT(rel->lease.valid_until, rel->lease.reattest_by);
  EXPECT_EQ(rel->ranks_joined, std::vector<uint32_t>{0});

  // The log: the verdict with the request's binding, then key.released naming the policy.
  auto entries = AuditEntries();
  ASSERT_GE(entries.size(), 4u);  // enrolled, policy activated, verdict, released
  const audit::Entry& released = entries.back();
  ASSERT_EQ(released.event.type, audit::EventType::kKeyReleased);
  EXPECT_EQ(released.seq, rel->audit_index);
  EXPECT_EQ(released.event.fields["lease_id"], rel->lease.lease_id);
  EXPECT_EQ(released.event.fields["policy_id"], "medical");
  EXPECT_EQ(released.event.fields["key_id"], HexEncode(wdbc_key_id_));
  const audit::Entry& verdict = entries[entries.size() - 2];
  ASSERT_EQ(verdict.event.type, audit::EventType::kAttestationVerdict);
  EXPECT_EQ(verdict.event.fields["verdict"], "accepted");
  // No key material anywhere: not the DEK, not the job key, in the log, the store or the broker's log.
  const std::string dek_hex = HexEncode(dek->ExposeSecret()), job_hex = HexEncode(rel->job_key.ExposeSecret());
  for (const std::string& file : {broker_->Path("state/broker.db"), broker_->Path("state/broker.db-wal"),
                                  broker_->Path("broker.log")}) {
    const std::string text = testing::ReadText(file);
    EXPECT_EQ(text.find(dek_hex), std::string::npos) << file;
    const std::string raw(reinterpret_cast<const char*>(dek->ExposeSecret().data()), dek->size());
    EXPECT_EQ(text.find(raw), std::string::npos) << file;
    const std::string raw_job(reinterpret_cast<const char*>(rel->job_key.ExposeSecret().data()), 32);
    EXPECT_EQ(text.find(raw_job), std::string::npos) << file;
    EXPECT_EQ(text.find(job_hex), std::string::npos) << file;
  }
  for (const auto& e : entries) EXPECT_EQ(e.event.fields.dump().find(dek_hex), std::string::npos);
  // The admin listing sees the lease.
  std::string out;
  ASSERT_EQ(BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--json"}, "", &out), 0) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  ASSERT_EQ(j["leases"].size(), 1u);
  EXPECT_EQ(j["leases"][0]["lease_id"], rel->lease.lease_id);
}

TEST_F(ReleaseTest, EvidenceBoundToAnotherRequestIsRefusedAndTheVerdictLogged) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto keys = ReleaseKeys::Generate();
  auto rel = Client()->RequestRelease(host, Request(), *keys, Quoter(state, /*tamper=*/true));
  ASSERT_FALSE(rel.ok());
  EXPECT_EQ(rel.status().code(), Code::kPermissionDenied) << rel.status().ToString();
  auto entries = AuditEntries();
  ASSERT_EQ(entries.back().event.type, audit::EventType::kAttestationVerdict);
  EXPECT_EQ(entries.back().event.fields["verdict"], "rejected");
  EXPECT_EQ(CountType(audit::EventType::kKeyReleased), 0u);
}

TEST_F(ReleaseTest, AnotherEphemeralKeyThanTheQuotedOneIsRefused) {
  // Evidence made for one recipient key, sent with another: the binding differs.
  HostState state = State("host");
  const std::string host = Ready(state);
  auto client = Client();
  auto n = client->Nonce(host);
  ASSERT_TRUE(n.ok());
  auto mine = ReleaseKeys::Generate(), thief = ReleaseKeys::Generate();
  ReleaseRequest r = Request();
  r.recipient = mine->recipient();
  r.report_key = mine->report_public();
  auto ev = Quoter(state)(*n, ReleaseBinding(r));
  ASSERT_TRUE(ev.ok());
  r.evidence = attest::EncodeEvidenceBundle(*ev);
  r.recipient = thief->recipient();
  auto a = broker_->Post("/v1/releases", EncodeReleaseRequest(r));
  EXPECT_EQ(a.status, 403) << a.body;
  EXPECT_EQ(CountType(audit::EventType::kKeyReleased), 0u);
}

TEST_F(ReleaseTest, ReplayedAndExpiredNoncesAreRefused) {
  settings_.nonce_ttl_s = 2;
  HostState state = State("host");
  const std::string host = Ready(state);
  auto client = Client();
  auto n = client->Nonce(host);
  ASSERT_TRUE(n.ok());
  auto keys = ReleaseKeys::Generate();
  ReleaseRequest r = Request();
  r.recipient = keys->recipient();
  r.report_key = keys->report_public();
  auto ev = Quoter(state)(*n, ReleaseBinding(r));
  ASSERT_TRUE(ev.ok());
  r.evidence = attest::EncodeEvidenceBundle(*ev);
  auto first = broker_->Post("/v1/releases", EncodeReleaseRequest(r));
  EXPECT_EQ(first.status, 200) << first.body;
  auto replay = broker_->Post("/v1/releases", EncodeReleaseRequest(r));
  EXPECT_EQ(replay.status, 409) << replay.body;
  EXPECT_NE(replay.body.find("already used"), std::string::npos) << replay.body;

  auto late = client->Nonce(host);
  ASSERT_TRUE(late.ok());
  auto ev2 = Quoter(state)(*late, ReleaseBinding(r));
  ASSERT_TRUE(ev2.ok());
  r.evidence = attest::EncodeEvidenceBundle(*ev2);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto expired = broker_->Post("/v1/releases", EncodeReleaseRequest(r));
  EXPECT_EQ(expired.status, 409) << expired.body;
  EXPECT_NE(expired.body.find("expired"), std::string::npos) << expired.body;
  EXPECT_EQ(CountType(audit::EventType::kKeyReleased), 1u);
}

TEST_F(ReleaseTest, AHostThatIsNotEnrolledGetsNoNonce) {
  HostState state = State("host");
  Ready(state);
  auto n = Client()->Nonce(std::string(32, 'a'));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kNotFound) << n.status().ToString();
}

TEST_F(ReleaseTest, PolicyRefusalsAreLoggedWithEveryReason) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto keys = ReleaseKeys::Generate();
  ReleaseRequest r = Request();
  r.job.requester = "mallory@elsewhere.example";  // not allowed for wdbc
  r.job.epochs = 1000;                             // over max_epochs
  auto rel = Client()->RequestRelease(host, r, *keys, Quoter(state));
  ASSERT_FALSE(rel.ok());
  EXPECT_EQ(rel.status().code(), Code::kPermissionDenied);
  auto entries = AuditEntries();
  const audit::Entry& refused = entries.back();
  ASSERT_EQ(refused.event.type, audit::EventType::kReleaseRefused);
  const std::string reason = refused.event.fields["reason"].get<std::string>();
  EXPECT_NE(reason.find("mallory"), std::string::npos) << reason;
  EXPECT_NE(reason.find("1000"), std::string::npos) << reason;
  EXPECT_TRUE(refused.event.fields.contains("policy_digest"));

  // A dataset the policy does not name; a suite it does not allow; a policy not active.
  ReleaseRequest other = Request();
  other.keys = {{"wdbc-chacha", chacha_key_id_}};
  other.job.datasets = {"wdbc-chacha"};
  EXPECT_EQ(Client()->RequestRelease(host, other, *keys, Quoter(state)).status().code(), Code::kPermissionDenied);
  ReleaseRequest unknown = Request();
  unknown.policy_id = "no-such-policy";
  EXPECT_EQ(Client()->RequestRelease(host, unknown, *keys, Quoter(state)).status().code(), Code::kPermissionDenied);
  ReleaseRequest wrong_key = Request();
  wrong_key.keys[0].key_id = other_key_id_;  // a key id the keystore has for another dataset
  EXPECT_EQ(Client()->RequestRelease(host, wrong_key, *keys, Quoter(state)).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(CountType(audit::EventType::kReleaseRefused), 4u);
  EXPECT_EQ(CountType(audit::EventType::kKeyReleased), 0u);
}

TEST_F(ReleaseTest, UnsignedTamperedOrUntrustedPoliciesAreNotActivated) {
  HostState state = State("host");
  StartBroker();
  const std::string policy = UsagePolicyJson(AttestationPolicySha256(), 1);
  auto key = PolicySignerKey::Load(broker_->Path(kOfficerKey));
  ASSERT_TRUE(key.ok());
  auto sig = SignUsagePolicy(policy, *key);
  ASSERT_TRUE(sig.ok());
  std::string tampered = policy;
  tampered.replace(tampered.find("\"max_epochs\":100"), 16, "\"max_epochs\":900");
  EXPECT_EQ(PostAdmin("/v1/admin/policies", EncodePolicyActivation({tampered, *sig})).status, 403);
  EXPECT_EQ(PostAdmin("/v1/admin/policies", EncodePolicyActivation({policy, "{}"})).status, 400);
  auto stranger = PolicySignerKey::Generate();
  auto stranger_sig = SignUsagePolicy(policy, *stranger);
  EXPECT_EQ(PostAdmin("/v1/admin/policies", EncodePolicyActivation({policy, *stranger_sig})).status, 403);
  // Without the admin token nothing is activated at all.
  EXPECT_EQ(PostAdmin("/v1/admin/policies", EncodePolicyActivation({policy, *sig}), "wrong-token").status, 401);
  // A policy for another attestation policy is refused; then the good one; then no going back.
  EXPECT_EQ(Activate(UsagePolicyJson(std::string(64, '0'), 1)).status, 409);
  EXPECT_EQ(Activate(policy).status, 200);
  EXPECT_EQ(Activate(policy).status, 409);
  EXPECT_EQ(Activate(UsagePolicyJson(AttestationPolicySha256(), 2)).status, 200);
  EXPECT_EQ(CountType(audit::EventType::kPolicyActivated), 2u);
  // The signature file's limit is 64 KiB everywhere (the verifier, this message, the
  // CLI): a valid signature with 20 KiB of JSON whitespace is taken, one over 64 KiB is not.
  const std::string policy3 = UsagePolicyJson(AttestationPolicySha256(), 3);
  auto sig3 = SignUsagePolicy(policy3, *key);
  ASSERT_TRUE(sig3.ok());
  EXPECT_EQ(PostAdmin("/v1/admin/policies", EncodePolicyActivation({policy3, *sig3 + std::string(70 << 10, ' ')})).status,
            400);
  EXPECT_EQ(PostAdmin("/v1/admin/policies", EncodePolicyActivation({policy3, *sig3 + std::string(20 << 10, ' ')})).status,
            200);
  EXPECT_EQ(CountType(audit::EventType::kPolicyActivated), 3u);
}

TEST_F(ReleaseTest, RevokedHostAndJobGetNothingAndTheirLeasesEnd) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto keys = ReleaseKeys::Generate();
  auto client = Client();
  auto rel = client->RequestRelease(host, Request("job-a"), *keys, Quoter(state));
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  // Revoke the job: its lease ends, renewal and new releases of it are refused.
  auto a = PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "job-a", "test: job revoked"}));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(nlohmann::json::parse(a.body)["leases_ended"], 1);
  auto renewed = client->Renew(rel->lease, keys->recipient(), Quoter(state));
  ASSERT_FALSE(renewed.ok());
  EXPECT_EQ(renewed.status().code(), Code::kFailedPrecondition) << renewed.status().ToString();
  EXPECT_EQ(client->RequestRelease(host, Request("job-a"), *keys, Quoter(state)).status().code(), Code::kPermissionDenied);
  // Another job still works; then revoke the host: nothing more for it.
  ASSERT_TRUE(client->RequestRelease(host, Request("job-b"), *keys, Quoter(state)).ok());
  std::string out;
  ASSERT_EQ(BrokerProcess::RunBroker({"revoke", "--config", broker_->config(), "--url",
                                      "https://127.0.0.1:" + std::to_string(broker_->port()), "--host", host,
                                      "--reason", "test: host revoked"},
                                     "", &out),
            0)
      << out;
  auto n = client->Nonce(host);
  EXPECT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kPermissionDenied);
  EXPECT_EQ(CountType(audit::EventType::kRevoked), 2u);
  ASSERT_EQ(BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--json"}, "", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["leases"].size(), 0u);  // no active lease left
}

// A revocation that lands while a release or a renewal of its job is in flight (past the
// early revocation check, during the appraisal): the release is refused, or its lease was
// stored before and the revocation ends it; the renewal is refused, or was committed and
// logged before. Never an active lease after a revocation is acknowledged, and the audit
// log never shows a key released or a lease renewed after the revocation of its job.
// (Rounds with staggered delays, so that the revocation lands inside the appraisal window.)
TEST_F(ReleaseTest, ARevocationDuringAReleaseOrRenewalLeavesNoActiveLeaseAndNoLaterEntry) {
  settings_.threads = 8;
  HostState state = State("host");
  const std::string host = Ready(state);
  auto client = Client();
  auto keys = ReleaseKeys::Generate();
  ASSERT_TRUE(keys.ok());
  // A release body for `job`, quoted now (the quotes are appraised in the order made).
  auto release_body = [&](const std::string& job) {
    ReleaseRequest r = Request(job);
    r.recipient = keys->recipient();
    r.report_key = keys->report_public();
    auto n = client->Nonce(host);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    auto ev = Quoter(state)(*n, ReleaseBinding(r));
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    r.evidence = attest::EncodeEvidenceBundle(*ev);
    return EncodeReleaseRequest(r);
  };
  int released = 0, release_refused = 0, renewed = 0, renewal_refused = 0;
  for (int round = 0; round < 12; ++round) {
    const auto delay = std::chrono::milliseconds(4 * round);
    // A release racing the revocation of its job.
    const std::string job = "race-rel-" + std::to_string(round);
    const std::string body = release_body(job);
    BrokerProcess::Answer rel, rev;
    std::thread t([&] { rel = broker_->Post("/v1/releases", body); });
    std::this_thread::sleep_for(delay);
    rev = PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", job, "race"}));
    t.join();
    ASSERT_EQ(rev.status, 200) << rev.body;
    ASSERT_TRUE(rel.status == 200 || rel.status == 403) << rel.status << " " << rel.body;
    if (rel.status == 200) {
      ++released;
      EXPECT_EQ(rev.json()["leases_ended"], 1) << "a key released before the revocation: its lease must end with it";
    } else {
      ++release_refused;
    }
    // A renewal racing the revocation of its job.
    const std::string job2 = "race-ren-" + std::to_string(round);
    auto rel2 = client->RequestRelease(host, Request(job2), *keys, Quoter(state));
    ASSERT_TRUE(rel2.ok()) << rel2.status().ToString();
    auto n = client->Nonce(host);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    auto ev = Quoter(state)(*n, RenewalBinding(rel2->lease.lease_id, keys->recipient()));
    ASSERT_TRUE(ev.ok()) << ev.status().ToString();
    const std::string renew_body = EncodeRenewalRequest({attest::EncodeEvidenceBundle(*ev)});
    BrokerProcess::Answer ren;
    std::thread t2([&] { ren = broker_->Post("/v1/leases/" + rel2->lease.lease_id + "/renewals", renew_body); });
    std::this_thread::sleep_for(delay);
    rev = PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", job2, "race"}));
    t2.join();
    ASSERT_EQ(rev.status, 200) << rev.body;
    EXPECT_EQ(rev.json()["leases_ended"], 1);
    if (ren.status == 200) {
      ++renewed;
    } else {
      EXPECT_TRUE(ren.status == 403 || ren.status == 409) << ren.status << " " << ren.body;
      ++renewal_refused;
    }
  }
  std::cerr << "releases: " << released << " granted, " << release_refused << " refused; renewals: " << renewed
            << " granted, " << renewal_refused << " refused\n";
  // No active lease is left.
  std::string out;
  ASSERT_EQ(BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--json"}, "", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["leases"].size(), 0u) << out;
  // Nothing is logged for a job after its revocation.
  std::set<std::string> revoked_jobs;
  std::map<std::string, std::string> job_of_lease;
  for (const auto& e : AuditEntries()) {
    const auto& f = e.event.fields;
    if (e.event.type == audit::EventType::kRevoked && f["subject"] == "job") revoked_jobs.insert(f["subject_id"]);
    if (e.event.type == audit::EventType::kKeyReleased) {
      const std::string job = f["job_id"].get<std::string>();
      job_of_lease[f["lease_id"].get<std::string>()] = job;
      EXPECT_EQ(revoked_jobs.count(job), 0u)
          << "key.released (entry " << e.seq << ") after job " << job << " was revoked";
    }
    if (e.event.type == audit::EventType::kLeaseRenewed) {
      const std::string job = job_of_lease[f["lease_id"].get<std::string>()];
      EXPECT_EQ(revoked_jobs.count(job), 0u)
          << "lease.renewed (entry " << e.seq << ") after job " << job << " was revoked";
    }
  }
}

// A refusal whose reasons are longer than the audit log's text field (here: 64 keys the
// keystore does not have) is still logged, its reason cut to fit and marked, and answered
// 403 (not 503).
TEST_F(ReleaseTest, ARefusalWithAVeryLongReasonIsLoggedTruncatedAnd403) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto keys = ReleaseKeys::Generate();
  ReleaseRequest r = Request("job-long");
  r.keys.clear();
  r.job.datasets.clear();
  for (size_t i = 0; i < kMaxReleaseKeys; ++i) {
    KeyRef k;
    k.dataset_id = "dataset-" + std::to_string(i) + "-" + std::string(100, 'x');
    k.key_id.fill(static_cast<uint8_t>(i));
    r.keys.push_back(k);
    r.job.datasets.push_back(k.dataset_id);
  }
  auto rel = Client()->RequestRelease(host, r, *keys, Quoter(state));
  ASSERT_FALSE(rel.ok());
  EXPECT_EQ(rel.status().code(), Code::kPermissionDenied) << rel.status().ToString();
  bool logged = false;
  for (const auto& e : AuditEntries()) {
    if (e.event.type != audit::EventType::kReleaseRefused) continue;
    logged = true;
    const std::string reason = e.event.fields["reason"].get<std::string>();
    EXPECT_LE(reason.size(), kMaxAuditTextBytes);
    EXPECT_NE(reason.find("the keystore has no key"), std::string::npos) << reason;
    EXPECT_NE(reason.find("[truncated: "), std::string::npos) << reason;
  }
  EXPECT_TRUE(logged);
}

TEST(AuditTextTest, CutsAtACharacterBoundaryMarksTheCutAndCleansWhatTheLogRefuses) {
  EXPECT_EQ(AuditText("short reason"), "short reason");
  EXPECT_EQ(AuditText(""), "-");
  EXPECT_EQ(AuditText("a\nb\x01" "c"), "a b c");
  EXPECT_EQ(AuditText("bad \xff byte"), "bad ? byte");
  EXPECT_EQ(AuditText("overlong \xc0\xaf"), "overlong ??");
  // 3-byte characters across the cut: never half a character.
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "\xe2\x82\xac";  // U+20AC
  const std::string cut = AuditText(text);
  EXPECT_LE(cut.size(), kMaxAuditTextBytes);
  const std::string marker = " [truncated: " + std::to_string(text.size()) + " bytes in all]";
  ASSERT_GT(cut.size(), marker.size());
  EXPECT_EQ(cut.substr(cut.size() - marker.size()), marker);
  EXPECT_EQ((cut.size() - marker.size()) % 3, 0u);
  EXPECT_EQ(AuditText(std::string(kMaxAuditTextBytes, 'a')), std::string(kMaxAuditTextBytes, 'a'));
  EXPECT_LE(AuditText(std::string(kMaxAuditTextBytes + 1, 'a')).size(), kMaxAuditTextBytes);
}

TEST_F(ReleaseTest, RenewalMovesTheDeadlineAndSurvivesARestart) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto keys = ReleaseKeys::Generate();
  auto rel = Client()->RequestRelease(host, Request("job-r", 0, 2), *keys, Quoter(state));
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  // The broker is killed mid-lease and comes back with its state.
  ASSERT_TRUE(broker_->Restart().ok());
  auto client = Client();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto renewed = client->Renew(rel->lease, keys->recipient(), Quoter(state));
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString() << "\n" << broker_->log();
  EXPECT_GT(renewed->reattest_by, rel->lease.reattest_by);
  EXPECT_EQ(renewed->valid_until, rel->lease.valid_until);
  EXPECT_EQ(CountType(audit::EventType::kLeaseRenewed), 1u);
  // Rank 1 of the same job gets the same job key after the restart.
  auto keys2 = ReleaseKeys::Generate();
  auto rank1 = client->RequestRelease(host, Request("job-r", 1, 2), *keys2, Quoter(state));
  ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
  EXPECT_TRUE(Same(rank1->job_key, rel->job_key));
  EXPECT_EQ(rank1->ranks_joined, (std::vector<uint32_t>{0, 1}));
  // Evidence bound to another lease's recipient does not renew, and leaves the lease as it
  // was (only the host's own quote for this renewal may end it: issue 16 §5).
  auto bad = client->Renew(rel->lease, keys2->recipient(), Quoter(state));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kPermissionDenied);
  EXPECT_TRUE(client->Renew(rel->lease, keys->recipient(), Quoter(state)).ok());
}

TEST_F(ReleaseTest, AJobIdNamesOneJobAndAProcessOfAnotherJobGetsAnotherKey) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto keys = ReleaseKeys::Generate();
  auto client = Client();
  auto a = client->RequestRelease(host, Request("job-x"), *keys, Quoter(state));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ReleaseRequest other = Request("job-x");
  other.job.job_digest.fill(0x77);  // same id, another job file
  EXPECT_EQ(client->RequestRelease(host, other, *keys, Quoter(state)).status().code(), Code::kPermissionDenied);
  auto b = client->RequestRelease(host, Request("job-y"), *keys, Quoter(state));
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(Same(a->job_key, b->job_key));
}

#ifdef ENCLAVE_TRAIN_BIN
// Issue 16 §2: a job key is bound to the whole job. Reproduced on 08a59af: a medical job
// released under one policy; a requester released only another dataset under another
// policy, naming the same job id, digest and world size, received the same job key (and so
// the medical job's checkpoint key and its transport traffic).
TEST_F(ReleaseTest, AJobKeyIsBoundToTheWholeJob) {
  HostState state = State("host");
  const std::string host = Ready(state);
  std::string credit = UsagePolicyJson(AttestationPolicySha256(), 1);
  credit.replace(credit.find(R"("policy_id":"medical")"), 21, R"("policy_id":"credit")");
  ASSERT_EQ(Activate(credit).status, 200);
  auto client = Client();
  auto k0 = ReleaseKeys::Generate();
  auto medical = client->RequestRelease(host, Request("job-med", 0, 2), *k0, Quoter(state));
  ASSERT_TRUE(medical.ok()) << medical.status().ToString();
  const size_t refused_before = CountType(audit::EventType::kReleaseRefused);

  // Rank 1 of "the same job" under the other policy, for the other dataset only.
  ReleaseRequest other = Request("job-med", 1, 2);
  other.policy_id = "credit";
  other.job.kind = "cv";
  other.job.requester = "mallory@bank.example";
  other.job.datasets = {"other"};
  other.keys = {{"other", other_key_id_}};
  auto k1 = ReleaseKeys::Generate();
  auto stolen = client->RequestRelease(host, other, *k1, Quoter(state));
  ASSERT_FALSE(stolen.ok()) << "the other policy's requester received the medical job's key";
  EXPECT_EQ(stolen.status().code(), Code::kPermissionDenied);
  // Another workload, or another world size, is another job as well.
  ReleaseRequest other_code = Request("job-med", 1, 2);
  auto train_workload = WorkloadOfExecutable(ENCLAVE_TRAIN_BIN, std::filesystem::canonical(ENCLAVE_TRAIN_BIN).string());
  ASSERT_TRUE(train_workload.ok());
  other_code.workload = *train_workload;
  other_code.job.workload_digest = WorkloadDigest(other_code.workload);
  EXPECT_EQ(client->RequestRelease(host, other_code, *k1, Quoter(state)).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(client->RequestRelease(host, Request("job-med", 1, 3), *k1, Quoter(state)).status().code(),
            Code::kPermissionDenied);
  // Each refusal is logged with what differs.
  std::vector<std::string> reasons;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kReleaseRefused) reasons.push_back(e.event.fields["reason"]);
  }
  ASSERT_EQ(reasons.size(), refused_before + 3);
  EXPECT_NE(reasons[refused_before].find("is another job: its data-use policy"), std::string::npos)
      << reasons[refused_before];
  EXPECT_NE(reasons[refused_before].find("datasets"), std::string::npos) << reasons[refused_before];
  EXPECT_NE(reasons[refused_before + 1].find("workload differ"), std::string::npos) << reasons[refused_before + 1];
  EXPECT_NE(reasons[refused_before + 2].find("world size (2, asked 3)"), std::string::npos) << reasons[refused_before + 2];
  // The real second rank (the same binding) joins and shares the key.
  auto rank1 = client->RequestRelease(host, Request("job-med", 1, 2), *k1, Quoter(state));
  ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
  EXPECT_TRUE(Same(medical->job_key, rank1->job_key));
}
#endif

// Issue 16 §1: keys go to approved code, not to any process on an attested host. The
// release names its workload; the broker finds its executable in the quoted IMA log and the
// data-use policy must approve its digest for every dataset. Each refusal is logged.
TEST_F(ReleaseTest, OnlyAMeasuredApprovedWorkloadGetsKeys) {
  // The policy approves a program this host never ran: only the IMA log can tell.
  Workload never_run;
  never_run.executable = {"/usr/bin/not-run", crypto::Sha256(AsBytes(std::string("never executed")))};
  g_workloads.insert(g_workloads.size() - 1, ",\"" + HexEncode(WorkloadDigest(never_run)) + "\"");
  HostState state = State("host");
  const std::string host = Ready(state);
  auto client = Client();
  auto keys = ReleaseKeys::Generate();
  auto refusal = [&](const ReleaseRequest& r) -> std::string {
    const size_t before = CountType(audit::EventType::kReleaseRefused);
    auto rel = client->RequestRelease(host, r, *keys, Quoter(state));
    EXPECT_FALSE(rel.ok()) << "released to " << r.workload.executable.path;
    if (rel.ok()) return "";
    EXPECT_EQ(rel.status().code(), Code::kPermissionDenied) << rel.status().ToString();
    std::string reason;
    nlohmann::json last;
    for (const auto& e : AuditEntries()) {
      if (e.event.type == audit::EventType::kReleaseRefused) last = e.event.fields;
    }
    EXPECT_EQ(last["workload"], HexEncode(r.job.workload_digest));
    EXPECT_EQ(last["requester"], r.job.requester);
    if (last.contains("reason")) reason = last["reason"];
    EXPECT_EQ(CountType(audit::EventType::kReleaseRefused), before + 1);
    return reason;
  };
  // A process claims to be an approved program that never ran on the host (not in the IMA
  // log): what any other code on an attested host could claim.
  ReleaseRequest unmeasured = Request("job-u");
  unmeasured.workload = never_run;
  unmeasured.job.workload_digest = WorkloadDigest(never_run);
  std::string reason = refusal(unmeasured);
  EXPECT_NE(reason.find("workload executable /usr/bin/not-run is not measured"), std::string::npos) << reason;
  // A program that ran (measured) but that the policy does not approve.
  Measure("/bin/true");
  ReleaseRequest unapproved = Request("job-v");
  auto w = WorkloadOfExecutable("/bin/true", "/bin/true");
  ASSERT_TRUE(w.ok());
  unapproved.workload = *w;
  unapproved.job.workload_digest = WorkloadDigest(*w);
  reason = refusal(unapproved);
  EXPECT_NE(reason.find("workload " + HexEncode(unapproved.job.workload_digest) + " is not approved for dataset 'wdbc'"),
            std::string::npos)
      << reason;
  // The approved, measured workload gets the keys, and the entry names it and its requester.
  auto ok = client->RequestRelease(host, Request("job-w"), *keys, Quoter(state));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  bool logged = false;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == "job-w") {
      EXPECT_EQ(e.event.fields["workload"], HexEncode(WorkloadDigest(test_workload_)));
      EXPECT_EQ(e.event.fields["requester"], "alice@hospital.example");
      logged = true;
    }
  }
  EXPECT_TRUE(logged);
}

// Issue 16 §5: reproduced on 08a59af, anyone who knew a lease id (it is in the trainer's
// stderr, report.json and the audit log) ended that lease by posting a failed
// re-attestation with a free nonce and any evidence that parses. Only the lease host's own
// quote for this renewal can end it; before that quote is checked, an unknown lease, an
// active one and an ended one get the same answer, and nothing is logged.
TEST_F(ReleaseTest, ALeaseIdAloneNeitherEndsALeaseNorTellsItsState) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto client = Client();
  auto keys = ReleaseKeys::Generate();
  auto rel = client->RequestRelease(host, Request("job-l"), *keys, Quoter(state));
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  auto ended_keys = ReleaseKeys::Generate();
  auto ended = client->RequestRelease(host, Request("job-ended"), *ended_keys, Quoter(state));
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  ASSERT_EQ(PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "job-ended", "ended for the test"})).status,
            200);
  const size_t entries_before = AuditEntries().size();
  // Evidence that parses: this host's real quote for a fresh nonce, but bound to something
  // else (what an outsider could replay), or with its signature damaged.
  auto forged = [&](bool damage_signature) {
    auto n = client->Nonce(host);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    crypto::Digest256 other{};
    other.fill(0x42);
    auto ev = Quoter(state)(*n, other);
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    if (damage_signature) ev->signature.back() ^= 1;
    return EncodeRenewalRequest({attest::EncodeEvidenceBundle(*ev)});
  };
  std::vector<BrokerProcess::Answer> answers;
  for (const std::string& lease_id : {rel->lease.lease_id, std::string(32, 'a'), ended->lease.lease_id}) {
    for (bool damage : {false, true}) {
      answers.push_back(broker_->Post("/v1/leases/" + lease_id + "/renewals", forged(damage)));
    }
  }
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 403) << a.body;
    EXPECT_EQ(a.body, answers[0].body) << "the answers tell the leases apart";
  }
  EXPECT_EQ(AuditEntries().size(), entries_before) << "an unproven renewal was logged";
  // The lease is as it was: its host renews it.
  auto renewed = client->Renew(rel->lease, keys->recipient(), Quoter(state));
  EXPECT_TRUE(renewed.ok()) << renewed.status().ToString();

  // The rendezvous the same way: without the job key every lease looks alike.
  auto stranger = crypto::SecretBytes::Random(32);
  std::vector<BrokerProcess::Answer> meets;
  for (const auto& [job, lease_id] : {std::pair<std::string, std::string>{"job-l", rel->lease.lease_id},
                                      {"job-l", std::string(32, 'b')},
                                      {"job-l", ended->lease.lease_id},
                                      {"job-ended", ended->lease.lease_id},
                                      {"no-such-job", rel->lease.lease_id}}) {
    RendezvousRequest r{lease_id, "10.0.0.66:1", RendezvousProof(*stranger, job, lease_id, "10.0.0.66:1")};
    meets.push_back(broker_->Post("/v1/jobs/" + job + "/rendezvous", EncodeRendezvousRequest(r)));
  }
  for (const auto& a : meets) {
    EXPECT_EQ(a.status, 403) << a.body;
    EXPECT_EQ(a.body, meets[0].body) << "the rendezvous answers tell the leases apart";
  }

  // The host's own quote for this renewal, of a state that fails (PCR 10 extended outside
  // its IMA log: code ran that the log does not show), still ends the lease.
  crypto::Digest256 stray{};
  stray.fill(0x99);
  ASSERT_TRUE(tpm_->ExtendPcr(10, attest::alg::kSha256, stray).ok());
  auto failed = client->Renew(*renewed, keys->recipient(), Quoter(state));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kPermissionDenied);
  EXPECT_EQ(client->Renew(*renewed, keys->recipient(), Quoter(state)).status().code(), Code::kFailedPrecondition);
}

// Issue 16 §6: reproduced on 08a59af, a lease granted under serial 1 kept renewing after
// serial 2 dropped its dataset, at serial 2's interval. A renewal judges the lease under
// the policy in force: one that no longer allows it ends it (logged); one that does sets
// the interval.
TEST_F(ReleaseTest, RenewalJudgesTheLeaseUnderThePolicyInForce) {
  HostState state = State("host");
  const std::string host = Ready(state, /*lease_s=*/600, /*reattest_s=*/60);
  auto client = Client();
  auto keys = ReleaseKeys::Generate();
  auto rel = client->RequestRelease(host, Request("job-p"), *keys, Quoter(state));
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  // Serial 2 still allows the lease, with a longer interval: the renewal uses it.
  ASSERT_EQ(Activate(UsagePolicyJson(AttestationPolicySha256(), 2, 600, 300)).status, 200);
  auto renewed = client->Renew(rel->lease, keys->recipient(), Quoter(state));
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  EXPECT_GT(renewed->reattest_by - Now(), 200);
  // Serial 3 drops the lease's dataset: the next renewal ends the lease.
  auto j = nlohmann::json::parse(UsagePolicyJson(AttestationPolicySha256(), 3));
  j["datasets"].erase(0);  // "wdbc"
  ASSERT_EQ(Activate(j.dump()).status, 200);
  auto refused = client->Renew(*renewed, keys->recipient(), Quoter(state));
  ASSERT_FALSE(refused.ok()) << "a lease renewed under a policy that no longer allows it";
  EXPECT_EQ(refused.status().code(), Code::kPermissionDenied) << refused.status().ToString();
  std::string reason;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kRevoked && e.event.fields["subject_id"] == rel->lease.lease_id)
      reason = e.event.fields["reason"];
  }
  EXPECT_NE(reason.find("policy medical serial 3 no longer allows this lease: dataset 'wdbc' is not in policy"),
            std::string::npos)
      << reason;
  auto again = client->Renew(*renewed, keys->recipient(), Quoter(state));
  EXPECT_EQ(again.status().code(), Code::kFailedPrecondition) << again.status().ToString();  // ended
}

// Issue 16 §6: reproduced on 08a59af, concurrent activations of serials 31, 32, 33 were
// logged as 31, 33, 32 (33 in force): the log showed a move to a lower serial. Activations
// are one at a time: every logged serial is above the one before, and the highest is in force.
TEST_F(ReleaseTest, ConcurrentActivationsAreLoggedInSerialOrder) {
  HostState state = State("host");
  Ready(state);
  uint64_t serial = 10;
  for (int round = 0; round < 8; ++round) {
    std::vector<std::thread> threads;
    for (int k = 0; k < 3; ++k) {
      const uint64_t sn = serial + k;
      threads.emplace_back([this, sn] { Activate(UsagePolicyJson(AttestationPolicySha256(), sn)); });
    }
    for (auto& t : threads) t.join();
    serial += 3;
  }
  std::vector<uint64_t> logged;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kPolicyActivated) logged.push_back(e.event.fields["version"].get<uint64_t>());
  }
  ASSERT_GE(logged.size(), 9u);  // serial 1, then at least one per round
  for (size_t i = 1; i < logged.size(); ++i) EXPECT_LT(logged[i - 1], logged[i]) << "entry " << i;
  std::string out;
  ASSERT_EQ(BrokerProcess::RunBroker({"policies", "--config", broker_->config(), "--json"}, "", &out), 0) << out;
  auto listed = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(listed.is_object() && listed["policies"].is_array()) << out;
  ASSERT_EQ(listed["policies"].size(), 1u) << out;
  EXPECT_EQ(listed["policies"][0]["serial"], serial - 1) << out;
  EXPECT_EQ(logged.back(), serial - 1);
}

TEST_F(ReleaseTest, RendezvousTellsEachRankWhereTheOthersListenOnlyWithTheJobKey) {
  HostState state = State("host");
  const std::string host = Ready(state);
  auto client = Client();
  auto k0 = ReleaseKeys::Generate(), k1 = ReleaseKeys::Generate();
  auto r0 = client->RequestRelease(host, Request("job-rv", 0, 2), *k0, Quoter(state));
  auto r1 = client->RequestRelease(host, Request("job-rv", 1, 2), *k1, Quoter(state));
  ASSERT_TRUE(r0.ok() && r1.ok());
  auto first = client->Rendezvous(r0->lease, r0->job_key, "127.0.0.1:40000");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->complete);
  EXPECT_EQ(first->world_size, 2u);
  auto both = client->Rendezvous(r1->lease, r1->job_key, "127.0.0.1:40001");
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_TRUE(both->complete);
  ASSERT_EQ(both->ranks.size(), 2u);
  EXPECT_EQ(both->ranks[0].address, "127.0.0.1:40000");
  EXPECT_EQ(both->ranks[1].address, "127.0.0.1:40001");
  EXPECT_EQ(both->ranks[1].host_id, host);
  // Reading only (empty address) works for a rank; a proof without the job key does not.
  EXPECT_TRUE(client->Rendezvous(r0->lease, r0->job_key, "").ok());
  auto stranger = crypto::SecretBytes::Random(32);
  auto forged = client->Rendezvous(r0->lease, *stranger, "10.0.0.66:1");
  ASSERT_FALSE(forged.ok());
  EXPECT_EQ(forged.status().code(), Code::kPermissionDenied);
  // A lease of another job cannot be used for this one.
  auto other = client->RequestRelease(host, Request("job-other"), *k0, Quoter(state));
  ASSERT_TRUE(other.ok());
  Lease wrong = other->lease;
  wrong.job_id = "job-rv";
  EXPECT_EQ(client->Rendezvous(wrong, r0->job_key, "").status().code(), Code::kPermissionDenied);
  // Malformed addresses are refused before anything is stored.
  auto bad = broker_->Post("/v1/jobs/job-rv/rendezvous",
                           EncodeRendezvousRequest({r0->lease.lease_id, "no port", RendezvousProof(r0->job_key, "job-rv",
                                                                                                  r0->lease.lease_id,
                                                                                                  "no port")}));
  EXPECT_EQ(bad.status, 400) << bad.body;
  // After the job is revoked its leases have ended: no rendezvous.
  ASSERT_EQ(PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "job-rv", "test"})).status, 200);
  EXPECT_EQ(client->Rendezvous(r0->lease, r0->job_key, "").status().code(), Code::kFailedPrecondition);
}

TEST_F(ReleaseTest, ALeaseNotRenewedInTimeEndsAndCannotBeRenewed) {
  HostState state = State("host");
  const std::string host = Ready(state, /*lease_s=*/60, /*reattest_s=*/30);  // the policy's minimum interval
  auto keys = ReleaseKeys::Generate();
  auto client = Client();
  auto rel = client->RequestRelease(host, Request(), *keys, Quoter(state));
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  EXPECT_EQ(rel->lease.expires_at(), rel->lease.reattest_by);  // what the holder must stop at
  EXPECT_LE(rel->lease.reattest_by - rel->lease.issued_at, 30);
  std::this_thread::sleep_for(std::chrono::seconds(rel->lease.reattest_by - Now() + 1));
  auto late = client->Renew(rel->lease, keys->recipient(), Quoter(state));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), Code::kFailedPrecondition) << late.status().ToString();
  EXPECT_NE(late.status().message().find("not renewed in time"), std::string::npos) << late.status().ToString();
  std::string out;
  ASSERT_EQ(BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--json"}, "", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["leases"].size(), 0u);
  EXPECT_EQ(CountType(audit::EventType::kLeaseRenewed), 0u);
  // Its last lease ended, so the job did: the same job, asked for again, gets no key.
  auto keys2 = ReleaseKeys::Generate();
  auto again = client->RequestRelease(host, Request(), *keys2, Quoter(state));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kPermissionDenied) << again.status().ToString();
  EXPECT_NE(broker_->log().find("job 'job-1' has ended (its last lease ended)"), std::string::npos) << broker_->log();
}

#ifdef ENCLAVE_ATTEST_BIN
// The host side from the command line: register, attest for a job (keys into a new
// keystore), renew; a revoked job's lease no longer renews.
TEST_F(ReleaseTest, EnclaveAttestRegisterAttestRenew) {
  std::string sealed_key_id;
  settings_.before_launch = [this, &sealed_key_id](const std::string& dir) -> Status {
    RETURN_IF_ERROR(PrepareKeys(dir));
    ASSIGN_OR_RETURN(sealed_key_id, SealSample(dir));
    return OkStatus();
  };
  StartBroker();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(Activate(UsagePolicyJson(AttestationPolicySha256(), 1)).status, 200);
  const std::string url = "https://127.0.0.1:" + std::to_string(broker_->port());
  const std::vector<std::string> host = {"--state", work_ + "/cli-host", "--tcti", fixture_->tcti()};
  auto run = [&](std::vector<std::string> args, const std::string& pass = "") {
    args.insert(args.end(), host.begin(), host.end());
    std::string out;
    const int rc = BrokerProcess::RunProgram(ENCLAVE_ATTEST_BIN, args, pass, &out);
    return std::make_pair(rc, out);
  };
  auto [rc, out] = run({"register", "--broker", url, "--ca", broker_->Path("tls.crt"), "--json"});
  ASSERT_EQ(rc, 0) << out;
  testing::WriteText(work_ + "/job.toml", JobToml("out", "cli-job"));
  const std::string job_pass = "another passphrase for the released keys";
  std::tie(rc, out) = run({"attest", "--job", work_ + "/job.toml", "--out", work_ + "/released", "--event-log=",
                           ImaLogFlag(), "--passphrase-fd", "3", "--json"},
                          job_pass);
  ASSERT_EQ(rc, 0) << out;
  // The new keystore holds exactly the tenant's DEK of the sealed file, under the tenant keystore id.
  auto pass = crypto::SecretBytes::CopyFrom(AsBytes(job_pass));
  auto copy = crypto::Keystore::Unlock(work_ + "/released/keys.keystore", *pass);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  auto tenant_pass = crypto::SecretBytes::CopyFrom(AsBytes(testing::kPassphrase));
  auto tenant = crypto::Keystore::Unlock(broker_->Path("tenant.keystore"), *tenant_pass);
  ASSERT_TRUE(tenant.ok());
  EXPECT_EQ(copy->id(), tenant->id());
  ASSERT_EQ(copy->entries().size(), 1u);
  EXPECT_EQ(HexEncode(copy->entries()[0].key_id), sealed_key_id);
  auto a = copy->GetDataKey("wdbc", copy->entries()[0].key_id);
  auto b = tenant->GetDataKey("wdbc", copy->entries()[0].key_id);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(Same(*a, *b));
  auto export_pub = crypto::ReadExportPublicKey(work_ + "/released/export.pub");
  ASSERT_TRUE(export_pub.ok()) << export_pub.status().ToString();
  EXPECT_EQ(export_pub->public_key, export_public_);
  // A second attest into the same folder is refused (7), nothing overwritten.
  std::tie(rc, out) = run({"attest", "--job", work_ + "/job.toml", "--out", work_ + "/released", "--passphrase-fd", "3"},
                          job_pass);
  EXPECT_EQ(rc, 7) << out;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  std::tie(rc, out) = run({"renew", "--lease", work_ + "/released/lease.json", "--event-log=", ImaLogFlag(), "--json"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(CountType(audit::EventType::kLeaseRenewed), 1u);
  ASSERT_EQ(PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "cli-job", "test"})).status, 200);
  std::tie(rc, out) = run({"renew", "--lease", work_ + "/released/lease.json", "--event-log=", ImaLogFlag()});
  EXPECT_EQ(rc, 8) << out;  // failed precondition: the lease ended with the revocation
}

// Issue 16 §1: reproduced on 08a59af, `enclave-attest attest` wrote the released keys into
// a keystore under a passphrase its caller chose, under any policy, and `enclave-data open`
// then gave the plaintext. Under a policy whose released keys stay in process memory the
// broker refuses that release (logged), nothing is written, and the trainer still gets them.
TEST_F(ReleaseTest, KeysAreWrittenOutOnlyWhereThePolicySaysSo) {
  PrepareKeysAndSampleBeforeLaunch();
  StartBroker();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(Activate(UsagePolicyJson(AttestationPolicySha256(), 1, 600, 60, "alice@hospital.example",
                                     "process-memory"))
                .status,
            200);
  const std::string url = "https://127.0.0.1:" + std::to_string(broker_->port());
  const std::vector<std::string> host = {"--state", work_ + "/cli-host", "--tcti", fixture_->tcti()};
  std::string out;
  std::vector<std::string> reg = {"register", "--broker", url, "--ca", broker_->Path("tls.crt")};
  reg.insert(reg.end(), host.begin(), host.end());
  ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_ATTEST_BIN, reg, "", &out), 0) << out;
  testing::WriteText(work_ + "/job.toml", JobToml(work_ + "/trained", "memory-job"));
  std::vector<std::string> attest = {"attest", "--job", work_ + "/job.toml", "--out", work_ + "/released",
                                     "--event-log=", ImaLogFlag(), "--passphrase-fd", "3"};
  attest.insert(attest.end(), host.begin(), host.end());
  EXPECT_EQ(BrokerProcess::RunProgram(ENCLAVE_ATTEST_BIN, attest, "a passphrase of the caller's choosing", &out), 5)
      << out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/released"));
  bool refused = false;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kReleaseRefused && e.event.fields["job_id"] == "memory-job") {
      refused = e.event.fields["reason"].get<std::string>().find("out of process memory") != std::string::npos;
    }
    EXPECT_NE(e.event.type, audit::EventType::kKeyReleased);
  }
  EXPECT_TRUE(refused);
#ifdef ENCLAVE_TRAIN_BIN
  testing::WriteText(work_ + "/job2.toml", JobToml(work_ + "/trained", "memory-job-2"));
  std::vector<std::string> train = {"run", "--job", work_ + "/job2.toml", "--event-log=", ImaLogFlag(), "--device", "cpu"};
  train.insert(train.end(), host.begin(), host.end());
  EXPECT_EQ(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, train, "", &out), 0) << out;
#endif
}
#endif

#if defined(ENCLAVE_ATTEST_BIN) && defined(ENCLAVE_TRAIN_BIN)
// The trainer attests itself: keys only in its memory, the model sealed to the broker's
// export key, the report signed with the report key that key.released records.
TEST_F(ReleaseTest, EnclaveTrainAttestsItselfAndSignsItsReport) {
  PrepareKeysAndSampleBeforeLaunch();
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("train-host", &host));
  std::string out;
  testing::WriteText(work_ + "/job.toml", JobToml(work_ + "/trained", "train-job"));
  std::vector<std::string> run = {"run", "--job", work_ + "/job.toml", "--event-log=", ImaLogFlag(), "--json"};
  run.insert(run.end(), host.begin(), host.end());
  ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &out), 0) << out;
  EXPECT_EQ(out.find("DEVELOPMENT MODE"), std::string::npos) << out;

  auto report_text = testing::ReadText(work_ + "/trained/report.json");
  auto report = nlohmann::json::parse(report_text, nullptr, false);
  ASSERT_TRUE(report.is_object()) << report_text;
  EXPECT_EQ(report["mode"], "attested");
  EXPECT_EQ(report["development_mode"], false);
  EXPECT_EQ(report["model_exported"], true);
  const std::string lease_id = report["lease"]["lease_id"].get<std::string>();
  // The signature verifies with the report key, and the broker logged that key for the lease.
  auto sig = nlohmann::json::parse(testing::ReadText(work_ + "/trained/report.json.sig"), nullptr, false);
  ASSERT_TRUE(sig.is_object());
  EXPECT_EQ(sig["lease_id"], lease_id);
  const crypto::Digest256 digest = crypto::Sha256(AsBytes(report_text));
  EXPECT_EQ(sig["report_sha256"], HexEncode(digest));
  std::vector<uint8_t> message = {'e', 'n', 'c', 'l', 'a', 'v', 'e', '-', 't', 'r', 'a', 'i', 'n', ' ',
                                  'r', 'e', 'p', 'o', 'r', 't', ' ', 'v', '1', 0};
  message.insert(message.end(), digest.begin(), digest.end());
  auto key = HexDecode(sig["report_key"].get<std::string>());
  auto signature = HexDecode(sig["signature"].get<std::string>());
  ASSERT_TRUE(key.ok() && signature.ok() && key->size() == 32 && signature->size() == 64);
  EXPECT_EQ(crypto_sign_verify_detached(signature->data(), message.data(), message.size(), key->data()), 0);
  std::string tampered = report_text;
  tampered[tampered.size() / 2] ^= 1;
  const crypto::Digest256 bad = crypto::Sha256(AsBytes(tampered));
  std::copy(bad.begin(), bad.end(), message.end() - 32);
  EXPECT_NE(crypto_sign_verify_detached(signature->data(), message.data(), message.size(), key->data()), 0);
  bool logged = false;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["lease_id"] == lease_id) {
      EXPECT_EQ(e.event.fields["report_key"], sig["report_key"]);
      logged = true;
    }
  }
  EXPECT_TRUE(logged);
  // The broker logged the finished job from the signed report.
  bool finished = false;
  for (const auto& e : AuditEntries()) {
    if (e.event.type != audit::EventType::kJobFinished) continue;
    finished = true;
    EXPECT_EQ(e.event.fields["report_digest"], HexEncode(digest));
    EXPECT_EQ(e.event.fields["report_signature"], sig["signature"]);
    EXPECT_EQ(e.event.fields["model_digest"], report["model_export"]["sha256"]);
    EXPECT_EQ(e.event.fields["job_digest"], report["job"]["sha256"]);
    EXPECT_EQ(e.event.fields["outcome"], "completed");
  }
  EXPECT_TRUE(finished);
  // Once only; and a report not signed by the release's report key is refused.
  std::array<uint8_t, 64> sig_bytes{};
  std::copy(signature->begin(), signature->end(), sig_bytes.begin());
  auto again = broker_->Post("/v1/jobs/train-job/reports", EncodeJobReport({lease_id, report_text, sig_bytes}));
  EXPECT_EQ(again.status, 409) << again.body;
  sig_bytes[0] ^= 1;
  auto forged = broker_->Post("/v1/jobs/train-job/reports", EncodeJobReport({lease_id, report_text, sig_bytes}));
  EXPECT_EQ(forged.status, 403) << forged.body;
  // The model is sealed to the tenant's export key: the tenant opens it.
  auto pass = crypto::SecretBytes::CopyFrom(AsBytes(testing::kPassphrase));
  auto tenant = crypto::Keystore::Unlock(broker_->Path("tenant.keystore"), *pass);
  ASSERT_TRUE(tenant.ok());
  auto model = crypto::OpenModelToMemory(work_ + "/trained/model.sealed", *tenant, 1u << 20);
  EXPECT_TRUE(model.ok()) << model.status().ToString();

  // A report without the report key's signature learns nothing of the lease: not its job
  // (posted under another job's path), not why it ended (after the revocation below).
  auto elsewhere = broker_->Post("/v1/jobs/other-job/reports", EncodeJobReport({lease_id, report_text, sig_bytes}));
  EXPECT_EQ(elsewhere.status, 403) << elsewhere.body;
  EXPECT_EQ(elsewhere.body.find("train-job"), std::string::npos) << elsewhere.body;
  // A revoked job gets no keys: the trainer stops before training, exit 5, nothing written.
  ASSERT_EQ(PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "train-job", "test"})).status, 200);
  auto ended = broker_->Post("/v1/jobs/train-job/reports", EncodeJobReport({lease_id, report_text, sig_bytes}));
  EXPECT_EQ(ended.status, 403) << ended.body;
  EXPECT_EQ(ended.body.find("ended"), std::string::npos) << ended.body;
  testing::WriteText(work_ + "/job2.toml", JobToml(work_ + "/trained2", "train-job"));
  run[2] = work_ + "/job2.toml";
  EXPECT_EQ(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &out), 5) << out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/trained2/report.json"));
}

// cv in the attested mode signs its metrics file with the report key its quote bound.
TEST_F(ReleaseTest, EnclaveTrainCvSignsItsMetricsInTheAttestedMode) {
  PrepareKeysAndSampleBeforeLaunch();
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("cv-host", &host));
  testing::WriteText(work_ + "/cv.toml", JobToml(work_ + "/cv", "cv-job"));
  std::vector<std::string> cv = {"cv", "--job", work_ + "/cv.toml", "--folds", "3", "--event-log=", ImaLogFlag(),
                                 "--device", "cpu"};
  cv.insert(cv.end(), host.begin(), host.end());
  std::string out;
  ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, cv, "", &out), 0) << out;
  const std::string text = testing::ReadText(work_ + "/cv/cv_metrics.json");
  auto metrics = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(metrics.is_object());
  EXPECT_EQ(metrics["mode"], "attested");
  auto sig = nlohmann::json::parse(testing::ReadText(work_ + "/cv/cv_metrics.json.sig"), nullptr, false);
  ASSERT_TRUE(sig.is_object());
  const crypto::Digest256 digest = crypto::Sha256(AsBytes(text));
  EXPECT_EQ(sig["report_sha256"], HexEncode(digest));
  std::string domain = "enclave-train report v1";
  std::vector<uint8_t> message(domain.begin(), domain.end());
  message.push_back(0);
  message.insert(message.end(), digest.begin(), digest.end());
  auto key = HexDecode(sig["report_key"].get<std::string>());
  auto signature = HexDecode(sig["signature"].get<std::string>());
  ASSERT_TRUE(key.ok() && signature.ok() && key->size() == 32 && signature->size() == 64);
  EXPECT_EQ(crypto_sign_verify_detached(signature->data(), message.data(), message.size(), key->data()), 0);
  // The key is the one the broker logged with the cv release.
  bool logged = false;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == "cv-job") {
      EXPECT_EQ(e.event.fields["report_key"], sig["report_key"]);
      logged = true;
    }
  }
  EXPECT_TRUE(logged);
}

// Issue 18 §6: on 96aabf4 the trainer claimed only its per-epoch metrics (loss, accuracy,
// ROC AUC) to the broker, yet its signed report carried the validation board's metrics
// (confusion matrix, sensitivity, calibration), permutation importance and the evaluation
// curves in clear, under a data-use policy that allowed none of them; and a job whose
// metrics were only ["loss"] still printed the validation accuracy. Now every clear output
// is claimed, the policy decides, and what is not allowed is neither computed nor shown.
TEST_F(ReleaseTest, ResultsTheDataUsePolicyDoesNotAllowNeverLeaveInClear) {
  PrepareKeysAndSampleBeforeLaunch();
  StartBroker();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(Activate(UsagePolicyJson(AttestationPolicySha256(), 1, 600, 60, "alice@hospital.example", "may-be-written",
                                     R"(["loss","accuracy","roc_auc"])"))
                .status,
            200);
  const std::string url = "https://127.0.0.1:" + std::to_string(broker_->port());
  const std::vector<std::string> host = {"--state", work_ + "/clear-host", "--tcti", fixture_->tcti()};
  std::string out;
  std::vector<std::string> reg = {"register", "--broker", url, "--ca", broker_->Path("tls.crt")};
  reg.insert(reg.end(), host.begin(), host.end());
  ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_ATTEST_BIN, reg, "", &out), 0) << out;
  auto run = [&](const std::string& name, const std::string& extra) {
    testing::WriteText(work_ + "/" + name + ".toml", JobToml(work_ + "/" + name, name) + extra);
    std::vector<std::string> args = {"run", "--job", work_ + "/" + name + ".toml", "--event-log=", ImaLogFlag(),
                                     "--device", "cpu"};
    args.insert(args.end(), host.begin(), host.end());
    return BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, args, "", &out);
  };
  auto refusal = [&](const std::string& job_id) {
    std::string reason;
    for (const auto& e : AuditEntries()) {
      EXPECT_FALSE(e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == job_id) << job_id;
      if (e.event.type == audit::EventType::kReleaseRefused && e.event.fields["job_id"] == job_id) {
        reason = e.event.fields["reason"].get<std::string>();
      }
    }
    return reason;
  };

  // A job with the default evaluation asks to show what the policy does not allow: refused.
  EXPECT_EQ(run("full", ""), 5) << out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/full/report.json"));
  const std::string reason = refusal("full");
  for (const char* name : {"board_metrics", "curves", "importance"}) {
    EXPECT_NE(reason.find(std::string("metric '") + name + "' may not leave in clear under policy 'medical'"),
              std::string::npos)
        << reason;
  }

  // The same job without them is released, and its outputs hold only the allowed metrics.
  const std::string off = "[evaluation]\nboard_metrics = false\ncurves = false\nimportance = false\n";
  ASSERT_EQ(run("within", off), 0) << out;
  auto report = nlohmann::json::parse(testing::ReadText(work_ + "/within/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_TRUE(report["validation_metrics"].is_null()) << report["validation_metrics"];
  EXPECT_TRUE(report["importance"]["permutation"].is_null());
  EXPECT_FALSE(report["importance"].contains("gain"));
  EXPECT_TRUE(report["coefficients"].is_null());
  EXPECT_TRUE(report["evaluation_plot"].is_null());
  EXPECT_FALSE(std::filesystem::exists(work_ + "/within/evaluation-curves.svg"));
  EXPECT_TRUE(report["final"].contains("val_accuracy"));  // allowed
  EXPECT_EQ(out.find("sensitivity"), std::string::npos) << out;

  // A policy that lets only the loss out, and a job that shows only the loss.
  ASSERT_EQ(Activate(UsagePolicyJson(AttestationPolicySha256(), 2, 600, 60, "alice@hospital.example", "may-be-written",
                                     R"(["loss"])"))
                .status,
            200);
  EXPECT_EQ(run("accuracy", off), 5) << out;  // claims accuracy and roc_auc
  EXPECT_NE(refusal("accuracy").find("metric 'accuracy' may not leave in clear"), std::string::npos);
  ASSERT_EQ(run("loss", "metrics = [\"loss\"]\n" + off), 0) << out;  // JobToml ends in [training]
  report = nlohmann::json::parse(testing::ReadText(work_ + "/loss/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object());
  for (const auto& e : report["epochs"]) {
    EXPECT_TRUE(e.contains("val_loss"));
    EXPECT_FALSE(e.contains("val_accuracy") || e.contains("val_roc_auc")) << e;
  }
  EXPECT_FALSE(report["final"].contains("val_accuracy"));
  EXPECT_FALSE(report["all_rows"].contains("accuracy")) << report["all_rows"];
  EXPECT_EQ(out.find("accuracy"), std::string::npos) << out;
  EXPECT_EQ(out.find("ROC AUC"), std::string::npos) << out;
  const std::string plot = testing::ReadText(work_ + "/loss/training-curve.svg");
  EXPECT_EQ(plot.find("val_accuracy"), std::string::npos);
  EXPECT_EQ(plot.find("accuracy 0"), std::string::npos);
  // The broker's job.finished entry (the last one: this job's) records the clear metrics only.
  nlohmann::json finished;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kJobFinished) finished = e.event.fields["metrics"];
  }
  EXPECT_TRUE(finished.contains("val_loss")) << finished;
  EXPECT_FALSE(finished.contains("val_accuracy") || finished.contains("val_roc_auc")) << finished;
}

// tune in the attested mode: released as a cross-validation claiming the most epochs any
// configuration trains (a search past the policy's max_epochs gets no keys), and its
// tune_metrics.json signed like cv's metrics.
TEST_F(ReleaseTest, EnclaveTrainTuneSignsItsMetricsAndClaimsItsMostEpochs) {
  PrepareKeysAndSampleBeforeLaunch();
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("tune-host", &host));
  const std::string search = "[tune]\nfolds = 2\n[tune.parameters]\n\"optimizer.lr\" = [0.01, 0.1]\n";
  testing::WriteText(work_ + "/tune.toml", JobToml(work_ + "/tune", "tune-job") + search);
  std::vector<std::string> tune = {"tune", "--job", work_ + "/tune.toml", "--event-log=", ImaLogFlag(), "--device", "cpu"};
  tune.insert(tune.end(), host.begin(), host.end());
  std::string out;
  ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, tune, "", &out), 0) << out;
  const std::string text = testing::ReadText(work_ + "/tune/tune_metrics.json");
  auto metrics = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(metrics.is_object());
  EXPECT_EQ(metrics["mode"], "attested");
  EXPECT_EQ(metrics["verb"], "tune");
  EXPECT_EQ(metrics["configurations"].size(), 2u);
  EXPECT_EQ(metrics["signature"], work_ + "/tune/tune_metrics.json.sig");
  auto sig = nlohmann::json::parse(testing::ReadText(work_ + "/tune/tune_metrics.json.sig"), nullptr, false);
  ASSERT_TRUE(sig.is_object());
  const crypto::Digest256 digest = crypto::Sha256(AsBytes(text));
  EXPECT_EQ(sig["report_sha256"], HexEncode(digest));
  std::string domain = "enclave-train report v1";
  std::vector<uint8_t> message(domain.begin(), domain.end());
  message.push_back(0);
  message.insert(message.end(), digest.begin(), digest.end());
  auto key = HexDecode(sig["report_key"].get<std::string>());
  auto signature = HexDecode(sig["signature"].get<std::string>());
  ASSERT_TRUE(key.ok() && signature.ok() && key->size() == 32 && signature->size() == 64);
  EXPECT_EQ(crypto_sign_verify_detached(signature->data(), message.data(), message.size(), key->data()), 0);
  bool logged = false;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == "tune-job") {
      EXPECT_EQ(e.event.fields["report_key"], sig["report_key"]);
      logged = true;
    }
  }
  EXPECT_TRUE(logged);
  // The policy allows 100 epochs; a configuration of 150 makes the release claim 150.
  const std::string longer = "[tune]\nfolds = 2\n[tune.parameters]\n\"training.epochs\" = [20, 150]\n";
  testing::WriteText(work_ + "/long.toml", JobToml(work_ + "/long", "long-tune-job") + longer);
  tune[2] = work_ + "/long.toml";
  EXPECT_EQ(BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, tune, "", &out), 5) << out;
  const audit::Entry refused = AuditEntries().back();  // the trainer hears only "refused"; the log says why
  ASSERT_EQ(refused.event.type, audit::EventType::kReleaseRefused);
  const std::string reason = refused.event.fields["reason"].get<std::string>();
  EXPECT_NE(reason.find("epochs 150 exceed max_epochs 100"), std::string::npos) << reason;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/long/tune_metrics.json"));
}

// tune stops like cv when its lease ends: exit 5, nothing written.
TEST_F(ReleaseTest, EnclaveTrainTuneStopsWhenItsLeaseEnds) {
  settings_.before_launch = [this](const std::string& dir) -> Status { return PrepareKeysAndBigSample(dir); };
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("long-tune-host", &host, /*lease_s=*/600, /*reattest_s=*/30));
  std::string job = JobToml(work_ + "/long", "long-tune-job");
  job.replace(job.find("epochs = 20"), 11, "epochs = 100");
  job += "batch_size = 16\n[model]\nhidden = [512, 512]\n[tune]\nfolds = 2\n[tune.parameters]\n"
         "\"optimizer.lr\" = [0.001, 0.01]\n";
  testing::WriteText(work_ + "/long.toml", job);
  std::vector<std::string> tune = {"tune", "--job", work_ + "/long.toml", "--event-log=", ImaLogFlag(), "--device", "cpu"};
  tune.insert(tune.end(), host.begin(), host.end());
  const RevokedRun r = RunAndRevoke(tune, "long-tune-job");
  ASSERT_TRUE(r.revoked);
  EXPECT_EQ(r.rc, 5) << r.out;
  EXPECT_NE(r.out.find("the lease ended during cross-validation"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/long/tune_metrics.json"));
  EXPECT_LT(r.seconds, 18) << "tune did not stop soon after the revocation";
}

// Checkpoints in the attested mode: sealed under a key derived from the job key, so a
// resumed run (a new process, a new release for the same job id) reads them and ends with
// the model an uninterrupted run makes.
TEST_F(ReleaseTest, EnclaveTrainResumesAnAttestedJobFromItsCheckpoint) {
  PrepareKeysAndSampleBeforeLaunch();
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("ckpt-host", &host));
  std::string out;
  auto train = [&](const std::string& name, std::vector<std::string> extra) {
    testing::WriteText(work_ + "/" + name + ".toml",
                       JobToml(work_ + "/" + name, name) + "batch_size = 8\n[checkpoint]\nevery_steps = 5\n");
    std::vector<std::string> run = {"run", "--job", work_ + "/" + name + ".toml", "--event-log=", ImaLogFlag(),
                                    "--device", "cpu"};
    run.insert(run.end(), host.begin(), host.end());
    run.insert(run.end(), extra.begin(), extra.end());
    return BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &out);
  };
  ASSERT_EQ(train("whole", {}), 0) << out;
  ASSERT_EQ(train("split", {"--stop-after-step", "7"}), 0) << out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/split/report.json"));
  ASSERT_EQ(train("split", {"--resume"}), 0) << out;
  auto whole = nlohmann::json::parse(testing::ReadText(work_ + "/whole/report.json"), nullptr, false);
  auto split = nlohmann::json::parse(testing::ReadText(work_ + "/split/report.json"), nullptr, false);
  ASSERT_TRUE(whole.is_object() && split.is_object());
  EXPECT_EQ(split["mode"], "attested");
  EXPECT_FALSE(split["resumed_from"].is_null());
  EXPECT_EQ(split["parameters_sha256"], whole["parameters_sha256"]);
  // Another job's process refuses them (exit 5: written for another job digest; its job
  // key, and so its checkpoint key, differ too).
  std::error_code ec;
  std::filesystem::create_directories(work_ + "/other", ec);
  std::filesystem::copy(work_ + "/split/checkpoints", work_ + "/other/checkpoints",
                        std::filesystem::copy_options::recursive, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(train("other", {"--resume"}), 5) << out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/other/report.json"));
}

// Data-parallel in the attested mode: each rank's process attests and receives its own
// release (its rank bound into its quote), both get the same job key from the broker, and
// only with it do they connect their encrypted ring; they end with the same parameters.
TEST_F(ReleaseTest, EnclaveTrainRanksEachAttestAndShareTheReleasedJobKey) {
  PrepareKeysAndSampleBeforeLaunch();
  // Rank 1 on a second host: its own swtpm (a TPM without a resource manager holds the
  // transient objects of one process at a time), whose EK CA the attestation policy trusts.
  auto second = SwtpmFixture::Start();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  settings_.ek_root_files.push_back((*second)->ca_root_cert());
  settings_.ek_intermediate_files.push_back((*second)->ca_issuer_cert());
  std::vector<std::string> hosts[2];
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("dist-host-0", &hosts[0]));
  hosts[1] = {"--state", work_ + "/dist-host-1", "--tcti", (*second)->tcti()};
  // The second host's kernel measured the trainer too: its own PCR 10 and IMA log.
  const std::string second_ima = (*second)->dir() + "/ima.log";
  {
    auto t = Tpm::Open((*second)->tcti());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    Status m = attest::host::SimulateImaMeasurement(**t, std::filesystem::canonical(ENCLAVE_TRAIN_BIN).string(),
                                                    std::filesystem::canonical(ENCLAVE_TRAIN_BIN).string(), second_ima);
    ASSERT_TRUE(m.ok()) << m.ToString();
  }
  const std::string ima_flags[2] = {ImaLogFlag(), "--ima-log=" + second_ima};
  std::vector<std::string> reg = {"register", "--broker", "https://127.0.0.1:" + std::to_string(broker_->port()),
                                  "--ca", broker_->Path("tls.crt")};
  reg.insert(reg.end(), hosts[1].begin(), hosts[1].end());
  std::string reg_out;
  ASSERT_EQ(BrokerProcess::RunProgram(ENCLAVE_ATTEST_BIN, reg, "", &reg_out), 0) << reg_out;
  // The ranks meet at the broker (their leases' rendezvous), or in a directory (static).
  std::string rank1_at_broker;
  for (const std::string name : {"dist-job", "dist-static"}) {
    SCOPED_TRACE(name);
    const bool at_broker = name == "dist-job";
    testing::WriteText(work_ + "/" + name + ".toml", JobToml(work_ + "/" + name, name) + "batch_size = 8\n");
    std::filesystem::create_directories(work_ + "/rendezvous");
    int rc[2] = {-1, -1};
    std::string out[2];
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        std::vector<std::string> run = {"run", "--job", work_ + "/" + name + ".toml", "--event-log=", ima_flags[r],
                                        "--device", "cpu", "--world-size", "2", "--rank", std::to_string(r),
                                        "--peer-timeout", "60", "--json"};
        if (!at_broker) run.insert(run.end(), {"--rendezvous", work_ + "/rendezvous"});
        run.insert(run.end(), hosts[r].begin(), hosts[r].end());
        rc[r] = BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &out[r]);
      });
    }
    for (auto& t : ranks) t.join();
    ASSERT_EQ(rc[0], 0) << out[0];
    ASSERT_EQ(rc[1], 0) << out[1];
    if (at_broker) rank1_at_broker = out[1];
  }
  auto report = nlohmann::json::parse(testing::ReadText(work_ + "/dist-job/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["mode"], "attested");
  EXPECT_EQ(report["distributed"]["world_size"], 2);
  // Rank 1's last line: the same parameters as rank 0's report.
  const std::string& o1 = rank1_at_broker;
  const size_t line = o1.rfind("{\"event\":\"done\"");
  ASSERT_NE(line, std::string::npos) << o1;
  auto done = nlohmann::json::parse(o1.substr(line, o1.find('\n', line) - line), nullptr, false);
  ASSERT_TRUE(done.is_object()) << o1;
  EXPECT_EQ(done["rank"], 1);
  EXPECT_EQ(done["parameters_sha256"], report["parameters_sha256"]);
  // Two releases, one per rank, each logged before its keys left.
  std::set<std::string> leases, host_ids;
  for (const auto& e : AuditEntries()) {
    if (e.event.type == audit::EventType::kKeyReleased && e.event.fields["job_id"] == "dist-job") {
      leases.insert(e.event.fields["lease_id"].dump());
      host_ids.insert(e.event.fields["host"].dump());
    }
  }
  EXPECT_EQ(leases.size(), 2u);
  EXPECT_EQ(host_ids.size(), 2u);
}

// A lease that ends while the trainer trains (here: the job is revoked, so its renewal is
// refused) stops training: exit 5, no report, no model.
TEST_F(ReleaseTest, EnclaveTrainStopsWhenItsLeaseEnds) {
  settings_.before_launch = [this](const std::string& dir) -> Status { return PrepareKeysAndBigSample(dir); };
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("long-host", &host, /*lease_s=*/600, /*reattest_s=*/30));
  std::string out;
  std::string job = JobToml(work_ + "/long", "long-job");
  job.replace(job.find("epochs = 20"), 11, "epochs = 100");
  job += "batch_size = 16\n[model]\nhidden = [512, 512]\n";
  testing::WriteText(work_ + "/long.toml", job);
  std::vector<std::string> run = {"run", "--job", work_ + "/long.toml", "--event-log=", ImaLogFlag(), "--device", "cpu"};
  run.insert(run.end(), host.begin(), host.end());
  int rc = -1;
  std::string train_out;
  const auto start = std::chrono::steady_clock::now();
  std::thread trainer([&] { rc = BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &train_out); });
  // Revoke once the lease exists (the trainer is training by then).
  bool revoked = false;
  for (int i = 0; i < 100 && !revoked; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::string leases;
    if (BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--json"}, "", &leases) != 0) continue;
    auto j = nlohmann::json::parse(leases, nullptr, false);
    if (j.is_object() && j["leases"].size() == 1) {
      revoked = PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "long-job", "test"})).status == 200;
    }
  }
  trainer.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(revoked);
  EXPECT_EQ(rc, 5) << train_out;
  EXPECT_NE(train_out.find("the lease ended during training"), std::string::npos) << train_out;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/long/report.json"));
  EXPECT_FALSE(std::filesystem::exists(work_ + "/long/model.sealed"));
  // The keeper asks for the lease's status every 5 s between renewals (the first renewal
  // would come 20 s in): a revocation stops training within seconds.
  EXPECT_LT(seconds, 18) << "training did not stop soon after the revocation";
}

// The broker is down when the trainer's first renewal is due (20 s into a 30 s interval):
// the trainer retries with backoff while its lease is valid and renews once the broker is
// back (one renewal, not one per loop), then stops when the job is revoked.
TEST_F(ReleaseTest, EnclaveTrainRetriesARenewalWhileTheBrokerIsDown) {
  settings_.before_launch = [this](const std::string& dir) -> Status { return PrepareKeysAndBigSample(dir); };
  std::vector<std::string> host;
  ASSERT_NO_FATAL_FAILURE(StartAndRegister("retry-host", &host, /*lease_s=*/600, /*reattest_s=*/30));
  // The broker comes back on the same port.
  std::string toml = testing::ReadText(broker_->config());
  toml.replace(toml.find("port = 0"), 8, "port = " + std::to_string(broker_->port()));
  testing::WriteText(broker_->config(), toml);
  std::string job = JobToml(work_ + "/retry", "retry-job");
  job.replace(job.find("epochs = 20"), 11, "epochs = 100");
  job += "batch_size = 16\n[model]\nhidden = [512, 512]\n";
  testing::WriteText(work_ + "/retry.toml", job);
  std::vector<std::string> run = {"run",        "--job",    work_ + "/retry.toml", "--event-log=",
                                  ImaLogFlag(), "--device", "cpu"};
  run.insert(run.end(), host.begin(), host.end());
  int rc = -1;
  std::string train_out;
  std::thread trainer([&] { rc = BrokerProcess::RunProgram(ENCLAVE_TRAIN_BIN, run, "", &train_out); });
  std::string lease_id;
  for (int i = 0; i < 100 && lease_id.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::string leases;
    if (BrokerProcess::RunBroker({"leases", "--config", broker_->config(), "--json"}, "", &leases) != 0) continue;
    auto j = nlohmann::json::parse(leases, nullptr, false);
    if (j.is_object() && j["leases"].size() == 1) lease_id = j["leases"][0]["lease_id"].get<std::string>();
  }
  ASSERT_FALSE(lease_id.empty());
  const auto released = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(15));
  broker_->Stop(SIGKILL);  // down from 15 s to about 23 s: the renewal due at 20 s fails
  std::this_thread::sleep_for(std::chrono::seconds(7));
  ASSERT_TRUE(broker_->Restart().ok());
  // Back: the trainer's retry renews the lease before its deadline (30 s).
  size_t renewed = 0;
  for (int i = 0; i < 60 && renewed == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    renewed = CountType(audit::EventType::kLeaseRenewed);
  }
  const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - released).count();
  EXPECT_EQ(renewed, 1u) << "renewed once after the outage (at " << at << " s)";
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(CountType(audit::EventType::kLeaseRenewed), 1u) << "no renewal right after a renewal";
  ASSERT_EQ(PostAdmin("/v1/admin/revocations", EncodeRevocationRequest({"job", "retry-job", "test"})).status, 200);
  trainer.join();
  EXPECT_EQ(rc, 5) << train_out;
  EXPECT_NE(train_out.find("lease renewal failed (try 1"), std::string::npos) << train_out;
  EXPECT_NE(train_out.find("the lease ended during training"), std::string::npos) << train_out;
  EXPECT_EQ(train_out.find("lease renewal refused"), std::string::npos) << train_out;
}
#endif

}  // namespace
}  // namespace enclave::broker
