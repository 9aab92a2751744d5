// Schema v2 (docs/formats/sealed-dataset.md): missing values, categorical columns and
// regression labels, sealed from CSV, checked by every reader, and v1 left as it was.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/csv.h"
#include "enclave/dataset/sealed_dataset.h"
#include "seal_fixture.h"
#include "test_files.h"

namespace enclave::dataset {
namespace {

namespace fs = std::filesystem;
using crypto::Keystore;
using crypto::SecretBytes;

using testing::Passphrase;

float Bits(uint32_t b) { return std::bit_cast<float>(b); }

// --- the schema on the wire ----------------------------------------------------------

DatasetSchema V2Schema() {
  DatasetSchema s;
  s.columns = {{"age", ColumnKind::kNumeric, true, {}},
               {"colour", ColumnKind::kCategorical, false, {"blue", "red"}},
               {"y", ColumnKind::kLabel, false, {}}};
  s.classes = {"no", "yes"};
  return s;
}

std::vector<uint8_t> Bytes(std::initializer_list<int> b) { return std::vector<uint8_t>(b.begin(), b.end()); }

void Append(std::vector<uint8_t>* v, std::string_view s) { v->insert(v->end(), s.begin(), s.end()); }

// The v2 layout, written out by hand from the format document.
std::vector<uint8_t> V2Bytes() {
  std::vector<uint8_t> b;
  Append(&b, "ESCH");
  auto more = [&](std::initializer_list<int> x) { b.insert(b.end(), x.begin(), x.end()); };
  more({2, 0, /*task*/ 0, /*columns*/ 3, 0, 0, 0});
  more({0, 1, 3, 0});  // numeric, missing allowed, "age"
  Append(&b, "age");
  more({3, 0, 6, 0});  // categorical, "colour", 2 categories
  Append(&b, "colour");
  more({2, 0, 0, 0, 4, 0});
  Append(&b, "blue");
  more({3, 0});
  Append(&b, "red");
  more({2, 0, 1, 0});  // label, "y"
  Append(&b, "y");
  more({2, 0, 0, 0, 2, 0});
  Append(&b, "no");
  more({3, 0});
  Append(&b, "yes");
  return b;
}

TEST(SchemaV2, EncodesAsTheDocumentSays) {
  EXPECT_EQ(EncodeSchema(V2Schema()), V2Bytes());
  auto s = DecodeSchema(V2Bytes());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->columns[0].missing_allowed, true);
  EXPECT_EQ(s->columns[1].categories, (std::vector<std::string>{"blue", "red"}));
  EXPECT_EQ(s->classes, (std::vector<std::string>{"no", "yes"}));
}

TEST(SchemaV2, RegressionHasNoClassList) {
  DatasetSchema s;
  s.task = Task::kRegression;
  s.columns = {{"x", ColumnKind::kNumeric, false, {}}, {"price", ColumnKind::kLabel, false, {}}};
  std::vector<uint8_t> want;
  Append(&want, "ESCH");
  for (int b : std::initializer_list<int>{2, 0, 1, 2, 0, 0, 0, 0, 0, 1, 0, 'x', 2, 0, 5, 0}) want.push_back(static_cast<uint8_t>(b));
  Append(&want, "price");
  EXPECT_EQ(EncodeSchema(s), want);
  auto d = DecodeSchema(want);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->task, Task::kRegression);
  EXPECT_TRUE(d->classes.empty());
}

// What sealed today needs nothing of v2, and encodes exactly as before: the worked
// example's metadata (sealed-dataset.md, header dump 0x0081 .. 0x00af).
TEST(SchemaV2, V1SchemasKeepTheirBytes) {
  DatasetSchema s;
  s.columns = {{"card", ColumnKind::kLabel, false, {}},
               {"age", ColumnKind::kNumeric, false, {}},
               {"income", ColumnKind::kNumeric, false, {}},
               {"owner", ColumnKind::kYesNo, false, {}}};
  s.classes = {"no", "yes"};
  const std::vector<uint8_t> want = Bytes({4,   0,   0,   0,   2,   4,   0,   'c', 'a', 'r', 'd', 0,   3,   0,   'a', 'g',
                                           'e', 0,   6,   0,   'i', 'n', 'c', 'o', 'm', 'e', 1,   5,   0,   'o', 'w', 'n',
                                           'e', 'r', 2,   0,   0,   0,   2,   0,   'n', 'o', 3,   0,   'y', 'e', 's'});
  EXPECT_FALSE(s.NeedsV2());
  EXPECT_EQ(EncodeSchema(s), want);
  EXPECT_TRUE(DecodeSchema(want).ok());
}

Code DecodeCode(const std::vector<uint8_t>& b) { return DecodeSchema(b).status().code(); }

TEST(SchemaV2, MalformedBytesAreRefused) {
  const std::vector<uint8_t> good = V2Bytes();
  const size_t version = 4, task = 6, age_flags = 12, y_flags = 44;
  auto with = [&](size_t at, uint8_t v) {
    std::vector<uint8_t> b = good;
    b[at] = v;
    return b;
  };
  ASSERT_EQ(good[age_flags], 1);
  ASSERT_EQ(good[y_flags], 0);
  ASSERT_EQ(good[y_flags - 1], 2);  // the label's kind
  EXPECT_EQ(DecodeCode(with(version, 3)), Code::kUnsupported);    // a later schema version
  EXPECT_EQ(DecodeCode(with(version, 1)), Code::kUnsupported);    // v1 has no magic
  EXPECT_EQ(DecodeCode(with(task, 2)), Code::kUnsupported);       // unknown task
  EXPECT_EQ(DecodeCode(with(age_flags, 3)), Code::kUnsupported);  // unknown flag bit
  EXPECT_EQ(DecodeCode(with(age_flags, 0)), Code::kOk);           // still v2: a categorical column
  EXPECT_EQ(DecodeCode(with(y_flags, 1)), Code::kInvalidInput);   // the label may not be missing
  EXPECT_EQ(DecodeCode(with(y_flags - 1, 4)), Code::kUnsupported);  // unknown column kind
  std::vector<uint8_t> trailing = good;
  trailing.push_back(0);
  EXPECT_EQ(DecodeCode(trailing), Code::kInvalidInput);
  for (size_t cut = 0; cut < good.size(); ++cut) {
    EXPECT_EQ(DecodeCode(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(cut))),
              Code::kInvalidInput)
        << cut;
  }
}

// EncodeSchema does not validate, so it writes the broken schemas a reader must refuse.
TEST(SchemaV2, BrokenSchemasAreRefused) {
  auto refused = [](const DatasetSchema& s) { return DecodeCode(EncodeSchema(s)) == Code::kInvalidInput; };
  DatasetSchema s = V2Schema();
  s.columns[1].categories = {"red", "blue"};
  EXPECT_TRUE(refused(s)) << "categories not in byte order";
  s.columns[1].categories = {"red", "red"};
  EXPECT_TRUE(refused(s)) << "duplicate category";
  s.columns[1].categories = {"", "red"};
  EXPECT_TRUE(refused(s)) << "empty category";
  s.columns[1].categories = {};
  EXPECT_TRUE(refused(s)) << "no categories";
  s.columns[1].categories = {std::string(1025, 'a')};
  EXPECT_TRUE(refused(s)) << "category name of 1025 bytes";
  s.columns[1].categories = {std::string(1024, 'a')};
  EXPECT_FALSE(refused(s)) << "category name of 1024 bytes";
  s = V2Schema();
  s.columns[2].missing_allowed = true;
  EXPECT_TRUE(refused(s)) << "label allowing missing values";
  s = V2Schema();
  s.classes = {"no"};
  EXPECT_TRUE(refused(s)) << "one class";
  // A v2 schema that needs nothing of v2: its one encoding is v1, so v2 bytes are refused.
  s = V2Schema();
  s.columns[0].missing_allowed = false;
  s.columns[1] = {"colour", ColumnKind::kNumeric, false, {}};
  ASSERT_FALSE(s.NeedsV2());
  std::vector<uint8_t> v2 = V2Bytes();
  std::vector<uint8_t> plain;
  Append(&plain, "ESCH");
  for (int b : std::initializer_list<int>{2, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 'x', 2, 0, 1, 0, 'y', 2, 0, 0, 0, 1, 0, 'a', 1, 0, 'b'}) {
    plain.push_back(static_cast<uint8_t>(b));
  }
  EXPECT_EQ(DecodeCode(plain), Code::kInvalidInput);
  plain[12] = 1;  // x allows missing values: now it needs v2
  EXPECT_EQ(DecodeCode(plain), Code::kOk);
}

// "ESCH" read as a v1 column count is 0x48435345, far above 2^20: never a v1 schema.
TEST(SchemaV2, MagicIsNoV1ColumnCount) {
  uint32_t n = 0;
  std::memcpy(&n, "ESCH", 4);
  EXPECT_EQ(n, 0x48435345u);
  EXPECT_GT(n, kMaxColumns);
}

// --- records -------------------------------------------------------------------------

TEST(CheckRecordV2, MissingOnlyWhereAllowedAndOnlyCanonical) {
  const DatasetSchema s = V2Schema();  // age (missing allowed), colour (2 categories), y
  auto check = [&](float age, float colour, float y) {
    const float rec[3] = {age, colour, y};
    return CheckRecord(s, rec, 7);
  };
  EXPECT_TRUE(check(37.5f, 1.0f, 0.0f).ok());
  EXPECT_TRUE(check(MissingValue(), 0.0f, 1.0f).ok());
  EXPECT_TRUE(IsMissing(Bits(0x7fc00000)));
  EXPECT_FALSE(IsMissing(Bits(0x7fc00001)));
  EXPECT_FALSE(IsMissing(Bits(0xffc00000)));
  for (uint32_t nan : {0x7fc00001u, 0xffc00000u, 0x7f800001u, 0x7fffffffu}) {
    Status st = check(Bits(nan), 0.0f, 0.0f);
    EXPECT_EQ(st.code(), Code::kInvalidInput) << std::hex << nan;
    EXPECT_NE(st.message().find("record 7: invalid value in column 'age'"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(check(std::numeric_limits<float>::infinity(), 0.0f, 0.0f).ok());
  // colour does not allow missing values; its index must be 0 or 1.
  EXPECT_NE(check(1.0f, MissingValue(), 0.0f).message().find("does not allow"), std::string::npos);
  EXPECT_FALSE(check(1.0f, 2.0f, 0.0f).ok());   // out of range
  EXPECT_FALSE(check(1.0f, -1.0f, 0.0f).ok());  // negative
  EXPECT_FALSE(check(1.0f, 0.5f, 0.0f).ok());   // fractional
  EXPECT_FALSE(check(1.0f, 0.0f, MissingValue()).ok());  // the label is never missing
}

TEST(CheckRecordV2, RegressionLabelsAreFiniteNumbers) {
  DatasetSchema s;
  s.task = Task::kRegression;
  s.columns = {{"x", ColumnKind::kNumeric, false, {}}, {"price", ColumnKind::kLabel, false, {}}};
  const float ok[2] = {1.0f, 123456.75f}, neg[2] = {1.0f, -0.25f};
  EXPECT_TRUE(CheckRecord(s, ok, 0).ok());
  EXPECT_TRUE(CheckRecord(s, neg, 0).ok());
  const float inf[2] = {1.0f, std::numeric_limits<float>::infinity()}, nan[2] = {1.0f, MissingValue()};
  EXPECT_FALSE(CheckRecord(s, inf, 0).ok());
  EXPECT_FALSE(CheckRecord(s, nan, 0).ok());
}

// --- sealing CSV ---------------------------------------------------------------------

class TabularV2Test : public testing::SealFixture {
 protected:
  SealOptions Options(const std::string& csv_text, const std::string& label) {
    SealOptions o = SealFixture::Options(csv_text, label);
    o.overwrite = true;
    return o;
  }

  // Seals, verifies, and returns the records (features then the label).
  std::vector<float> SealRecords(const SealOptions& o, DatasetSchema* schema = nullptr) {
    auto info = SealCsv(o, *keystore_);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (!info.ok()) return {};
    EXPECT_TRUE(VerifySealed(o.out_path, *keystore_).ok());
    if (schema) *schema = info->schema;
    return Records(o.out_path);
  }

  std::string Opened(const SealOptions& o) {
    const std::string out = (dir_ / "opened.csv").string();
    fs::remove(out);
    Status st = OpenSealedToCsv(o.out_path, *keystore_, out, false);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return testing::ReadFile(out);
  }

  // Expects the seal to fail with invalid input naming `where`: no file, no temporary,
  // no key.
  void ExpectRejected(SealOptions o, const std::string& where) {
    fs::remove(o.out_path);
    auto r = SealCsv(o, *keystore_);
    ASSERT_FALSE(r.ok()) << "sealing should have failed: " << where;
    EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
    EXPECT_NE(r.status().message().find(where), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "not one line";
    EXPECT_FALSE(fs::exists(o.out_path));
    for (auto& e : fs::directory_iterator(dir_)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "temporary left: " << e.path();
    }
    auto reopened = Keystore::Unlock(keystore_path_, Passphrase());
    ASSERT_TRUE(reopened.ok());
    EXPECT_EQ(reopened->entries().size(), keystore_->entries().size()) << "a failed seal added a key";
  }

  const Column& ColumnNamed(const DatasetSchema& s, const std::string& name) {
    for (const Column& c : s.columns) {
      if (c.name == name) return c;
    }
    ADD_FAILURE() << "no column " << name;
    return s.columns[0];
  }
};

TEST_F(TabularV2Test, DefaultMissingTokensAnyCase) {
  // Every default token, in several cases and padded; the label column is y.
  const std::string csv = "x,y\n1,a\n,b\nNA,a\nna,b\nNaN,a\nnan,b\nNULL,a\nnull,b\n \tNa ,a\n\"\",b\n";
  DatasetSchema schema;
  std::vector<float> rec = SealRecords(Options(csv, "y"), &schema);
  ASSERT_EQ(rec.size(), 20u);
  EXPECT_TRUE(schema.columns[0].missing_allowed);
  EXPECT_TRUE(schema.NeedsV2());
  EXPECT_EQ(rec[0], 1.0f);
  for (size_t r = 1; r < 10; ++r) EXPECT_EQ(std::bit_cast<uint32_t>(rec[2 * r]), 0x7fc00000u) << "row " << r;
  EXPECT_EQ(Opened(Options(csv, "y")), "x,y\n1,a\n,b\n,a\n,b\n,a\n,b\n,a\n,b\n,a\n,b\n");
}

TEST_F(TabularV2Test, CustomMissingTokens) {
  SealOptions o = Options("x,g,y\n1,yes,a\n-999,?,b\n3,no,a\n", "y");
  o.cells.missing = {"-999", "?"};
  DatasetSchema schema;
  std::vector<float> rec = SealRecords(o, &schema);
  ASSERT_EQ(rec.size(), 9u);
  EXPECT_EQ(ColumnNamed(schema, "g").kind, ColumnKind::kYesNo);
  EXPECT_TRUE(ColumnNamed(schema, "g").missing_allowed);
  EXPECT_TRUE(IsMissing(rec[3]));
  EXPECT_TRUE(IsMissing(rec[4]));
  EXPECT_EQ(Opened(o), "x,g,y\n1,yes,a\n,,b\n3,no,a\n");
  // Tokens match the trimmed cell exactly: case matters for the owner's tokens.
  o = Options("x,y\n1,a\nn/a,b\nN/A,a\n", "y");
  o.cells.missing = {"n/a"};
  rec = SealRecords(o, &schema);
  EXPECT_EQ(ColumnNamed(schema, "x").kind, ColumnKind::kCategorical);  // "N/A" is text
  o.cells.missing = {" n/a"};
  ExpectRejected(o, "--missing ' n/a'");
}

TEST_F(TabularV2Test, NoDefaultMissingMakesNaACategoryAndAnEmptyCellAnError) {
  SealOptions o = Options("x,y\n1,a\nNA,b\n2,a\n", "y");
  o.cells.default_missing = false;
  DatasetSchema schema;
  std::vector<float> rec = SealRecords(o, &schema);
  const Column& x = ColumnNamed(schema, "x");
  EXPECT_EQ(x.kind, ColumnKind::kCategorical);
  EXPECT_FALSE(x.missing_allowed);
  EXPECT_EQ(x.categories, (std::vector<std::string>{"1", "2", "NA"}));
  EXPECT_EQ(rec, (std::vector<float>{0, 0, 2, 1, 1, 0}));
  ExpectRejected([&] {
    SealOptions e = Options("x,y\n1,a\n,b\n", "y");
    e.cells.default_missing = false;
    return e;
  }(), "in.csv:3: column 'x': empty cell");
  // With the defaults off, an owner's token still works, NaN is then no number.
  o = Options("x,y\n1,a\n?,b\nNaN,a\n", "y");
  o.cells.default_missing = false;
  o.cells.missing = {"?"};
  ExpectRejected(o, "in.csv:4: column 'x': not a valid float32 number");
}

TEST_F(TabularV2Test, CategoricalByFlagAndInferredInByteOrder) {
  SealOptions o = Options("zip,colour,size,y\n10,red,1,a\n9,blue,2,b\n100,Green,1,a\n10,red,2,b\n", "y");
  o.cells.categorical = {"zip"};
  DatasetSchema schema;
  std::vector<float> rec = SealRecords(o, &schema);
  EXPECT_EQ(ColumnNamed(schema, "zip").categories, (std::vector<std::string>{"10", "100", "9"}));
  EXPECT_EQ(ColumnNamed(schema, "colour").kind, ColumnKind::kCategorical);
  EXPECT_EQ(ColumnNamed(schema, "colour").categories, (std::vector<std::string>{"Green", "blue", "red"}));
  EXPECT_EQ(ColumnNamed(schema, "size").kind, ColumnKind::kNumeric);
  EXPECT_EQ(rec, (std::vector<float>{0, 2, 1, 0, 2, 1, 2, 1, 1, 0, 1, 0, 0, 2, 2, 1}));
  EXPECT_EQ(Opened(o), testing::ReadFile(o.csv_path));
  // Names with a comma or a quote come back quoted.
  o = Options("c,y\n\"a,b\",x\n\"say \"\"hi\"\"\",z\n", "y");
  SealRecords(o, &schema);
  EXPECT_EQ(Opened(o), "c,y\n\"a,b\",x\n\"say \"\"hi\"\"\",z\n");
}

TEST_F(TabularV2Test, KindsFromAllCellsNotTheFirstRow) {
  // yes/no then something else: categorical now (v1 refused it); a missing first cell.
  SealOptions o = Options("f,g,h,y\nyes,,1,a\n2,no,NA,b\n", "y");
  DatasetSchema schema;
  SealRecords(o, &schema);
  EXPECT_EQ(ColumnNamed(schema, "f").categories, (std::vector<std::string>{"2", "yes"}));
  EXPECT_EQ(ColumnNamed(schema, "g").kind, ColumnKind::kYesNo);
  EXPECT_EQ(ColumnNamed(schema, "h").kind, ColumnKind::kNumeric);
  // A column with nothing but missing cells is numeric, allowing missing values.
  o = Options("f,y\nNA,a\n,b\n", "y");
  SealRecords(o, &schema);
  EXPECT_EQ(ColumnNamed(schema, "f").kind, ColumnKind::kNumeric);
  EXPECT_TRUE(ColumnNamed(schema, "f").missing_allowed);
}

TEST_F(TabularV2Test, NumberLikeTextIsAnErrorNotACategory) {
  for (const char* cell : {"1e39", "1e-50", "+-1", "++1", "inf", "-Infinity"}) {
    ExpectRejected(Options(std::string("x,y\n1,a\n") + cell + ",b\n", "y"),
                   "in.csv:3: column 'x': not a valid float32 number");
  }
  SealOptions o = Options("x,y\n1,a\ninf,b\n", "y");
  o.cells.categorical = {"x"};  // named categorical: any text is a category
  DatasetSchema schema;
  SealRecords(o, &schema);
  EXPECT_EQ(ColumnNamed(schema, "x").categories, (std::vector<std::string>{"1", "inf"}));
}

TEST_F(TabularV2Test, CategoricalFlagErrors) {
  SealOptions o = Options("x,y\n1,a\n2,b\n", "y");
  o.cells.categorical = {"nope"};
  ExpectRejected(o, "--categorical column 'nope' not in header");
  o.cells.categorical = {"y"};
  ExpectRejected(o, "--categorical 'y' is the label column");
  o = Options("x,z,y\nNA,1,a\n,2,b\n", "y");
  o.cells.categorical = {"x"};
  ExpectRejected(o, "--categorical column 'x' has no value that is not missing");
  o = Options("x,y\n" + std::string(1025, 'q') + ",a\n2,b\n", "y");
  ExpectRejected(o, "in.csv:2: column 'x': category name longer than 1024 bytes");
}

TEST_F(TabularV2Test, TooManyCategories) {
  std::string csv = "c,y\n";
  for (int i = 0; i <= 65536; ++i) csv += "k" + std::to_string(i) + "," + (i % 2 ? "a" : "b") + "\n";
  ExpectRejected(Options(csv, "y"), "in.csv:65538: column 'c': more than 65536 categories");
  csv.resize(csv.rfind("k65536"));  // exactly 65 536: fine
  DatasetSchema schema;
  SealOptions o = Options(csv, "y");
  auto info = SealCsv(o, *keystore_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->schema.columns[0].categories.size(), 65536u);
}

TEST_F(TabularV2Test, RegressionStoresTheValue) {
  SealOptions o = Options("x,price\n1,10.5\n2,-3\n3,1e3\n4,0.1\n", "price");
  o.label.task = Task::kRegression;
  DatasetSchema schema;
  std::vector<float> rec = SealRecords(o, &schema);
  EXPECT_EQ(schema.task, Task::kRegression);
  EXPECT_TRUE(schema.classes.empty());
  EXPECT_EQ(rec, (std::vector<float>{1, 10.5f, 2, -3, 3, 1000, 4, 0.1f}));
  EXPECT_EQ(Opened(o), "x,price\n1,10.5\n2,-3\n3,1000\n4,0.1\n");
  o = Options("x,price\n1,10.5\n2,cheap\n", "price");
  o.label.task = Task::kRegression;
  ExpectRejected(o, "in.csv:3: column 'price': label is not a number (--task regression)");
  o = Options("x,price\n1,10.5\n2,NA\n", "price");
  o.label.task = Task::kRegression;
  ExpectRejected(o, "in.csv:3: column 'price': missing label");
  o.label.positive = "1";
  ExpectRejected(o, "--task regression takes no --positive or --classes");
}

TEST_F(TabularV2Test, LabelsMayNotBeMissing) {
  for (const char* cell : {"", "NA", "null", "NaN"}) {
    ExpectRejected(Options(std::string("x,y\n1,a\n2,") + cell + "\n", "y"), "in.csv:3: column 'y': missing label");
  }
  SealOptions o = Options("x,y\n1,a\n2,?\n", "y");
  o.cells.missing = {"?"};
  ExpectRejected(o, "in.csv:3: column 'y': missing label");
  o = Options("x,y\n1,a\n2,NA\n", "y");
  o.cells.default_missing = false;  // NA is then a class
  DatasetSchema schema;
  SealRecords(o, &schema);
  EXPECT_EQ(schema.classes, (std::vector<std::string>{"NA", "a"}));
  o = Options("x,y\n1,a\n2,\n", "y");
  o.cells.default_missing = false;
  ExpectRejected(o, "in.csv:3: column 'y': empty label");
}

std::string NumericLabels(int distinct, const std::string& extra = "") {
  std::string csv = "x,y\n";
  for (int i = 0; i < distinct; ++i) csv += "1," + std::to_string(i) + "\n";
  return csv + extra;
}

// The looks-continuous rule: every label value a number, and more than 100 distinct
// values or any value that is not an integer.
TEST_F(TabularV2Test, ContinuousLookingLabelsNeedTaskRegression) {
  DatasetSchema schema;
  SealRecords(Options(NumericLabels(100), "y"), &schema);  // 100 distinct integers: classes
  EXPECT_EQ(schema.classes.size(), 100u);
  ExpectRejected(Options(NumericLabels(101), "y"),
                 "in.csv: label column 'y' looks continuous (101 distinct numbers, more than 100); seal it with "
                 "--task regression");
  ExpectRejected(Options("x,y\n1,0\n2,1\n3,0.5\n", "y"),
                 "looks continuous (the non-integer value '0.5' on line 4); seal it with --task regression");
  ExpectRejected(Options(NumericLabels(1001), "y"), "looks continuous (more than 1000 distinct numbers)");
  // Integers however written, and non-numeric values, are classes.
  SealRecords(Options("x,y\n1,1.0\n2,2\n3,1e1\n", "y"), &schema);
  EXPECT_EQ(schema.classes, (std::vector<std::string>{"1.0", "2", "1e1"}));
  SealRecords(Options(NumericLabels(150, "1,x\n"), "y"), &schema);
  EXPECT_EQ(schema.classes.size(), 151u);
  // A class list, or regression, takes such labels.
  SealOptions o = Options("x,y\n1,0\n2,1\n3,0.5\n", "y");
  o.label.classes = {"0", "0.5", "1"};
  SealRecords(o, &schema);
  o.label.classes.clear();
  o.label.task = Task::kRegression;
  SealRecords(o, &schema);
  EXPECT_EQ(schema.task, Task::kRegression);
}

// Today's data needs nothing of v2: the seal writes a v1 schema, byte for byte the old one.
TEST_F(TabularV2Test, PlainDataStillSealsAsV1) {
  SealOptions o;
  o.csv_path = std::string(ENCLAVE_SAMPLE_DATA) + "/credit_card_applications.csv";
  o.out_path = (dir_ / "cc.sealed").string();
  o.label = {"card", "yes", {}};
  o.dataset_id = "cc";
  auto info = SealCsv(o, *keystore_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const std::vector<uint8_t>& meta = info->header.params.metadata;
  ASSERT_GE(meta.size(), 4u);
  EXPECT_EQ(std::vector<uint8_t>(meta.begin(), meta.begin() + 4), Bytes({12, 0, 0, 0}));  // v1: column count
  EXPECT_FALSE(info->schema.NeedsV2());
}

// The real financial sample: a categorical column by flag, and its continuous income as a
// regression label (refused without --task regression); opened back to the same CSV.
TEST_F(TabularV2Test, RealFinancialSampleAsCategoricalAndRegression) {
  SealOptions o;
  o.csv_path = std::string(ENCLAVE_SAMPLE_DATA) + "/credit_card_applications.csv";
  o.out_path = (dir_ / "cc.sealed").string();
  o.dataset_id = "cc";
  o.label.column = "income";
  ExpectRejected(o, "label column 'income' looks continuous");
  o.label.task = Task::kRegression;
  o.cells.categorical = {"dependents"};
  DatasetSchema schema;
  std::vector<float> rec = SealRecords(o, &schema);
  EXPECT_EQ(rec.size(), 1319u * 12);
  EXPECT_EQ(ColumnNamed(schema, "dependents").categories,
            (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6"}));
  EXPECT_EQ(ColumnNamed(schema, "card").kind, ColumnKind::kYesNo);
  EXPECT_EQ(Opened(o), testing::ReadFile(o.csv_path));
}

// The real medical sample with cells knocked out (every 7th row's mean_texture as NA,
// every 11th row's area_error empty): those columns allow missing values, every other
// cell is sealed as before, and open writes the holes back as empty fields.
TEST_F(TabularV2Test, RealMedicalSampleWithMissingCells) {
  const std::string original = testing::ReadFile(std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv");
  std::string holed, expected;
  size_t line = 0, holes = 0;
  for (size_t at = 0; at < original.size();) {
    const size_t end = original.find('\n', at);
    std::vector<std::string> fields;
    for (size_t f = at;;) {
      const size_t comma = original.find(',', f);
      if (comma == std::string::npos || comma > end) {
        fields.push_back(original.substr(f, end - f));
        break;
      }
      fields.push_back(original.substr(f, comma - f));
      f = comma + 1;
    }
    std::vector<std::string> want = fields;
    if (line > 0 && line % 7 == 0) fields[1] = "NA", want[1] = "", ++holes;
    if (line > 0 && line % 11 == 0) fields[13] = "", want[13] = "", ++holes;
    for (size_t i = 0; i < fields.size(); ++i) {
      holed += (i ? "," : "") + fields[i];
      expected += (i ? "," : "") + want[i];
    }
    holed += "\n";
    expected += "\n";
    at = end + 1;
    ++line;
  }
  ASSERT_EQ(line, 570u);
  ASSERT_GT(holes, 100u);
  SealOptions o = Options(holed, "diagnosis");
  o.label.positive = "malignant";
  DatasetSchema schema;
  std::vector<float> rec = SealRecords(o, &schema);
  ASSERT_EQ(rec.size(), 569u * 31);
  for (const Column& c : schema.columns) {
    EXPECT_EQ(c.missing_allowed, c.name == "mean_texture" || c.name == "area_error") << c.name;
    EXPECT_EQ(c.kind, c.name == "diagnosis" ? ColumnKind::kLabel : ColumnKind::kNumeric) << c.name;
  }
  EXPECT_TRUE(IsMissing(rec[31 * 6 + 1]));  // data row 7 (line 8): mean_texture
  EXPECT_EQ(Opened(o), expected);
}

// Records that another implementation might seal, authentic but invalid: verify and open
// refuse them with invalid input, and open leaves no output.
class TamperedV2Test : public TabularV2Test {
 protected:
  // Seals `records` under `schema` with a key added to the keystore, as SealCsv would.
  std::string SealRaw(const DatasetSchema& schema, const std::vector<float>& records) {
    const std::string path = (dir_ / "raw.sealed").string();
    auto key = keystore_->NewDataKey("raw", crypto::Suite::kAes256Gcm);
    EXPECT_TRUE(key.ok());
    crypto::SealParams p;
    p.suite = crypto::Suite::kAes256Gcm;
    p.content_type = crypto::ContentType::kTabularDataset;
    p.keystore_id = keystore_->id();
    p.key_id = key->entry.key_id;
    p.object_id = "raw";
    p.chunk_size = schema.record_bytes();
    p.payload_length = records.size() * 4;
    p.metadata = EncodeSchema(schema);
    crypto::MemorySink sink;
    auto w = crypto::SealedFileWriter::Create(p, key->dek, &sink);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE((*w)->Append(ByteSpan(reinterpret_cast<const uint8_t*>(records.data()), records.size() * 4)).ok());
    EXPECT_TRUE((*w)->Finish().ok());
    EXPECT_TRUE(keystore_->AddDataKey(*key).ok());
    testing::WriteFile(path, std::string(sink.data.begin(), sink.data.end()));
    return path;
  }

  void ExpectInvalid(const DatasetSchema& schema, const std::vector<float>& records, const std::string& what) {
    const std::string path = SealRaw(schema, records);
    auto v = VerifySealed(path, *keystore_);
    EXPECT_EQ(v.status().code(), Code::kInvalidInput) << what << ": " << v.status().ToString();
    EXPECT_NE(v.status().message().find(what), std::string::npos) << v.status().message();
    const std::string out = (dir_ / "out.csv").string();
    Status o = OpenSealedToCsv(path, *keystore_, out, true);
    EXPECT_EQ(o.code(), Code::kInvalidInput) << o.ToString();
    EXPECT_FALSE(fs::exists(out));
  }
};

TEST_F(TamperedV2Test, InvalidRecordsAreRefusedByVerifyAndOpen) {
  const DatasetSchema s = V2Schema();  // age (missing allowed), colour (blue, red), y (no, yes)
  const std::string good_path = SealRaw(s, {MissingValue(), 1, 0, 2.5f, 0, 1});
  ASSERT_TRUE(VerifySealed(good_path, *keystore_).ok());
  const std::string out = (dir_ / "good.csv").string();
  ASSERT_TRUE(OpenSealedToCsv(good_path, *keystore_, out, true).ok());
  EXPECT_EQ(testing::ReadFile(out), "age,colour,y\n,red,no\n2.5,blue,yes\n");

  ExpectInvalid(s, {Bits(0x7fc00001), 1, 0}, "record 0: invalid value in column 'age' (a NaN other than");
  ExpectInvalid(s, {Bits(0xffc00000), 1, 0}, "column 'age'");
  ExpectInvalid(s, {1, MissingValue(), 0}, "column 'colour' (a missing value in a column that does not allow");
  ExpectInvalid(s, {1, 2, 0}, "column 'colour' (not a category index)");
  ExpectInvalid(s, {1, 0.5f, 0}, "column 'colour' (not a category index)");
  ExpectInvalid(s, {1, 1, MissingValue()}, "record 0: label is not a class index");
  DatasetSchema reg;
  reg.task = Task::kRegression;
  reg.columns = {{"x", ColumnKind::kNumeric, false, {}}, {"price", ColumnKind::kLabel, false, {}}};
  ExpectInvalid(reg, {1, std::numeric_limits<float>::infinity()}, "regression label is not finite");
  ExpectInvalid(reg, {MissingValue(), 2}, "column 'x'");
}

}  // namespace
}  // namespace enclave::dataset
