// The broker's SQLite state store: schema and migration record, single-use challenges and
// nonces with expiry, the host upsert that keeps the clock state, compare-and-set of the
// clock, and crash safety: a child process killed with SIGKILL in the middle of writes,
// many times over, never loses a write it had acknowledged.
#include "enclave/broker/store.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "enclave/common/bytes.h"

namespace enclave::broker {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("broker-store-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "broker.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Store> OpenStore() {
    auto s = Store::Open(path_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  static HostRecord Host(const std::string& id, uint8_t ak) {
    HostRecord h;
    h.host_id = id;
    h.ek_public = {1, 2, 3};
    h.ek_cert_sha256.fill(0xEE);
    h.ak_public = {4, 5, ak};
    h.ak_name = {0, 0x0b, ak};
    h.enrolment_bundle = "{\"bundle\":" + std::to_string(ak) + "}";
    h.enrolled_at = 1000;
    return h;
  }
  // Job "job-1" and a lease of it on host "aa", as the write and migration tests store them.
  static JobRecord Job1() {
    JobRecord j;
    j.job_id = "job-1";
    j.key_nonce.assign(12, 1);
    j.key_wrapped.assign(48, 2);
    j.binding = "b";
    j.created_at = 10;
    return j;
  }
  static LeaseRecord LeaseOfJob1(const std::string& lease_id) {
    LeaseRecord l;
    l.lease_id = lease_id;
    l.host_id = "aa";
    l.job_id = "job-1";
    l.policy_id = "p";
    l.issued_at = 10;
    l.valid_until = 5000;
    l.reattest_by = 100;
    l.recipient.assign(32, 3);
    l.datasets = {"d"};
    l.report_key.assign(32, 4);
    return l;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(StoreTest, CreatesAPrivateWalDatabaseAtTheCurrentSchemaVersion) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto v = store->SchemaVersion();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, kSchemaVersion);
  EXPECT_TRUE(store->IntegrityCheck().ok());
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(store->PutNonce({std::vector<uint8_t>(32, 1), "h", 1, 2}).ok());
  // WAL mode: the write went to the -wal file.
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal"));
  store.reset();
  // Reopening does not migrate again; the read-only view sees the same version.
  auto again = OpenStore();
  ASSERT_TRUE(again);
  EXPECT_EQ(*again->SchemaVersion(), kSchemaVersion);
  again.reset();
  auto ro = Store::OpenReadOnly(path_);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_EQ(*(*ro)->SchemaVersion(), kSchemaVersion);
}

TEST_F(StoreTest, RefusesADatabaseFromANewerBrokerAndAFileThatIsNotADatabase) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
  }
  ASSERT_EQ(std::system(("sqlite3 '" + path_ + "' 'INSERT INTO schema_migrations VALUES (99, 0)'").c_str()), 0);
  auto newer = Store::Open(path_);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), Code::kUnsupported) << newer.status().ToString();
  auto ro = Store::OpenReadOnly(path_);
  ASSERT_FALSE(ro.ok());
  EXPECT_EQ(ro.status().code(), Code::kUnsupported);

  const std::string junk = (dir_ / "junk.db").string();
  std::ofstream(junk) << "this is not an SQLite database, not at all, it is just text of some length";
  ::chmod(junk.c_str(), 0600);
  auto bad = Store::Open(junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("junk.db"), std::string::npos) << bad.status().ToString();
  auto missing = Store::OpenReadOnly((dir_ / "absent.db").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

TEST_F(StoreTest, AChallengeAnswersOneActivationAttemptAndExpires) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  PendingChallenge c;
  c.challenge_id = "00112233445566778899aabbccddeeff";
  c.host_id = "h1";
  c.enrolment_bundle = "{}";
  c.secret_sha256.fill(7);
  c.ek_cert_sha256.fill(8);
  c.created_at = 100;
  c.expires_at = 200;
  ASSERT_TRUE(store->PutChallenge(c).ok());
  EXPECT_EQ(store->PutChallenge(c).code(), Code::kAlreadyExists);
  auto got = store->TakeChallenge(c.challenge_id, 150);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->secret_sha256, c.secret_sha256);
  EXPECT_EQ(got->ek_cert_sha256, c.ek_cert_sha256);
  EXPECT_EQ(got->host_id, "h1");
  auto twice = store->TakeChallenge(c.challenge_id, 150);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), Code::kNotFound);

  c.challenge_id = "ffeeddccbbaa99887766554433221100";
  ASSERT_TRUE(store->PutChallenge(c).ok());
  auto late = store->TakeChallenge(c.challenge_id, 200);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), Code::kFailedPrecondition) << late.status().ToString();
  EXPECT_EQ(store->TakeChallenge(c.challenge_id, 100).status().code(), Code::kNotFound);
}

TEST_F(StoreTest, ANonceIsUsableOnceAndNotAfterItsExpiry) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  std::vector<uint8_t> n1(32, 0x11), n2(32, 0x22), n3(32, 0x33);
  ASSERT_TRUE(store->PutNonce({n1, "h", 100, 160}).ok());
  ASSERT_TRUE(store->PutNonce({n2, "h", 100, 160}).ok());
  EXPECT_EQ(store->PutNonce({n1, "h", 100, 160}).code(), Code::kAlreadyExists);
  auto first = store->ConsumeNonce(n1, 159);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->host_id, "h");
  EXPECT_EQ(first->issued_at, 100);
  auto replay = store->ConsumeNonce(n1, 159);
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(replay.status().message().find("already used"), std::string::npos);
  auto expired = store->ConsumeNonce(n2, 160);
  ASSERT_FALSE(expired.ok());
  EXPECT_EQ(expired.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(expired.status().message().find("expired"), std::string::npos);
  // An expired nonce stays used: it cannot be tried again with an earlier clock.
  EXPECT_EQ(store->ConsumeNonce(n2, 110).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(store->ConsumeNonce(n3, 110).status().code(), Code::kNotFound);
  auto purged = store->PurgeExpired(1000, 60);
  ASSERT_TRUE(purged.ok());
  EXPECT_EQ(*purged, 2);
  EXPECT_EQ(store->ConsumeNonce(n1, 110).status().code(), Code::kNotFound);
}

// Signed nonce requests (issue 16 §4): each request digest once; out of order within the
// window behind the host's newest request; never from an earlier TPM boot; a new boot
// starts afresh. Refusals store no nonce.
TEST_F(StoreTest, ASignedNonceRequestIsUsedOnceAndOnlyWithinTheWindowOfItsTpmBoot) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  constexpr int64_t kWindow = 1000;
  int serial = 0;
  auto put = [&](const std::string& host, uint32_t reset, uint32_t restart, uint64_t clock, uint8_t digest_byte) {
    NonceRecord n{std::vector<uint8_t>(32, 0), host, 100, 160};
    n.nonce[0] = static_cast<uint8_t>(++serial);
    n.nonce[1] = static_cast<uint8_t>(serial >> 8);
    crypto::Digest256 d{};
    d.fill(digest_byte);
    attest::ClockInfo c{clock, reset, restart, 1};
    Status s = store->PutNonceForRequest(n, c, d, kWindow);
    if (s.ok()) {
      // The nonce was stored with the request.
      auto got = store->ConsumeNonce(n.nonce, 150);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
    } else {
      EXPECT_EQ(store->ConsumeNonce(n.nonce, 150).status().code(), Code::kNotFound) << "a refused request stored a nonce";
    }
    return s;
  };
  auto refused = [&](Status s, const std::string& why) {
    EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
    EXPECT_NE(s.message().find(why), std::string::npos) << s.ToString();
  };
  EXPECT_TRUE(put("h", 5, 0, 10000, 1).ok());
  refused(put("h", 5, 0, 10000, 1), "replayed");
  EXPECT_TRUE(put("h", 5, 0, 10500, 2).ok());
  EXPECT_TRUE(put("h", 5, 0, 9600, 3).ok()) << "out of order, within the window: concurrent requests";
  refused(put("h", 5, 0, 9600, 3), "replayed");
  refused(put("h", 5, 0, 9499, 4), "behind this host's newest request");
  refused(put("h", 4, 9, 20000, 5), "earlier TPM boot");
  refused(put("h", 5, 0, 10000, 1), "replayed");
  EXPECT_TRUE(put("other", 1, 0, 1, 1).ok()) << "another host's requests are its own";
  // A restart (TPM2_Startup(TPM_SU_STATE)): a new boot; the old boot's requests are done.
  EXPECT_TRUE(put("h", 5, 1, 50, 6).ok());
  refused(put("h", 5, 0, 10600, 7), "earlier TPM boot");
  EXPECT_TRUE(put("h", 6, 0, 10, 8).ok());
  refused(put("h", 5, 1, 60, 9), "earlier TPM boot");
  // Remembered across a reopen (a broker restart is no replay window).
  store.reset();
  store = OpenStore();
  ASSERT_TRUE(store);
  refused(put("h", 6, 0, 10, 8), "replayed");
  EXPECT_TRUE(put("h", 6, 0, 11, 9).ok());
}

TEST_F(StoreTest, ReEnrolmentReplacesTheAkAndKeepsTheClockStateWhichChangesOnlyByCompareAndSet) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->UpsertHost(Host("aa", 1)).ok());
  EXPECT_EQ(store->UpdateClockState("aa", "", "clock-1").code(), Code::kOk);
  EXPECT_EQ(store->UpdateClockState("aa", "", "clock-2").code(), Code::kFailedPrecondition);
  EXPECT_EQ(store->UpdateClockState("zz", "", "clock-2").code(), Code::kFailedPrecondition);
  ASSERT_TRUE(store->UpsertHost(Host("aa", 2)).ok());
  auto h = store->GetHost("aa");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->ak_name, (std::vector<uint8_t>{0, 0x0b, 2}));
  EXPECT_EQ(h->clock_state, "clock-1");
  EXPECT_EQ(h->ek_cert_sha256[0], 0xEE);
  // One AK belongs to one host.
  Status dup = store->UpsertHost(Host("bb", 2));
  EXPECT_EQ(dup.code(), Code::kAlreadyExists) << dup.ToString();
  ASSERT_TRUE(store->UpsertHost(Host("bb", 3)).ok());
  auto all = store->ListHosts();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].host_id, "aa");
  EXPECT_EQ((*all)[1].host_id, "bb");
  EXPECT_EQ(store->GetHost("cc").status().code(), Code::kNotFound);

  EXPECT_FALSE(*store->IsRevoked(RevokedKind::kHost, "aa"));
  ASSERT_TRUE(store->Revoke(RevokedKind::kHost, "aa", "stolen", 5).ok());
  ASSERT_TRUE(store->Revoke(RevokedKind::kHost, "aa", "again", 6).ok());
  EXPECT_TRUE(*store->IsRevoked(RevokedKind::kHost, "aa"));
  EXPECT_FALSE(*store->IsRevoked(RevokedKind::kJob, "aa"));
}

// One TPM can have several certified EKs, hence several host ids: the hosts that share a
// certified EK key (tpm_keys) are one TPM, and revoking one revokes all (transitively);
// an enrolment that presents a key of a revoked TPM is refused in the storing transaction.
TEST_F(StoreTest, ARevocationCoversEveryHostIdOfTheSameTpm) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->UpsertHost(Host("rsa", 1), {"k-rsa", "k-p256", "k-p384"}).ok());
  ASSERT_TRUE(store->UpsertHost(Host("p384", 2), {"k-p384"}).ok());
  ASSERT_TRUE(store->UpsertHost(Host("other", 3), {"k-other"}).ok());
  ASSERT_TRUE(store->UpsertHost(Host("chain", 4), {"k-other", "k-chain"}).ok());
  EXPECT_FALSE(*store->IsRevoked(RevokedKind::kHost, "p384"));
  ASSERT_TRUE(store->Revoke(RevokedKind::kHost, "rsa", "stolen", 5).ok());
  EXPECT_TRUE(*store->IsRevoked(RevokedKind::kHost, "rsa"));
  EXPECT_TRUE(*store->IsRevoked(RevokedKind::kHost, "p384")) << "another EK of the revoked TPM";
  EXPECT_FALSE(*store->IsRevoked(RevokedKind::kHost, "other"));
  // A host id never seen, whose bundle certifies a key of the revoked TPM (its P-256 EK).
  auto link = store->RevokedTpmLink("p256", {"k-p256"});
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link->value_or(""), "rsa");
  EXPECT_EQ(store->UpsertHost(Host("p256", 6), {"k-p256"}).code(), Code::kPermissionDenied);
  EXPECT_EQ(store->GetHost("p256").status().code(), Code::kNotFound);
  EXPECT_FALSE(store->RevokedTpmLink("fresh", {"k-fresh"})->has_value());
  // Transitive: other -- k-other -- chain -- k-chain -- late.
  ASSERT_TRUE(store->UpsertHost(Host("late", 7), {"k-chain"}).ok());
  ASSERT_TRUE(store->Revoke(RevokedKind::kHost, "late", "test", 8).ok());
  EXPECT_TRUE(*store->IsRevoked(RevokedKind::kHost, "other"));
  EXPECT_FALSE(*store->IsRevoked(RevokedKind::kJob, "late"));
}

// Schema version 6: a lease whose release sent no key is marked undelivered and does not
// count as one of its job's leases; a version 5 store gains the column, its leases counted.
TEST_F(StoreTest, AnUndeliveredLeaseDoesNotCountAsItsJobsAndAVersion5StoreMigrates) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->UpsertHost(Host("aa", 1)).ok());
    ASSERT_TRUE(store->GetOrCreateJob(Job1()).ok());
    for (const char* id : {"lease-old", "lease-1"}) {
      LeaseRecord l = LeaseOfJob1(id);
      l.rank = l.lease_id == "lease-old" ? 0 : 1;
      ASSERT_TRUE(store->PutLease(l, 10).ok());
    }
  }
  // Back to version 5, as a broker before this one left it.
  ASSERT_EQ(std::system(("sqlite3 '" + path_ +
                         "' 'ALTER TABLE leases DROP COLUMN undelivered; DELETE FROM schema_migrations WHERE version = 6'")
                            .c_str()),
            0);
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->SchemaVersion(), 6);
  EXPECT_EQ(store->CountLeasesOfJob("job-1", 30)->ever, 2);
  EXPECT_EQ(store->CountLeasesOfJob("job-1", 30)->active, 2);
  EXPECT_EQ(store->CountLeasesOfJob("job-1", 100)->active, 0) << "past reattest_by";
  ASSERT_TRUE(store->GetLease("lease-old").ok());
  EXPECT_FALSE(store->GetLease("lease-old")->undelivered);
  // An active lease ends undelivered; one a revocation ended keeps that reason.
  ASSERT_TRUE(store->EndUndeliveredLease("lease-1", "release not completed: test", 20).ok());
  ASSERT_TRUE(store->EndLease("lease-old", "job revoked: test", 21).ok());
  ASSERT_TRUE(store->EndUndeliveredLease("lease-old", "release not completed: later", 22).ok());
  auto one = store->GetLease("lease-1"), old = store->GetLease("lease-old");
  ASSERT_TRUE(one.ok() && old.ok());
  EXPECT_TRUE(one->undelivered);
  EXPECT_EQ(one->ended_at, 20);
  EXPECT_EQ(one->end_reason, "release not completed: test");
  EXPECT_TRUE(old->undelivered);
  EXPECT_EQ(old->ended_at, 21);
  EXPECT_EQ(old->end_reason, "job revoked: test");
  EXPECT_EQ(store->CountLeasesOfJob("job-1", 30)->ever, 0);
  EXPECT_EQ(store->CountLeasesOfJob("job-1", 30)->active, 0);
}

// The child writes in a loop and reports each acknowledged write on a pipe; the parent
// kills it at a random moment, then reopens the database and looks for every write the
// child acknowledged.
// Each acknowledged write waits for an fdatasync of the WAL that began after its commit
// (synchronous=NORMAL leaves that to Store::Durable); a read syncs nothing.
TEST_F(StoreTest, EveryWriteReturnsOnlyAfterASyncOfTheWalAndAReadSyncsNothing) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  uint64_t before = store->wal_syncs();
  const auto expect_one_sync = [&](const Status& s, const char* what) {
    EXPECT_TRUE(s.ok()) << what << ": " << s.ToString();
    EXPECT_EQ(store->wal_syncs(), before + 1) << what << " returned without one sync of the WAL";
    before = store->wal_syncs();
  };
  HostRecord h = Host("aa", 1);
  expect_one_sync(store->UpsertHost(h), "UpsertHost");
  const std::vector<uint8_t> nonce(32, 7);
  expect_one_sync(store->PutNonce({nonce, "aa", 10, 1000}), "PutNonce");
  expect_one_sync(store->ConsumeNonce(nonce, 11).status(), "ConsumeNonce");
  expect_one_sync(store->UpdateClockState("aa", "", "clock-1"), "UpdateClockState");
  expect_one_sync(store->GetOrCreateJob(Job1()).status(), "GetOrCreateJob");
  LeaseRecord l = LeaseOfJob1("lease-1");
  l.claims = "c";
  expect_one_sync(store->PutLease(l, 10), "PutLease");
  expect_one_sync(store->RenewLease("lease-1", 200, 20).status(), "RenewLease");
  expect_one_sync(store->SetLeaseAddress("lease-1", "127.0.0.1:4000", 21), "SetLeaseAddress");
  expect_one_sync(store->MarkReported("lease-1", 22), "MarkReported");
  expect_one_sync(store->EndLease("lease-1", "done", 23), "EndLease");
  expect_one_sync(store->EndJob("job-1", "done", 24), "EndJob");
  expect_one_sync(store->Revoke(RevokedKind::kHost, "aa", "stolen", 25).status(), "Revoke");
  ASSERT_TRUE(store->GetHost("aa").ok());
  ASSERT_TRUE(store->GetLease("lease-1").ok());
  EXPECT_EQ(store->wal_syncs(), before) << "a read synced the WAL";
}

// Concurrent writers share the WAL's syncs and every one of their writes survives a reopen.
TEST_F(StoreTest, ConcurrentWritersShareSyncsAndLoseNothing) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  const uint64_t before = store->wal_syncs();
  constexpr int kThreads = 8, kPerThread = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::vector<uint8_t> nonce(32, 0);
        nonce[0] = static_cast<uint8_t>(t);
        nonce[1] = static_cast<uint8_t>(i);
        ASSERT_TRUE(store->PutNonce({nonce, "h", 10, 1000}).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  const uint64_t syncs = store->wal_syncs() - before;
  EXPECT_GE(syncs, 1u);
  EXPECT_LE(syncs, static_cast<uint64_t>(kThreads * kPerThread));
  std::cout << kThreads * kPerThread << " writes, " << syncs << " syncs of the WAL\n";
  store.reset();
  store = OpenStore();
  ASSERT_TRUE(store);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      std::vector<uint8_t> nonce(32, 0);
      nonce[0] = static_cast<uint8_t>(t);
      nonce[1] = static_cast<uint8_t>(i);
      EXPECT_TRUE(store->ConsumeNonce(nonce, 11).ok()) << t << "/" << i;
    }
  }
}

TEST_F(StoreTest, KillNineMidWritesLosesNothingAcknowledged) {
  constexpr int kRounds = 40;
  std::mt19937 rng(20261130);
  std::set<uint32_t> acknowledged;
  uint32_t next = 0;
  for (int round = 0; round < kRounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const uint32_t start = next;
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      auto s = Store::Open(path_);
      if (!s.ok()) ::_exit(3);
      for (uint32_t i = start;; ++i) {
        std::vector<uint8_t> nonce(32, 0);
        for (int b = 0; b < 4; ++b) nonce[static_cast<size_t>(b)] = static_cast<uint8_t>(i >> (8 * b));
        if (!(*s)->PutNonce({nonce, "host-" + std::to_string(i % 7), i, int64_t{i} + 1000000}).ok()) ::_exit(4);
        if (i % 5 == 0) {
          HostRecord h = Host("host-" + std::to_string(i), 0);
          h.ak_name = nonce;
          h.clock_state = std::to_string(i);
          if (!(*s)->UpsertHost(h).ok()) ::_exit(5);
        }
        if (::write(fds[1], &i, sizeof(i)) != sizeof(i)) ::_exit(6);
      }
    }
    ::close(fds[1]);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(20 + rng() % 200);
    uint32_t v = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      ssize_t n = ::read(fds[0], &v, sizeof(v));
      if (n != sizeof(v)) break;
      acknowledged.insert(v);
      next = std::max(next, v + 1);
    }
    ::kill(pid, SIGKILL);
    // Whatever is still in the pipe was acknowledged before the kill as well.
    while (::read(fds[0], &v, sizeof(v)) == sizeof(v)) {
      acknowledged.insert(v);
      next = std::max(next, v + 1);
    }
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round << ": the writer exited by itself with "
                                     << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    // Unacknowledged writes past `next` may have committed; the next child starts after
    // the highest one any reopening could see.
    auto s = Store::Open(path_);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.status().ToString();
    ASSERT_TRUE((*s)->IntegrityCheck().ok()) << "round " << round;
    next += 100000;
  }
  ASSERT_GT(acknowledged.size(), static_cast<size_t>(kRounds)) << "the writers acknowledged almost nothing";
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->IntegrityCheck().ok());
  size_t hosts_expected = 0;
  for (uint32_t i : acknowledged) {
    std::vector<uint8_t> nonce(32, 0);
    for (int b = 0; b < 4; ++b) nonce[static_cast<size_t>(b)] = static_cast<uint8_t>(i >> (8 * b));
    auto n = store->ConsumeNonce(nonce, 0);
    ASSERT_TRUE(n.ok()) << "acknowledged nonce " << i << " lost: " << n.status().ToString();
    EXPECT_EQ(n->issued_at, i);
    if (i % 5 == 0) {
      ++hosts_expected;
      auto h = store->GetHost("host-" + std::to_string(i));
      ASSERT_TRUE(h.ok()) << "acknowledged host " << i << " lost: " << h.status().ToString();
      EXPECT_EQ(h->clock_state, std::to_string(i));
    }
  }
  std::cout << acknowledged.size() << " acknowledged writes over " << kRounds << " kills, " << hosts_expected
            << " of them hosts, all present\n";
}

}  // namespace
}  // namespace enclave::broker
