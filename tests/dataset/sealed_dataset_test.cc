#include "enclave/dataset/sealed_dataset.h"
#include "enclave/dataset/csv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "seal_fixture.h"
#include "test_files.h"

namespace enclave::dataset {
namespace {

namespace fs = std::filesystem;
using crypto::Keystore;
using crypto::SecretBytes;

using testing::Passphrase;

class SealedDatasetTest : public testing::SealFixture {
 protected:
  // Seals, expects failure with kInvalidInput naming `where`, and no output file.
  void ExpectRejected(SealOptions o, const std::string& where) {
    auto r = SealCsv(o, *keystore_);
    ASSERT_FALSE(r.ok()) << "sealing should have failed";
    EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
    EXPECT_NE(r.status().message().find(where), std::string::npos) << r.status().message();
    EXPECT_FALSE(fs::exists(o.out_path));
    for (auto& e : fs::directory_iterator(dir_)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "temporary left: " << e.path();
    }
  }

};

TEST_F(SealedDatasetTest, MedicalSampleRoundTripsByteForByte) {
  for (auto suite : {crypto::Suite::kAes256Gcm, crypto::Suite::kChaCha20Poly1305}) {
    SealOptions o;
    o.csv_path = std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv";
    o.out_path = (dir_ / "bcw.sealed").string();
    o.label = {"diagnosis", "malignant", {}};
    o.suite = suite;
    o.dataset_id = "bcw";
    o.overwrite = true;
    auto info = SealCsv(o, *keystore_);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->rows, 569u);
    EXPECT_EQ(info->schema.feature_count(), 30u);
    EXPECT_EQ(info->schema.classes, (std::vector<std::string>{"benign", "malignant"}));

    auto inspected = InspectSealed(o.out_path);
    ASSERT_TRUE(inspected.ok()) << inspected.status().ToString();
    EXPECT_EQ(inspected->file_digest, info->file_digest);
    EXPECT_EQ(inspected->header.params.suite, suite);

    ASSERT_TRUE(VerifySealed(o.out_path, *keystore_).ok());
    std::string out = (dir_ / "bcw.csv").string();
    fs::remove(out);
    ASSERT_TRUE(OpenSealedToCsv(o.out_path, *keystore_, out, false).ok());
    EXPECT_EQ(testing::ReadFile(out), testing::ReadFile(o.csv_path));
  }
}

TEST_F(SealedDatasetTest, FinancialSampleHasYesNoColumnsAndRoundTrips) {
  SealOptions o;
  o.csv_path = std::string(ENCLAVE_SAMPLE_DATA) + "/credit_card_applications.csv";
  o.out_path = (dir_ / "cc.sealed").string();
  o.label = {"card", "yes", {}};
  o.dataset_id = "cc";
  auto info = SealCsv(o, *keystore_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->rows, 1319u);
  EXPECT_EQ(info->schema.feature_count(), 11u);
  for (const Column& c : info->schema.columns) {
    ColumnKind expected = c.name == "card"                           ? ColumnKind::kLabel
                          : (c.name == "owner" || c.name == "selfemp") ? ColumnKind::kYesNo
                                                                       : ColumnKind::kNumeric;
    EXPECT_EQ(c.kind, expected) << c.name;
  }
  std::string out = (dir_ / "cc.csv").string();
  ASSERT_TRUE(OpenSealedToCsv(o.out_path, *keystore_, out, false).ok());
  EXPECT_EQ(testing::ReadFile(out), testing::ReadFile(o.csv_path));
}

TEST_F(SealedDatasetTest, RecordsHoldFeaturesThenClassIndex) {
  SealOptions o = Options("x,label,flag\n1.5,b,yes\n-2,a,no\n3e2,c,YES\n", "label");
  o.chunk_records = 2;  // two chunks: 2 records + 1 record
  auto info = SealCsv(o, *keystore_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->header.chunk_count, 2u);
  EXPECT_EQ(info->schema.classes, (std::vector<std::string>{"a", "b", "c"}));
  const std::vector<float> all = Records(o.out_path);
  // Per record: x, flag (features in column order), then the label's class index.
  EXPECT_EQ(all, (std::vector<float>{1.5f, 1.0f, 1.0f, -2.0f, 0.0f, 0.0f, 300.0f, 1.0f, 2.0f}));
}

TEST_F(SealedDatasetTest, NumericLabelsSortNumerically) {
  auto info = SealCsv(Options("f,y\n1,10\n2,9\n3,2\n", "y"), *keystore_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->schema.classes, (std::vector<std::string>{"2", "9", "10"}));
}

TEST_F(SealedDatasetTest, BadCsvIsRejectedWithFileAndLine) {
  ExpectRejected(Options("", "y"), "empty CSV");
  ExpectRejected(Options("f,y\n", "y"), "no data rows");
  ExpectRejected(Options("f,y\n1,a\n2\n", "y"), "in.csv:3: 1 fields, header has 2");
  ExpectRejected(Options("f,y\n1,a\n2,b,3\n", "y"), "in.csv:3: 3 fields, header has 2");
  // (Text, missing cells and yes/no mixed with numbers are no longer errors: schema v2,
  // tabular_v2_test.cc.)
  ExpectRejected(Options("f,y\n1,a\n1e999,b\n", "y"), "in.csv:3: column 'f': not a valid float32 number");
  ExpectRejected(Options("f,y\n1,a\n", "label"), "label column 'label' not in header");
  ExpectRejected(Options("f,f,y\n1,2,a\n", "y"), "duplicate column name 'f'");
  ExpectRejected(Options("f,y\n1,a\n2,\n", "y"), "in.csv:3: column 'y': missing label");
  ExpectRejected(Options("f,y\n1,a\n2,a\n", "y"), "2..65536 classes, has 1");
}

TEST_F(SealedDatasetTest, UnknownLabelValuesAreRejected) {
  SealOptions positive = Options("f,y\n1,yes\n2,no\n3,maybe\n", "y");
  positive.label.positive = "yes";
  ExpectRejected(positive, "in.csv:4: column 'y': unknown label value");
  SealOptions absent = Options("f,y\n1,a\n2,b\n", "y");
  absent.label.positive = "c";
  ExpectRejected(absent, "positive label value 'c' never occurs");
  SealOptions fixed = Options("f,y\n1,a\n2,b\n3,z\n", "y");
  fixed.label.classes = {"a", "b"};
  ExpectRejected(fixed, "in.csv:4: column 'y': unknown label value 'z'");
}

TEST_F(SealedDatasetTest, WrongKeystoreIsNotFound) {
  auto info = SealCsv(Options("f,y\n1,a\n2,b\n", "y"), *keystore_);
  ASSERT_TRUE(info.ok());
  std::string other = (dir_ / "other.json").string();
  ASSERT_TRUE(Keystore::Init(other, Passphrase(), {2, 19ull << 20}).ok());
  auto other_ks = Keystore::Unlock(other, Passphrase());
  ASSERT_TRUE(other_ks.ok());
  auto r = VerifySealed((dir_ / "out.sealed").string(), *other_ks);
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("not with this keystore"), std::string::npos);
}

TEST_F(SealedDatasetTest, TamperedOrTruncatedFileFailsAndOpenLeavesNoOutput) {
  SealOptions o = Options("f,y\n1,a\n2,b\n3,a\n4,b\n", "y");
  o.chunk_records = 1;
  ASSERT_TRUE(SealCsv(o, *keystore_).ok());
  std::string bytes = testing::ReadFile(o.out_path);
  std::string out = (dir_ / "opened.csv").string();

  std::string flipped = bytes;
  flipped[flipped.size() - 20] ^= 0x01;  // inside the last chunk
  testing::WriteFile(o.out_path, flipped);
  auto r = OpenSealedToCsv(o.out_path, *keystore_, out, false);
  EXPECT_EQ(r.code(), Code::kAuthFailed) << r.ToString();
  EXPECT_NE(r.message().find("chunk 3 failed authentication"), std::string::npos) << r.message();
  EXPECT_FALSE(fs::exists(out));

  testing::WriteFile(o.out_path, bytes.substr(0, bytes.size() - 24));  // drop the last chunk
  auto t = VerifySealed(o.out_path, *keystore_);
  EXPECT_EQ(t.status().code(), Code::kAuthFailed);
  EXPECT_NE(t.status().message().find("truncated"), std::string::npos) << t.status().message();

  std::string future = bytes;
  future[8] = 2;  // format version 2
  testing::WriteFile(o.out_path, future);
  EXPECT_EQ(InspectSealed(o.out_path).status().code(), Code::kUnsupported);
}

}  // namespace
}  // namespace enclave::dataset

namespace enclave::dataset {
namespace {

TEST_F(SealedDatasetTest, NumberEdgeCases) {
  SealOptions ok = Options("f,y\n+1.5,a\n1e-40,b\n-0,a\n0e-50,b\n", "y");
  ok.out_path = (dir_ / "ok.sealed").string();
  auto info = SealCsv(ok, *keystore_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();  // a subnormal is kept; zero is zero
  // Non-zero but rounds to zero (sealed-dataset.md, "Numbers"): refused, not sealed as 0.
  ExpectRejected(Options("f,y\n1,a\n1e-50,b\n", "y"), "in.csv:3: column 'f': not a valid float32 number");
  ExpectRejected(Options("f,y\n1,a\n-1e-50,b\n", "y"), "in.csv:3: column 'f': not a valid float32 number");
  ExpectRejected(Options("f,y\n1,a\n+-1,b\n", "y"), "in.csv:3: column 'f': not a valid float32 number");
  ExpectRejected(Options("f,y\n1,a\n++1,b\n", "y"), "in.csv:3: column 'f': not a valid float32 number");
  ExpectRejected(Options("f,y\n1,a\n1e39,b\n", "y"), "in.csv:3: column 'f': not a valid float32 number");
}

// The one number parser of the sealer and of enclave-train's CSV datasets.
TEST(ParseCsvNumber, UnderflowToZeroIsRefusedSubnormalsKept) {
  float v = 1;
  EXPECT_FALSE(ParseCsvNumber("1e-50", &v));
  EXPECT_FALSE(ParseCsvNumber("-1e-50", &v));
  EXPECT_FALSE(ParseCsvNumber("7e-46", &v));  // below half the smallest subnormal
  EXPECT_FALSE(ParseCsvNumber("1e-400", &v));  // below double's range too
  EXPECT_FALSE(ParseCsvNumber("1e39", &v));
  ASSERT_TRUE(ParseCsvNumber("8e-46", &v));  // rounds up to the smallest subnormal
  EXPECT_EQ(v, std::numeric_limits<float>::denorm_min());
  ASSERT_TRUE(ParseCsvNumber(" 1e-40\t", &v));
  EXPECT_GT(v, 0.0f);
  EXPECT_LT(v, std::numeric_limits<float>::min());
  ASSERT_TRUE(ParseCsvNumber("0e-999", &v));
  EXPECT_EQ(v, 0.0f);
  ASSERT_TRUE(ParseCsvNumber("-0.000", &v));
  EXPECT_EQ(v, 0.0f);
  ASSERT_TRUE(ParseCsvNumber("+2.5", &v));
  EXPECT_EQ(v, 2.5f);
  EXPECT_FALSE(ParseCsvNumber("+-1", &v));
  EXPECT_FALSE(ParseCsvNumber("  ", &v));
}

// Pass two must read what pass one checked. The progress callback runs between the two
// passes (its last pass-one call reports half of the file), so it can change the CSV there.
class ChangedCsvTest : public SealedDatasetTest {
 protected:
  // Seals `before`, replacing the file by `after` between the passes; expects the seal to
  // fail naming `what`, with no output, no temporary and no key.
  void ExpectChangedRejected(const std::string& before, const std::string& after, const std::string& what) {
    SealOptions o = Options(before, "y");
    bool changed = false;
    o.progress = [&](uint64_t done, uint64_t total) {
      if (!changed && total > 0 && done * 2 >= total - 1) {
        testing::WriteFile(o.csv_path, after);
        changed = true;
      }
    };
    auto r = SealCsv(o, *keystore_);
    ASSERT_TRUE(changed);
    ASSERT_FALSE(r.ok()) << "a CSV changed between the passes was sealed";
    EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
    EXPECT_NE(r.status().message().find("changed while sealing (" + what), std::string::npos) << r.status().message();
    EXPECT_FALSE(fs::exists(o.out_path));
    for (auto& e : fs::directory_iterator(dir_)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "temporary left: " << e.path();
    }
    auto reopened = crypto::Keystore::Unlock(keystore_path_, Passphrase());
    ASSERT_TRUE(reopened.ok());
    EXPECT_TRUE(reopened->entries().empty()) << "a failed seal added a key";
  }
};

TEST_F(ChangedCsvTest, HeaderRenamed) {
  // Same size, same rows: without the header check the file is sealed under the old names.
  ExpectChangedRejected("f,g,y\n1,2,a\n3,4,b\n", "g,f,y\n1,2,a\n3,4,b\n", "header)");
}

TEST_F(ChangedCsvTest, CellChanged) {
  // Every row still valid, same count: only the digest of the whole file notices.
  ExpectChangedRejected("f,g,y\n1,2,a\n3,4,b\n", "f,g,y\n1,2,a\n3,5,b\n", "its SHA-256 differs");
}

TEST_F(ChangedCsvTest, RowsAddedOrRemoved) {
  ExpectChangedRejected("f,y\n1,a\n2,b\n", "f,y\n1,a\n2,b\n3,a\n", "more rows)");
  ExpectChangedRejected("f,y\n1,a\n2,b\n3,a\n", "f,y\n1,a\n2,b\n", "fewer rows)");
}

TEST_F(SealedDatasetTest, UnchangedCsvSealsWithProgress) {
  SealOptions o = Options("f,g,y\n1,2,a\n3,4,b\n", "y");
  int calls = 0;
  o.progress = [&](uint64_t, uint64_t) { ++calls; };
  auto r = SealCsv(o, *keystore_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(calls, 0);
}

// Output that appears during the seal (no --force): the commit fails with *already exists*
// and, since the key is added only after the commit, the keystore is unchanged.
TEST_F(SealedDatasetTest, OutputAppearingDuringSealLeavesNoKey) {
  SealOptions o = Options("f,y\n1,a\n2,b\n", "y");
  o.progress = [&](uint64_t, uint64_t) {
    if (!fs::exists(o.out_path)) testing::WriteFile(o.out_path, "someone else's file");
  };
  auto r = SealCsv(o, *keystore_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kAlreadyExists) << r.status().ToString();
  EXPECT_EQ(testing::ReadFile(o.out_path), "someone else's file");
  auto reopened = crypto::Keystore::Unlock(keystore_path_, Passphrase());
  ASSERT_TRUE(reopened.ok());
  EXPECT_TRUE(reopened->entries().empty()) << "orphan key left by a failed seal";
}

// Adding the key fails after the file was committed (the keystore was replaced during the
// seal): the committed file is removed again, so no sealed file is left without its key.
TEST_F(SealedDatasetTest, KeyThatCannotBeAddedRemovesTheCommittedFile) {
  SealOptions o = Options("f,y\n1,a\n2,b\n", "y");
  const std::string other = (dir_ / "other.json").string();
  ASSERT_TRUE(Keystore::Init(other, Passphrase(), {2, 19ull << 20}).ok());
  bool replaced = false;
  o.progress = [&](uint64_t, uint64_t) {
    if (!replaced) fs::rename(other, keystore_path_);
    replaced = true;
  };
  auto r = SealCsv(o, *keystore_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition) << r.status().ToString();
  EXPECT_FALSE(fs::exists(o.out_path)) << "a sealed file without its key was left";
}

// The same with a keystore of the same id under another KEK (what `enclave-attest attest`
// makes as a partial copy): a key wrapped under the old KEK could never be unwrapped from
// the new file, so the seal fails and leaves neither the file nor the key.
TEST_F(SealedDatasetTest, AKeystoreReplacedByOneWithTheSameIdAndAnotherKekIsNoticed) {
  SealOptions o = Options("f,y\n1,a\n2,b\n", "y");
  const std::string other = (dir_ / "same-id.json").string();
  ASSERT_TRUE(Keystore::InitWithId(other, Passphrase(), {2, 19ull << 20}, keystore_->id()).ok());
  bool replaced = false;
  o.progress = [&](uint64_t, uint64_t) {
    if (!replaced) fs::rename(other, keystore_path_);
    replaced = true;
  };
  auto r = SealCsv(o, *keystore_);
  ASSERT_FALSE(r.ok()) << "a key was added under a KEK the keystore file no longer has";
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition) << r.status().ToString();
  EXPECT_FALSE(fs::exists(o.out_path)) << "a sealed file without its key was left";
  auto reopened = crypto::Keystore::Unlock(keystore_path_, Passphrase());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE(reopened->entries().empty());
}

TEST_F(SealedDatasetTest, FailedSealLeavesNoKeyInKeystore) {
  // Pass one succeeds; the output directory does not exist, so nothing can be written.
  SealOptions o = Options("f,y\n1,a\n2,b\n", "y");
  o.out_path = (dir_ / "missing-dir" / "x.sealed").string();
  EXPECT_FALSE(SealCsv(o, *keystore_).ok());
  auto reopened = crypto::Keystore::Unlock(keystore_path_, Passphrase());
  ASSERT_TRUE(reopened.ok());
  EXPECT_TRUE(reopened->entries().empty());
}

}  // namespace
}  // namespace enclave::dataset
