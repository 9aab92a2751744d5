// The tenant keystore on real files: init, unlock, data keys, every field an attacker can
// edit, refusals, and two processes adding keys at once.
#include "enclave/crypto/keystore.h"

#include <gtest/gtest.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "crypto_test_util.h"

namespace enclave::crypto {
namespace {

using namespace enclave::crypto::testing;  // NOLINT
using nlohmann::json;

// OWASP's Argon2id floor: the cheapest parameters Init accepts, to keep the tests fast.
const KdfParams kFastKdf{2, 19ull << 20};

SecretBytes Passphrase(std::string_view s = "correct horse battery staple") { return Secret(AsBytes(s)); }

class KeystoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("tenant.keystore");
    ASSERT_OK(Keystore::Init(path_, Passphrase(), kFastKdf));
  }
  json ReadDoc() { return json::parse(ReadText(path_)); }
  void WriteDoc(const json& doc) { WriteText(path_, doc.dump(2)); }
  // Applies `edit` to the file's JSON, then expects Unlock to fail with `code`.
  void ExpectUnlockFails(const std::function<void(json&)>& edit, Code code, const std::string& what) {
    const std::string original = ReadText(path_);
    json doc = ReadDoc();
    edit(doc);
    WriteDoc(doc);
    auto ks = Keystore::Unlock(path_, Passphrase());
    EXPECT_FALSE(ks.ok()) << what << ": keystore unlocked after the edit";
    if (!ks.ok()) {
      EXPECT_EQ(ks.status().code(), code) << what << ": " << ks.status().ToString();
    }
    WriteText(path_, original);
  }

  TempDir dir_;
  std::string path_;
};

std::string FlipHexChar(std::string hex, size_t i) {
  hex[i] = hex[i] == '0' ? '1' : '0';
  return hex;
}

TEST_F(KeystoreTest, InitAndUnlock) {
  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
  EXPECT_TRUE(ks.entries().empty());
  EXPECT_FALSE(AllZero(ks.id()));
  const json doc = ReadDoc();
  EXPECT_EQ(doc["format"], "enclave-keystore");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["keystore_id"], HexEncode(ks.id()));
  EXPECT_EQ(doc["kdf"]["algorithm"], "argon2id13");
  EXPECT_EQ(doc["kdf"]["opslimit"], kFastKdf.opslimit);
  EXPECT_EQ(doc["kdf"]["memlimit_bytes"], kFastKdf.memlimit_bytes);
  // The file holds wrapped keys only, and is readable by its owner only.
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Two keystores never share an id or a KEK wrapping.
  const std::string other = dir_.File("other.keystore");
  ASSERT_OK(Keystore::Init(other, Passphrase(), kFastKdf));
  ASSERT_OK_AND_ASSIGN(Keystore ks2, Keystore::Unlock(other, Passphrase()));
  EXPECT_NE(ks.id(), ks2.id());
  EXPECT_NE(ReadDoc()["kek"]["wrapped"], json::parse(ReadText(other))["kek"]["wrapped"]);
}

TEST_F(KeystoreTest, WrongPassphraseIsPermissionDenied) {
  for (std::string_view wrong : {"correct horse battery stapl", "correct horse battery staple ",
                                 "Correct horse battery staple", "something else entirely"}) {
    EXPECT_CODE(Keystore::Unlock(path_, Passphrase(wrong)), Code::kPermissionDenied) << wrong;
  }
  EXPECT_OK(Keystore::Unlock(path_, Passphrase()));
}

// KNOWN BUG (reported, not fixed here): an empty passphrase (SecretBytes() holds a null
// pointer) reaches crypto_pwhash() as a null `passwd`, an argument libsodium declares
// nonnull: undefined behaviour, which the ENCLAVE_SANITIZE build turns into an abort
// (keystore.cc, PassphraseKey). It must be refused as a wrong passphrase instead.
TEST_F(KeystoreTest, EmptyPassphraseIsAWrongPassphrase) {
  EXPECT_CODE(Keystore::Unlock(path_, SecretBytes()), Code::kPermissionDenied);
}

TEST_F(KeystoreTest, DataKeysRoundTripAndSurviveReUnlock) {
  std::vector<std::pair<std::string, Id128>> made;
  std::vector<std::vector<uint8_t>> deks;
  {
    ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
    for (auto [name, suite] : {std::pair{"ward-7", Suite::kAes256Gcm}, std::pair{"ward-8", Suite::kChaCha20Poly1305},
                               std::pair{"ward-7", Suite::kChaCha20Poly1305}}) {
      Id128 id{};
      ASSERT_OK_AND_ASSIGN(SecretBytes dek, ks.CreateDataKey(name, suite, &id));
      EXPECT_EQ(dek.size(), 32u);
      EXPECT_FALSE(AllZero(id));
      made.emplace_back(name, id);
      deks.emplace_back(dek.ExposeSecret().begin(), dek.ExposeSecret().end());
      ASSERT_OK_AND_ASSIGN(SecretBytes again, ks.GetDataKey(name, id));
      EXPECT_TRUE(ConstantTimeEquals(again.ExposeSecret(), dek.ExposeSecret()));
    }
    ASSERT_EQ(ks.entries().size(), 3u);
    EXPECT_EQ(ks.entries()[1].dataset_id, "ward-8");
    EXPECT_EQ(ks.entries()[1].suite, Suite::kChaCha20Poly1305);
    EXPECT_EQ(ks.entries()[0].created.size(), 20u);  // 2024-01-02T03:04:05Z
  }
  EXPECT_NE(deks[0], deks[1]);
  EXPECT_NE(deks[0], deks[2]);
  EXPECT_NE(made[0].second, made[2].second);  // same dataset, two keys, two ids
  // No DEK appears in the file in the clear.
  const std::string text = ReadText(path_);
  for (const auto& d : deks) EXPECT_EQ(text.find(HexEncode(d)), std::string::npos);

  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
  ASSERT_EQ(ks.entries().size(), 3u);
  for (size_t i = 0; i < made.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(SecretBytes dek, ks.GetDataKey(made[i].first, made[i].second));
    EXPECT_TRUE(ConstantTimeEquals(dek.ExposeSecret(), deks[i])) << i;
  }
  // A key id under the wrong dataset, or an unknown id, is not found.
  EXPECT_CODE(ks.GetDataKey("ward-8", made[0].second), Code::kNotFound);
  Id128 unknown{};
  unknown.fill(0x42);
  EXPECT_CODE(ks.GetDataKey("ward-7", unknown), Code::kNotFound);
  EXPECT_CODE(ks.GetDataKey("no-such-dataset", made[0].second), Code::kNotFound);
  Id128 ignored{};
  EXPECT_CODE(ks.CreateDataKey("bad name/with slash", Suite::kAes256Gcm, &ignored), Code::kInvalidInput);
}

// NewDataKey makes a key in memory only; AddDataKey stores it (so a failed seal leaves no
// orphan key in the keystore).
TEST_F(KeystoreTest, NewDataKeyIsStoredOnlyByAddDataKey) {
  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
  const std::string before = ReadText(path_);
  ASSERT_OK_AND_ASSIGN(PendingDataKey pending, ks.NewDataKey("icu-2025", Suite::kChaCha20Poly1305));
  EXPECT_EQ(pending.dek.size(), 32u);
  EXPECT_FALSE(AllZero(pending.dek.ExposeSecret()));
  EXPECT_FALSE(AllZero(pending.entry.key_id));
  EXPECT_EQ(pending.entry.dataset_id, "icu-2025");
  EXPECT_EQ(pending.entry.suite, Suite::kChaCha20Poly1305);
  EXPECT_EQ(ReadText(path_), before) << "NewDataKey wrote to the keystore";
  EXPECT_TRUE(ks.entries().empty());
  EXPECT_CODE(ks.GetDataKey("icu-2025", pending.entry.key_id), Code::kNotFound);
  EXPECT_CODE(ks.NewDataKey("no spaces allowed", Suite::kAes256Gcm), Code::kInvalidInput);

  ASSERT_OK(ks.AddDataKey(pending));
  ASSERT_OK_AND_ASSIGN(SecretBytes got, ks.GetDataKey("icu-2025", pending.entry.key_id));
  EXPECT_TRUE(ConstantTimeEquals(got.ExposeSecret(), pending.dek.ExposeSecret()));
  ASSERT_OK_AND_ASSIGN(Keystore again, Keystore::Unlock(path_, Passphrase()));
  ASSERT_EQ(again.entries().size(), 1u);
  EXPECT_EQ(again.entries()[0].suite, Suite::kChaCha20Poly1305);
  ASSERT_OK_AND_ASSIGN(SecretBytes stored, again.GetDataKey("icu-2025", pending.entry.key_id));
  EXPECT_TRUE(ConstantTimeEquals(stored.ExposeSecret(), pending.dek.ExposeSecret()));

  // Malformed pending keys are refused before anything is written.
  const std::string stored_text = ReadText(path_);
  PendingDataKey short_key{pending.entry, RandomSecret(16)};
  short_key.entry.dataset_id = "other";
  EXPECT_CODE(ks.AddDataKey(short_key), Code::kInvalidInput);
  PendingDataKey bad_name{pending.entry, RandomSecret(32)};
  bad_name.entry.dataset_id = "../escape";
  EXPECT_CODE(ks.AddDataKey(bad_name), Code::kInvalidInput);
  EXPECT_EQ(ReadText(path_), stored_text);
}

// keystore.md: hex in either case is read. A keystore whose id is written in capitals
// unlocks and takes new keys (the replaced-while-in-use check compares the id's bytes).
TEST_F(KeystoreTest, AnIdWrittenInCapitalsTakesNewKeys) {
  json doc = ReadDoc();
  std::string id = doc["keystore_id"];
  for (char& c : id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_NE(id, doc["keystore_id"].get<std::string>()) << "the random id has no letter; rerun";
  doc["keystore_id"] = id;
  WriteDoc(doc);
  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
  Id128 key_id{};
  ASSERT_OK_AND_ASSIGN(SecretBytes dek, ks.CreateDataKey("icu-2025", Suite::kAes256Gcm, &key_id));
  ASSERT_OK(ks.CreateExportKey("tenant-export").status());
  ASSERT_OK_AND_ASSIGN(Keystore again, Keystore::Unlock(path_, Passphrase()));
  ASSERT_OK_AND_ASSIGN(SecretBytes stored, again.GetDataKey("icu-2025", key_id));
  EXPECT_TRUE(ConstantTimeEquals(stored.ExposeSecret(), dek.ExposeSecret()));
  EXPECT_EQ(again.export_keys().size(), 1u);
}

TEST_F(KeystoreTest, AlteredKdfOrKekIsPermissionDenied) {
  ExpectUnlockFails([](json& d) { d["kdf"]["opslimit"] = 3; }, Code::kPermissionDenied, "opslimit 2 -> 3");
  ExpectUnlockFails([](json& d) { d["kdf"]["opslimit"] = 1; }, Code::kPermissionDenied, "opslimit 2 -> 1");
  ExpectUnlockFails([](json& d) { d["kdf"]["memlimit_bytes"] = (19ull << 20) + 1024; }, Code::kPermissionDenied,
                    "memlimit + 1 KiB");
  ExpectUnlockFails([](json& d) { d["kdf"]["salt"] = FlipHexChar(d["kdf"]["salt"], 0); }, Code::kPermissionDenied,
                    "kdf salt");
  ExpectUnlockFails([](json& d) { d["kek"]["wrapped"] = FlipHexChar(d["kek"]["wrapped"], 5); },
                    Code::kPermissionDenied, "wrapped KEK");
  ExpectUnlockFails([](json& d) { d["kek"]["wrapped"] = FlipHexChar(d["kek"]["wrapped"], 95); },
                    Code::kPermissionDenied, "wrapped KEK tag");
  ExpectUnlockFails([](json& d) { d["kek"]["nonce"] = FlipHexChar(d["kek"]["nonce"], 47); },
                    Code::kPermissionDenied, "KEK nonce");
  ExpectUnlockFails([](json& d) { d["keystore_id"] = FlipHexChar(d["keystore_id"], 31); },
                    Code::kPermissionDenied, "keystore id (bound to the KEK)");
  // Malformed rather than altered: refused as input.
  ExpectUnlockFails([](json& d) { d["kdf"]["opslimit"] = 0; }, Code::kInvalidInput, "opslimit 0");
  ExpectUnlockFails([](json& d) { d["kdf"]["opslimit"] = 1000; }, Code::kInvalidInput, "opslimit beyond the cap");
  ExpectUnlockFails([](json& d) { d["kdf"]["memlimit_bytes"] = 1ull << 40; }, Code::kInvalidInput,
                    "memlimit beyond the cap");
  ExpectUnlockFails([](json& d) { d["kdf"]["opslimit"] = "2"; }, Code::kInvalidInput, "opslimit as a string");
  ExpectUnlockFails([](json& d) { d["kdf"]["salt"] = "abcd"; }, Code::kInvalidInput, "short salt");
  ExpectUnlockFails([](json& d) { d["kek"]["wrapped"] = "zz"; }, Code::kInvalidInput, "wrapped KEK not hex");
  ExpectUnlockFails([](json& d) { d.erase("kek"); }, Code::kInvalidInput, "no kek");
  ExpectUnlockFails([](json& d) { d["kdf"]["algorithm"] = "scrypt"; }, Code::kUnsupported, "other KDF");
  ExpectUnlockFails([](json& d) { d["version"] = 2; }, Code::kUnsupported, "version 2");
  ExpectUnlockFails([](json& d) { d["format"] = "something-else"; }, Code::kInvalidInput, "format");
  // Still intact afterwards.
  EXPECT_OK(Keystore::Unlock(path_, Passphrase()));
  // Not JSON at all.
  WriteText(path_, "{ not json");
  EXPECT_CODE(Keystore::Unlock(path_, Passphrase()), Code::kInvalidInput);
  EXPECT_CODE(Keystore::Unlock(dir_.File("absent.keystore"), Passphrase()), Code::kNotFound);
}

TEST_F(KeystoreTest, AlteredDataKeyEntries) {
  Id128 id_a{}, id_b{};
  std::vector<uint8_t> dek_a;
  {
    ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
    ASSERT_OK_AND_ASSIGN(SecretBytes a, ks.CreateDataKey("cohort-a", Suite::kAes256Gcm, &id_a));
    ASSERT_OK(ks.CreateDataKey("cohort-b", Suite::kAes256Gcm, &id_b));
    dek_a.assign(a.ExposeSecret().begin(), a.ExposeSecret().end());
  }
  const std::string original = ReadText(path_);
  // Each edit: the file still unlocks (the KEK is intact), and the edited entry refuses to
  // give out a key: kAuthFailed where the edited entry is asked for, kNotFound under the
  // old name, while the untouched entry still works.
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::string ask_dataset;
    bool ask_new_key_id;
  };
  auto key_id_b = HexEncode(id_b);
  const Case cases[] = {
      {"dataset_id renamed", [](json& d) { d["data_keys"][0]["dataset_id"] = "cohort-c"; }, "cohort-c", false},
      {"dataset_id renamed to the other entry's", [](json& d) { d["data_keys"][0]["dataset_id"] = "cohort-b"; },
       "cohort-b", false},
      {"wrapped bytes flipped",
       [](json& d) { d["data_keys"][0]["wrapped"] = FlipHexChar(d["data_keys"][0]["wrapped"], 3); }, "cohort-a",
       false},
      {"wrapped tag flipped",
       [](json& d) { d["data_keys"][0]["wrapped"] = FlipHexChar(d["data_keys"][0]["wrapped"], 95); }, "cohort-a",
       false},
      {"nonce flipped", [](json& d) { d["data_keys"][0]["nonce"] = FlipHexChar(d["data_keys"][0]["nonce"], 10); },
       "cohort-a", false},
      {"suite changed", [](json& d) { d["data_keys"][0]["suite"] = "chacha20-poly1305"; }, "cohort-a", false},
      {"wrapped key swapped with the other entry's",
       [](json& d) {
         d["data_keys"][0]["wrapped"] = d["data_keys"][1]["wrapped"];
         d["data_keys"][0]["nonce"] = d["data_keys"][1]["nonce"];
       },
       "cohort-a", false},
      {"key_id changed", [](json& d) { d["data_keys"][0]["key_id"] = FlipHexChar(d["data_keys"][0]["key_id"], 0); },
       "cohort-a", true},
  };
  for (const Case& c : cases) {
    WriteText(path_, original);
    json doc = json::parse(original);
    c.edit(doc);
    WriteText(path_, doc.dump(2));
    auto ks = Keystore::Unlock(path_, Passphrase());
    ASSERT_TRUE(ks.ok()) << c.what << ": " << ks.status().ToString();
    Id128 ask = id_a;
    if (c.ask_new_key_id) {
      auto b = HexDecode(doc["data_keys"][0]["key_id"].get<std::string>());
      ASSERT_TRUE(b.ok());
      std::copy(b->begin(), b->end(), ask.begin());
    }
    EXPECT_CODE(ks->GetDataKey(c.ask_dataset, ask), Code::kAuthFailed) << c.what;
    if (c.ask_dataset != "cohort-a" || c.ask_new_key_id) {
      EXPECT_CODE(ks->GetDataKey("cohort-a", id_a), Code::kNotFound) << c.what;
    }
    // The other entry is unaffected (where it was not the one changed).
    EXPECT_OK(ks->GetDataKey("cohort-b", id_b));
  }
  // Malformed entries are refused when the file is read.
  auto malformed = [&](const char* what, const std::function<void(json&)>& edit) {
    json doc = json::parse(original);
    edit(doc);
    WriteText(path_, doc.dump(2));
    EXPECT_CODE(Keystore::Unlock(path_, Passphrase()), Code::kInvalidInput) << what;
  };
  malformed("dataset id with a slash", [](json& d) { d["data_keys"][0]["dataset_id"] = "../etc"; });
  malformed("wrapped key too short", [](json& d) { d["data_keys"][0]["wrapped"] = "00"; });
  malformed("key id not hex", [](json& d) { d["data_keys"][0]["key_id"] = std::string(32, 'x'); });
  malformed("unknown suite", [](json& d) { d["data_keys"][0]["suite"] = "rot13"; });
  malformed("entry without created", [](json& d) { d["data_keys"][0].erase("created"); });
  malformed("data_keys not an array", [](json& d) { d["data_keys"] = json::object(); });
  // And the original is fine.
  WriteText(path_, original);
  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
  ASSERT_OK_AND_ASSIGN(SecretBytes a, ks.GetDataKey("cohort-a", id_a));
  EXPECT_TRUE(ConstantTimeEquals(a.ExposeSecret(), dek_a));
}

TEST_F(KeystoreTest, InitRefusesExistingFileAndWeakSettings) {
  const std::string before = ReadText(path_);
  EXPECT_CODE(Keystore::Init(path_, Passphrase("another passphrase!"), kFastKdf), Code::kAlreadyExists);
  EXPECT_EQ(ReadText(path_), before) << "Init replaced an existing keystore";
  EXPECT_OK(Keystore::Unlock(path_, Passphrase()));

  const std::string fresh = dir_.File("fresh.keystore");
  EXPECT_CODE(Keystore::Init(fresh, Passphrase("eleven char"), kFastKdf), Code::kInvalidInput);  // 11 bytes
  EXPECT_CODE(Keystore::Init(fresh, SecretBytes(), kFastKdf), Code::kInvalidInput);
  EXPECT_CODE(Keystore::Init(fresh, Passphrase(), KdfParams{1, 64ull << 20}), Code::kInvalidInput);
  EXPECT_CODE(Keystore::Init(fresh, Passphrase(), KdfParams{2, (19ull << 20) - 1}), Code::kInvalidInput);
  EXPECT_CODE(Keystore::Init(fresh, Passphrase(), KdfParams{65, 19ull << 20}), Code::kInvalidInput);
  EXPECT_CODE(Keystore::Init(fresh, Passphrase(), KdfParams{2, (4ull << 30) + 1}), Code::kInvalidInput);
  EXPECT_FALSE(std::filesystem::exists(fresh)) << "a refused Init left a file behind";
  EXPECT_OK(Keystore::Init(fresh, Passphrase("twelve chars"), kFastKdf));  // exactly the minimum
  EXPECT_OK(Keystore::Unlock(fresh, Passphrase("twelve chars")));
}

// Two processes add keys to one keystore at the same time, each through its own unlocked
// Keystore: the lock and the re-read under it keep every key.
TEST_F(KeystoreTest, ConcurrentProcessesKeepAllKeys) {
  constexpr int kChildren = 2, kKeysEach = 6;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  struct Child {
    pid_t pid;
    int out;
  };
  std::vector<Child> children;
  for (int c = 0; c < kChildren; ++c) {
    int report[2];
    ASSERT_EQ(::pipe(report), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: no gtest assertions, only an exit code and lines "dataset key_id dek".
      ::close(go[1]);
      ::close(report[0]);
      auto ks = Keystore::Unlock(path_, Passphrase());
      if (!ks.ok()) ::_exit(10);
      char byte;
      while (::read(go[0], &byte, 1) > 0) {
      }  // wait until the parent closes the pipe: both start together
      for (int k = 0; k < kKeysEach; ++k) {
        const std::string name = "child" + std::to_string(c) + "-ds" + std::to_string(k);
        Id128 id{};
        auto dek = ks->CreateDataKey(name, Suite::kAes256Gcm, &id);
        if (!dek.ok()) ::_exit(11);
        const std::string line = name + " " + HexEncode(id) + " " + HexEncode(dek->ExposeSecret()) + "\n";
        if (::write(report[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(12);
      }
      ::_exit(0);
    }
    ::close(report[1]);
    children.push_back({pid, report[0]});
  }
  ::close(go[0]);
  ::close(go[1]);  // go
  std::vector<std::string> lines;
  for (const Child& ch : children) {
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(ch.out, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    ::close(ch.out);
    int status = 0;
    ASSERT_EQ(::waitpid(ch.pid, &status, 0), ch.pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed, status " << status;
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
      lines.push_back(text.substr(start, nl - start));
  }
  ASSERT_EQ(lines.size(), static_cast<size_t>(kChildren * kKeysEach));

  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
  EXPECT_EQ(ks.entries().size(), static_cast<size_t>(kChildren * kKeysEach)) << "keys were lost";
  std::set<std::string> names;
  for (const auto& e : ks.entries()) names.insert(e.dataset_id);
  EXPECT_EQ(names.size(), static_cast<size_t>(kChildren * kKeysEach));
  for (const std::string& line : lines) {
    const auto s1 = line.find(' '), s2 = line.rfind(' ');
    const std::string name = line.substr(0, s1);
    auto id_bytes = HexDecode(line.substr(s1 + 1, s2 - s1 - 1));
    ASSERT_TRUE(id_bytes.ok() && id_bytes->size() == 16) << line;
    Id128 id{};
    std::copy(id_bytes->begin(), id_bytes->end(), id.begin());
    auto dek = ks.GetDataKey(name, id);
    ASSERT_TRUE(dek.ok()) << name << ": " << dek.status().ToString();
    EXPECT_EQ(HexEncode(dek->ExposeSecret()), line.substr(s2 + 1)) << name;
  }
  // No temporary files left beside the keystore.
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    const std::string f = e.path().filename().string();
    EXPECT_TRUE(f == "tenant.keystore" || f == "tenant.keystore.lock") << "left behind: " << f;
  }
}


// --- Export keys (X25519 pairs for exported models) ---

TEST_F(KeystoreTest, ExportKeysCreateFindAndSurviveReUnlock) {
  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
  EXPECT_TRUE(ks.export_keys().empty());
  EXPECT_CODE(ks.FindExportKey(""), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(ExportKeyEntry a, ks.CreateExportKey("export-2026"));
  ASSERT_OK_AND_ASSIGN(ExportKeyEntry b, ks.CreateExportKey("export-2027"));
  EXPECT_NE(a.key_id, b.key_id);
  EXPECT_NE(a.public_key, b.public_key);
  EXPECT_CODE(ks.CreateExportKey("export-2026"), Code::kAlreadyExists);
  EXPECT_CODE(ks.CreateExportKey("bad name"), Code::kInvalidInput);
  EXPECT_CODE(ks.CreateExportKey(""), Code::kInvalidInput);
  ASSERT_OK_AND_ASSIGN(ExportKeyEntry newest, ks.FindExportKey(""));
  EXPECT_EQ(newest.key_id, b.key_id);
  ASSERT_OK_AND_ASSIGN(ExportKeyEntry named, ks.FindExportKey("export-2026"));
  EXPECT_EQ(named.key_id, a.key_id);
  EXPECT_CODE(ks.FindExportKey("nope"), Code::kNotFound);

  // The private half is X25519's preimage of the public half, and survives a re-unlock.
  ASSERT_OK_AND_ASSIGN(SecretBytes priv, ks.GetExportPrivateKey(a.key_id));
  X25519PublicKey derived{};
  ASSERT_EQ(crypto_scalarmult_base(derived.data(), priv.ExposeSecret().data()), 0);
  EXPECT_EQ(derived, a.public_key);
  ASSERT_OK_AND_ASSIGN(Keystore again, Keystore::Unlock(path_, Passphrase()));
  ASSERT_EQ(again.export_keys().size(), 2u);
  EXPECT_EQ(again.export_keys()[0].public_key, a.public_key);
  ASSERT_OK_AND_ASSIGN(SecretBytes priv2, again.GetExportPrivateKey(a.key_id));
  EXPECT_TRUE(ConstantTimeEquals(priv.ExposeSecret(), priv2.ExposeSecret()));
  Id128 unknown{};
  EXPECT_CODE(again.GetExportPrivateKey(unknown), Code::kNotFound);

  // Adding a data key keeps the export keys; creating an export key keeps the data keys.
  Id128 key_id{};
  ASSERT_OK(again.CreateDataKey("ds", Suite::kAes256Gcm, &key_id));
  ASSERT_OK(again.CreateExportKey("export-2028"));
  ASSERT_OK_AND_ASSIGN(Keystore third, Keystore::Unlock(path_, Passphrase()));
  EXPECT_EQ(third.export_keys().size(), 3u);
  EXPECT_OK(third.GetDataKey("ds", key_id));
  const json doc = ReadDoc();
  EXPECT_EQ(doc["export_keys"][0]["algorithm"], "x25519");
  EXPECT_EQ(doc["export_keys"][0]["public_key"], HexEncode(a.public_key));
  EXPECT_EQ(doc["version"], 1);  // an additive, backward-compatible member
}

// A keystore written before export keys existed (the interop fixture) still opens, and
// gains an export key without its data keys changing.
TEST(KeystoreCompat, KeystoreWithoutExportKeysStillOpens) {
  TempDir dir;
  const std::string fixture = std::string(ENCLAVE_TEST_DATA) + "/dataset/interop_example.keystore.json";
  const std::string original = ReadText(fixture);
  ASSERT_FALSE(original.empty()) << fixture;
  ASSERT_EQ(json::parse(original).count("export_keys"), 0u) << "the fixture should be an old-format keystore";
  const std::string path = dir.File("old.keystore.json");
  WriteText(path, original);
  SecretBytes pass = Secret(AsBytes("correct horse battery staple"));
  ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path, pass));
  EXPECT_TRUE(ks.export_keys().empty());
  ASSERT_EQ(ks.entries().size(), 1u);
  ASSERT_OK_AND_ASSIGN(SecretBytes dek, ks.GetDataKey("example:credit-mini", ks.entries()[0].key_id));
  std::vector<uint8_t> expected(32);
  for (size_t i = 0; i < 32; ++i) expected[i] = static_cast<uint8_t>(i);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), dek.ExposeSecret().begin()));
  ASSERT_OK(ks.CreateExportKey("export"));
  const json before = json::parse(original), after = json::parse(ReadText(path));
  EXPECT_EQ(after["data_keys"], before["data_keys"]);
  EXPECT_EQ(after["kek"], before["kek"]);
  EXPECT_EQ(after["kdf"], before["kdf"]);
  EXPECT_EQ(after["export_keys"].size(), 1u);
  ASSERT_OK_AND_ASSIGN(Keystore again, Keystore::Unlock(path, pass));
  EXPECT_OK(again.GetDataKey("example:credit-mini", again.entries()[0].key_id));
  EXPECT_OK(again.GetExportPrivateKey(again.export_keys()[0].key_id));
}

TEST_F(KeystoreTest, AlteredExportKeyEntries) {
  {
    ASSERT_OK_AND_ASSIGN(Keystore ks, Keystore::Unlock(path_, Passphrase()));
    ASSERT_OK(ks.CreateExportKey("first"));
    ASSERT_OK(ks.CreateExportKey("second"));
  }
  const std::string original = ReadText(path_);
  // Edits the unwrap detects: kAuthFailed from GetExportPrivateKey.
  auto expect_unwrap_fails = [&](const std::function<void(json&)>& edit, const std::string& what) {
    json doc = json::parse(original);
    edit(doc);
    WriteDoc(doc);
    auto ks = Keystore::Unlock(path_, Passphrase());
    ASSERT_TRUE(ks.ok()) << what << ": " << ks.status().ToString();
    ASSERT_EQ(ks->export_keys().size(), 2u) << what;
    EXPECT_CODE(ks->GetExportPrivateKey(ks->export_keys()[0].key_id), Code::kAuthFailed) << what;
    EXPECT_OK(ks->GetExportPrivateKey(ks->export_keys()[1].key_id)) << what;
    WriteText(path_, original);
  };
  const json doc = json::parse(original);
  const std::string other_pub = doc["export_keys"][1]["public_key"];
  expect_unwrap_fails([&](json& d) { d["export_keys"][0]["public_key"] = other_pub; }, "public key swapped");
  expect_unwrap_fails([](json& d) { d["export_keys"][0]["name"] = "renamed"; }, "renamed");
  expect_unwrap_fails([](json& d) { d["export_keys"][0]["wrapped"] = FlipHexChar(d["export_keys"][0]["wrapped"], 5); },
                      "wrapped flipped");
  expect_unwrap_fails([](json& d) { d["export_keys"][0]["nonce"] = FlipHexChar(d["export_keys"][0]["nonce"], 0); },
                      "nonce flipped");
  expect_unwrap_fails([](json& d) { d["export_keys"][0]["key_id"] = FlipHexChar(d["export_keys"][0]["key_id"], 0); },
                      "key id changed");
  expect_unwrap_fails(
      [&](json& d) {  // the wrapped private key of another entry moved here
        d["export_keys"][0]["nonce"] = d["export_keys"][1]["nonce"];
        d["export_keys"][0]["wrapped"] = d["export_keys"][1]["wrapped"];
      },
      "wrap moved from another entry");
  // Structural damage: the keystore does not open at all.
  ExpectUnlockFails([](json& d) { d["export_keys"] = json::object(); }, Code::kInvalidInput, "not an array");
  ExpectUnlockFails([](json& d) { d["export_keys"][0].erase("public_key"); }, Code::kInvalidInput, "no public key");
  ExpectUnlockFails([](json& d) { d["export_keys"][0]["public_key"] = "abcd"; }, Code::kInvalidInput, "short key");
  ExpectUnlockFails([](json& d) { d["export_keys"][0]["algorithm"] = "p256"; }, Code::kUnsupported, "algorithm");
  ExpectUnlockFails([](json& d) { d["export_keys"][1]["name"] = "first"; }, Code::kInvalidInput, "duplicate name");
  ExpectUnlockFails([](json& d) { d["export_keys"][0]["name"] = "a b"; }, Code::kInvalidInput, "bad name");
  ExpectUnlockFails([](json& d) { d["export_keys"][0] = 7; }, Code::kInvalidInput, "entry not an object");
}

}  // namespace
}  // namespace enclave::crypto

namespace enclave::crypto {
namespace {

TEST(InMemoryKeystore, HoldsReleasedKeysUnderTheGivenIdAndWritesNothing) {
  Id128 id{};
  id.fill(0x42);
  auto ks = Keystore::InMemory(id);
  ASSERT_TRUE(ks.ok()) << ks.status().ToString();
  EXPECT_TRUE(ks->in_memory());
  EXPECT_EQ(ks->id(), id);
  PendingDataKey k;
  k.entry.dataset_id = "wdbc";
  k.entry.key_id.fill(7);
  auto dek = SecretBytes::Random(32);
  ASSERT_TRUE(dek.ok());
  auto copy = dek->Clone();
  k.dek = std::move(dek).value();
  ASSERT_TRUE(ks->AddDataKey(k).ok());
  auto got = ks->GetDataKey("wdbc", k.entry.key_id);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(ConstantTimeEquals(got->ExposeSecret(), copy->ExposeSecret()));
  Id128 other{};
  EXPECT_EQ(ks->GetDataKey("wdbc", other).status().code(), Code::kNotFound);
  EXPECT_EQ(ks->CreateExportKey("x").status().code(), Code::kFailedPrecondition);
  PendingDataKey bad;
  bad.entry.dataset_id = "wdbc";
  EXPECT_FALSE(ks->AddDataKey(bad).ok());  // not 32 bytes
}

}  // namespace
}  // namespace enclave::crypto
