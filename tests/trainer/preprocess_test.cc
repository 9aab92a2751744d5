// Preprocessing (issue 18 §3): the plan from a schema, fills fitted on the training rows
// only, the expanded row (imputed values, indicators, one-hot with an unseen bucket), the
// model file's version 2 that stores it, and training end to end on a clinical table with
// a fifth of its cells deleted and a categorical column, predicted by the model file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "enclave/crypto/hash.h"
#include "enclave/dataset/schema.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/metrics.h"
#include "enclave/trainer/model_file.h"
#include "enclave/trainer/predict.h"
#include "enclave/trainer/preprocess.h"
#include "enclave/trainer/rng.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {
namespace {

namespace fs = std::filesystem;
using dataset::Column;
using dataset::ColumnKind;

const float M = dataset::MissingValue();

LockedArray<float> Zeros(size_t n) {
  auto a = LockedArray<float>::Create(n);
  EXPECT_TRUE(a.ok());
  return std::move(a).value();
}

// age (numeric, may be missing), smoker (yes/no), ward (categorical A/B/C, may be missing), label.
dataset::DatasetSchema ClinicSchema() {
  dataset::DatasetSchema s;
  s.columns = {Column{"age", ColumnKind::kNumeric, true, {}}, Column{"smoker", ColumnKind::kYesNo, false, {}},
               Column{"ward", ColumnKind::kCategorical, true, {"A", "B", "C"}}, Column{"y", ColumnKind::kLabel, false, {}}};
  s.classes = {"no", "yes"};
  return s;
}

TEST(Preprocess, PlanDependsOnTheSchemaOnly) {
  const Preprocessing p = PlanPreprocessing(ClinicSchema(), {});
  ASSERT_EQ(p.raw_features(), 3u);
  // age + its indicator, smoker, ward's A B C + unseen + its indicator.
  EXPECT_EQ(p.inputs(), 2u + 1u + 5u);
  EXPECT_FALSE(p.identity());
  EXPECT_TRUE(p.columns[0].indicator);
  EXPECT_FALSE(p.columns[1].indicator);
  EXPECT_EQ(p.columns[2].categories, 3u);
  EXPECT_EQ(PlanPreprocessing(ClinicSchema(), {Impute::kMean, false}).inputs(), 1u + 1u + 4u);
  EXPECT_EQ(PlanPreprocessing(ClinicSchema(), {Impute::kKeepMissing, true}).inputs(), 1u + 1u + 4u);

  dataset::DatasetSchema plain;
  plain.columns = {Column{"a", ColumnKind::kNumeric, false, {}}, Column{"y", ColumnKind::kLabel, false, {}}};
  plain.classes = {"0", "1"};
  EXPECT_TRUE(PlanPreprocessing(plain, {}).identity());
}

TEST(Preprocess, FillsComeFromTheGivenRowsOnly) {
  // 6 rows; rows 4 and 5 play the validation split, with values far away.
  const std::vector<float> x = {
      30, 0, 0,  //
      M,  1, 1,  //
      50, 1, 1,  //
      40, 0, M,  //
      1e6f, 1, 2,  //
      1e6f, 1, 2,
  };
  const uint32_t train[] = {0, 1, 2, 3};
  Preprocessing median = PlanPreprocessing(ClinicSchema(), {Impute::kMedian, true});
  ASSERT_TRUE(FitPreprocessing(&median, x.data(), 3, train, 4).ok());
  EXPECT_EQ(median.columns[0].fill, 40.0f);  // median of 30, 50, 40
  EXPECT_EQ(median.columns[1].fill, 0.5f);   // median of 0, 1, 1, 0: the mean of the middle two
  EXPECT_EQ(median.columns[2].fill, 1.0f);   // most frequent category: B (index 1), twice

  Preprocessing mean = PlanPreprocessing(ClinicSchema(), {Impute::kMean, true});
  ASSERT_TRUE(FitPreprocessing(&mean, x.data(), 3, train, 4).ok());
  EXPECT_EQ(mean.columns[0].fill, 40.0f);
  EXPECT_EQ(mean.columns[1].fill, 0.5f);

  // Ties go to the smallest value; a column with nothing present is filled with 0.
  const std::vector<float> y = {3, 1, M, 2, 0, M, 2, 1, M, 3, 0, M};
  const uint32_t all[] = {0, 1, 2, 3};
  Preprocessing frequent = PlanPreprocessing(ClinicSchema(), {Impute::kMostFrequent, true});
  ASSERT_TRUE(FitPreprocessing(&frequent, y.data(), 3, all, 4).ok());
  EXPECT_EQ(frequent.columns[0].fill, 2.0f);  // 3, 2, 2, 3: 2 and 3 twice each
  EXPECT_EQ(frequent.columns[1].fill, 0.0f);  // 1, 0, 1, 0
  EXPECT_EQ(frequent.columns[2].fill, 0.0f);  // all missing

  const uint32_t even_rows[] = {0, 2, 3};  // 30, 50, 40 -> 40; odd count
  Preprocessing odd = PlanPreprocessing(ClinicSchema(), {});
  ASSERT_TRUE(FitPreprocessing(&odd, x.data(), 3, even_rows, 3).ok());
  EXPECT_EQ(odd.columns[0].fill, 40.0f);
}

TEST(Preprocess, ExpandedRows) {
  Preprocessing p = PlanPreprocessing(ClinicSchema(), {});
  p.columns[0].fill = 42.5f;
  p.columns[2].fill = 2.0f;
  const std::vector<float> x = {
      30, 1, 0,  // present everywhere
      M,  0, M,  // missing age and ward
      31, 0, 3,  // ward index 3 = k: a category the dictionary lacks
  };
  std::vector<float> out(3 * p.inputs(), -1.0f);
  ASSERT_TRUE(ApplyPreprocessing(p, x.data(), 3, out.data()).ok());
  const std::vector<float> want = {
      30,   0, 1, 1, 0, 0, 0, 0,  //
      42.5, 1, 0, 0, 0, 1, 0, 1,  //
      31,   0, 0, 0, 0, 0, 1, 0,
  };
  EXPECT_EQ(out, want);

  const std::vector<float> bad = {30, 1, 4};  // beyond the unseen index
  Status st = ApplyPreprocessing(p, bad.data(), 1, out.data());
  EXPECT_EQ(st.code(), Code::kInvalidInput);
  EXPECT_NE(st.message().find("row 0, feature 2: not a category index"), std::string::npos) << st.message();
  const std::vector<float> half = {30, 1, 0.5f};
  EXPECT_FALSE(ApplyPreprocessing(p, half.data(), 1, out.data()).ok());

  // Trees keep missing values missing (every one-hot column of a missing category too).
  Preprocessing keep = PlanPreprocessing(ClinicSchema(), {Impute::kKeepMissing, true});
  std::vector<float> kept(keep.inputs());
  ASSERT_TRUE(ApplyPreprocessing(keep, x.data() + 3, 1, kept.data()).ok());
  EXPECT_TRUE(dataset::IsMissing(kept[0]));
  EXPECT_EQ(kept[1], 0.0f);
  for (size_t i = 2; i < 6; ++i) EXPECT_TRUE(dataset::IsMissing(kept[i])) << i;
}

// A model file of version 2: encoded, parsed back to the same plan, re-encoded to the same
// bytes; its checks refuse what cannot be right.
ModelFile ClinicModel() {
  ModelFile m;
  m.schema = ClinicSchema();
  m.preprocessing = PlanPreprocessing(m.schema, {});
  m.preprocessing.columns[0].fill = 42.5f;
  m.preprocessing.columns[2].fill = 2.0f;
  m.shape.inputs = static_cast<uint32_t>(m.preprocessing.inputs());
  m.shape.classes = 2;
  const size_t F = m.shape.inputs, P = m.shape.parameter_count();
  m.mean = Zeros(F);
  m.inv_std = Zeros(F);
  m.params = Zeros(P);
  for (size_t i = 0; i < F; ++i) {
    m.mean[i] = 0.25f * static_cast<float>(i);
    m.inv_std[i] = 1.0f + static_cast<float>(i);
  }
  for (size_t i = 0; i < P; ++i) m.params[i] = 0.1f * static_cast<float>(i) - 0.3f;
  return m;
}

// Rewrites the closing digest after an edit, so that the field checks behind it are reached.
void Redigest(std::vector<uint8_t>* bytes) {
  const size_t body = bytes->size() - kModelDigestBytes;
  const crypto::Digest256 d = crypto::Sha256(ByteSpan(bytes->data(), body));
  std::memcpy(bytes->data() + body, d.data(), d.size());
}

TEST(Preprocess, ModelFileVersion2RoundTrip) {
  const ModelFile m = ClinicModel();
  auto enc = EncodeModelFile(m);
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  const ByteSpan bytes = enc->ExposeSecret();
  EXPECT_EQ(bytes[8], 2);  // version
  auto parsed = ParseModelFile(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->preprocessing.impute, Impute::kMedian);
  ASSERT_EQ(parsed->preprocessing.columns.size(), 3u);
  EXPECT_EQ(parsed->preprocessing.columns[0].fill, 42.5f);
  EXPECT_TRUE(parsed->preprocessing.columns[0].indicator);
  EXPECT_EQ(parsed->preprocessing.columns[2].fill, 2.0f);
  EXPECT_EQ(parsed->shape.inputs, 8u);
  auto again = EncodeModelFile(*parsed);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), again->ExposeSecret().begin(), again->ExposeSecret().end()));
  EXPECT_STREQ(ModelFormatIdFor(m.preprocessing, m.shape), "enclave-train-model/2");

  // The preprocessing section sits right after the schema: fills (3 x f32), indicators (3 x u8).
  const std::vector<uint8_t> schema = dataset::EncodeSchema(m.schema);
  const size_t fills = 24 + 4 + schema.size();
  auto refused = [&](size_t at, uint8_t value, const std::string& want) {
    std::vector<uint8_t> b(bytes.begin(), bytes.end());
    b[at] = value;
    Redigest(&b);
    auto r = ParseModelFile(b);
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().message();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  };
  // ward's fill 2.0f = 0x40000000: 0x40400000 is 3.0, beyond the dictionary.
  refused(fills + 8 + 2, 0x40, "feature 2 ('ward'): fill at offset");
  refused(fills + 12 + 1, 1, "indicator at offset");                // smoker has no missing values
  refused(fills + 12 + 0, 2, "is not 0 or 1");
  {
    std::vector<uint8_t> b(bytes.begin(), bytes.end());
    b[fills + 2] = 0x80;  // age's fill 42.5 (0x422a0000) -> 0x7f800000, +infinity
    b[fills + 3] = 0x7f;
    Redigest(&b);
    auto r = ParseModelFile(b);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("feature 0 ('age'): fill at offset " + std::to_string(fills) + " is not finite"),
              std::string::npos)
        << r.status().message();
  }
  refused(23, 3, "impute 3 at offset 23");                          // trees' keep-missing in a network
  {
    std::vector<uint8_t> b(bytes.begin(), bytes.end());
    b[22] = 2;  // a model family this build does not know (0 networks, 1 trees)
    Redigest(&b);
    EXPECT_EQ(ParseModelFile(b).status().code(), Code::kUnsupported);
  }
}

TEST(Preprocess, ModelFileVersionFollowsTheSchema) {
  // A version 1 file whose schema needs preprocessing, and a version 2 file whose schema needs
  // none, are both malformed: each model has one encoding.
  ModelFile m = ClinicModel();
  auto enc = EncodeModelFile(m);
  ASSERT_TRUE(enc.ok());
  std::vector<uint8_t> v1(enc->ExposeSecret().begin(), enc->ExposeSecret().end());
  v1[8] = 1;
  v1[22] = v1[23] = 0;
  Redigest(&v1);
  auto r = ParseModelFile(v1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("version 1 with a schema that has categorical columns or missing values"),
            std::string::npos)
      << r.status().message();

  dataset::DatasetSchema plain;
  plain.columns = {Column{"a", ColumnKind::kNumeric, false, {}}, Column{"y", ColumnKind::kLabel, false, {}}};
  plain.classes = {"0", "1"};
  ModelFile p;
  p.schema = plain;
  p.preprocessing = PlanPreprocessing(plain, {});
  p.shape.inputs = 1;
  p.mean = Zeros(1);
  p.inv_std = Zeros(1);
  p.inv_std[0] = 1;
  p.params = Zeros(p.shape.parameter_count());
  auto plain_bytes = EncodeModelFile(p);
  ASSERT_TRUE(plain_bytes.ok());
  EXPECT_EQ(plain_bytes->ExposeSecret()[8], 1);  // version 1, as before preprocessing existed
  std::vector<uint8_t> v2(plain_bytes->ExposeSecret().begin(), plain_bytes->ExposeSecret().end());
  v2[8] = 2;
  Redigest(&v2);
  r = ParseModelFile(v2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("version 2 of a classification model with nothing to preprocess"), std::string::npos)
      << r.status().message();
}

// The breast-cancer sample with a fifth of its feature cells deleted (fixed seed) and a
// categorical column derived from a feature (so it carries signal), as a clear CSV.
class ClinicalTable : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enclave-preprocess-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ifstream in(std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv");
    std::string line;
    std::getline(in, line);
    std::ofstream out(dir_ / "train.csv");
    out << line << ",size_band\n";
    Rng rng(2026, 99);
    size_t row = 0;
    while (std::getline(in, line)) {
      std::vector<std::string> cells;
      std::stringstream ss(line);
      for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
      const double area = std::stod(cells[3]);
      const std::string band = area < 450 ? "small" : area < 700 ? "medium" : "large";
      for (size_t i = 0; i + 1 < cells.size(); ++i) {  // the label (last) stays
        if (rng.Below(5) == 0) cells[i] = (row % 2 == 0) ? "" : "NA";
      }
      for (size_t i = 0; i < cells.size(); ++i) out << (i ? "," : "") << cells[i];
      out << "," << (rng.Below(5) == 0 ? "NA" : band) << "\n";
      ++row;
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  DatasetSpec Spec() const {
    DatasetSpec d;
    d.id = "breast-cancer";
    d.path = (dir_ / "train.csv").string();
    d.format = DatasetFormat::kCsv;
    d.label = "diagnosis";
    d.positive = "malignant";
    return d;
  }

  fs::path dir_;
};

TEST_F(ClinicalTable, TrainsWithImputationAndPredictsFromTheModelFile) {
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  auto data = LoadDatasets(*backend, {Spec()}, nullptr);
  ASSERT_TRUE(data.ok()) << data.status().message();
  ASSERT_TRUE(data->schema.NeedsV2());
  JobSpec job;
  job.seed = 3;
  job.epochs = 40;
  job.optimizer.lr = 0.01f;
  job.optimizer.l2 = 0.01f;
  auto split = StratifiedSplit(data->labels, data->classes, 0.2, job.seed);
  ASSERT_TRUE(split.ok());
  auto r = Train(*backend, job, *data, *split);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // 30 features with indicators, and size_band's 3 categories + unseen + indicator.
  EXPECT_EQ(r->shape.inputs, 30u * 2 + 5);
  EXPECT_GT(r->epochs.back().val_accuracy, 0.9);
  EXPECT_GT(r->epochs.back().val_auc, 0.95);

  // The fills are the training rows' statistics, not all rows'.
  const size_t F = data->features;
  Preprocessing all = PlanPreprocessing(data->schema, {});
  std::vector<uint32_t> every(data->rows);
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<uint32_t>(i);
  ASSERT_TRUE(FitPreprocessing(&all, data->x.get().data, F, every.data(), every.size()).ok());
  Preprocessing train_only = PlanPreprocessing(data->schema, {});
  ASSERT_TRUE(FitPreprocessing(&train_only, data->x.get().data, F, split->train.data(), split->train.size()).ok());
  size_t differ = 0;
  for (size_t j = 0; j < F; ++j) {
    EXPECT_EQ(r->preprocessing.columns[j].fill, train_only.columns[j].fill) << j;
    differ += r->preprocessing.columns[j].fill != all.columns[j].fill ? 1 : 0;
  }
  EXPECT_GT(differ, 0u) << "the validation rows would have changed no fill: the check above shows nothing";

  // The model file predicts every row as the trainer's resident model does, bit for bit.
  auto model = MakeModelFile(r->shape, data->schema, r->mean, r->inv_std, r->params, &r->preprocessing);
  ASSERT_TRUE(model.ok());
  auto bytes = EncodeModelFile(*model);
  ASSERT_TRUE(bytes.ok());
  auto parsed = ParseModelFile(bytes->ExposeSecret());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto table = ReadFeatureCsv(Spec().path, parsed->schema, &parsed->preprocessing);
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_EQ(table->rows, data->rows);
  auto from_file = PredictProbabilities(*backend, *parsed, table->x.data(), table->rows);
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  std::vector<float> x(data->x.get().data, data->x.get().data + data->rows * F);
  EXPECT_EQ(std::memcmp(table->x.data(), x.data(), x.size() * sizeof(float)), 0) << "predict reads cells as seal does";
  EXPECT_GT(Accuracy(from_file->data(), table->labels.data(), table->rows, 2), 0.9);

  // A category the model never saw and a missing cell in a column that had none are taken.
  std::ofstream novel(dir_ / "new.csv");
  std::ifstream header(Spec().path);
  std::string head;
  std::getline(header, head);
  novel << head << "\n";
  novel << "17.99,10.38,122.8,1001,0.1184,0.2776,0.3001,0.1471,0.2419,0.07871,1.095,0.9053,8.589,153.4,0.006399,"
           "0.04904,0.05373,0.01587,0.03003,0.006193,25.38,17.33,184.6,2019,0.1622,0.6656,0.7119,0.2654,0.4601,"
           "NaN,malignant,huge\n";
  novel.close();
  auto fresh = ReadFeatureCsv((dir_ / "new.csv").string(), parsed->schema, &parsed->preprocessing);
  ASSERT_TRUE(fresh.ok()) << fresh.status().message();
  EXPECT_EQ(fresh->x[30], 3.0f);  // size_band's dictionary holds 3 categories: "huge" is index 3
  EXPECT_TRUE(dataset::IsMissing(fresh->x[29]));
  auto p = PredictProbabilities(*backend, *parsed, fresh->x.data(), 1);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(std::isfinite((*p)[0]));
  EXPECT_GT((*p)[0], 0.5f);  // the first row of the sample: malignant, large
}

TEST_F(ClinicalTable, CrossValidationFitsEachFoldOnItsOwnTrainingRows) {
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  auto data = LoadDatasets(*backend, {Spec()}, nullptr);
  ASSERT_TRUE(data.ok()) << data.status().message();
  JobSpec job;
  job.seed = 5;
  job.epochs = 15;
  job.optimizer.lr = 0.01f;
  auto cv = CrossValidate(*backend, job, *data, 3);
  ASSERT_TRUE(cv.ok()) << cv.status().message();
  ASSERT_EQ(cv->folds.size(), 3u);
  EXPECT_NE(cv->folds[0].preprocessing.columns[0].fill, cv->folds[1].preprocessing.columns[0].fill);
  EXPECT_GT(cv->mean_accuracy, 0.9);
}

TEST_F(ClinicalTable, AModelWithoutImputationRefusesMissingCells) {
  dataset::DatasetSchema plain;
  plain.columns = {Column{"a", ColumnKind::kNumeric, false, {}}, Column{"y", ColumnKind::kLabel, false, {}}};
  plain.classes = {"0", "1"};
  std::ofstream(dir_ / "p.csv") << "a,y\n1,0\nNA,1\n";
  auto t = ReadFeatureCsv((dir_ / "p.csv").string(), plain, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("p.csv:3: column 'a': missing value (this model was trained on data without "
                                      "missing values and cannot impute)"),
            std::string::npos)
      << t.status().message();
}

}  // namespace
}  // namespace enclave::trainer
