// The trainer's outputs on real files: the plaintext model format (round trip, strict
// reader), predictions of a model that went through the export envelope equal the
// trainer's own evaluation, encrypted checkpoints (interrupt + resume is bit-identical to an
// uninterrupted run; tampered, foreign and truncated checkpoints are refused with their
// codes), and the training-curve SVG's series.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/model_export.h"
#include "enclave/crypto/aead.h"
#include "enclave/kernels/chunk_open.h"
#include "enclave/trainer/checkpoint.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/metrics.h"
#include "enclave/trainer/model_file.h"
#include "enclave/trainer/model_seal.h"
#include "enclave/trainer/plot.h"
#include "enclave/trainer/predict.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {
namespace {

namespace fs = std::filesystem;

const std::string kBreast = std::string(ENCLAVE_SAMPLE_DATA) + "/breast_cancer_wisconsin.csv";
const std::string kCredit = std::string(ENCLAVE_SAMPLE_DATA) + "/credit_card_applications.csv";

bool BitIdentical(const LockedArray<float>& a, const LockedArray<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Outputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enclave-train-out-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ks_ = MakeKeystore("tenant.keystore");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::optional<crypto::Keystore> MakeKeystore(const std::string& name) {
    auto pass = crypto::SecretBytes::CopyFrom({reinterpret_cast<const uint8_t*>("correct horse battery"), 21});
    EXPECT_TRUE(pass.ok());
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(crypto::Keystore::Init(path, *pass, crypto::KdfParams{2, 19ull << 20}).ok());
    auto ks = crypto::Keystore::Unlock(path, *pass);
    EXPECT_TRUE(ks.ok());
    return std::optional<crypto::Keystore>(std::move(ks).value());
  }

  JobSpec Job(const std::string& csv, const std::string& label_lines, const std::string& extra) {
    const std::string text = "seed = 3\noutput_dir = \"out\"\n[[datasets]]\nid = \"d\"\nformat = \"csv\"\npath = \"" +
                             csv + "\"\n" + label_lines + "\n" + extra;
    auto job = ParseJob(text, "test.toml", dir_.string());
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return std::move(job).value();
  }
  JobSpec BreastJob(const std::string& model_and_training) {
    return Job(kBreast, "label = \"diagnosis\"\npositive = \"malignant\"", model_and_training);
  }

  fs::path dir_;
  std::optional<crypto::Keystore> ks_;
};

struct Trained {
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  LoadedData data;
  Split split;
  TrainResult result;
};

Result<Trained> TrainJob(const JobSpec& job) {
  Trained t;
  ASSIGN_OR_RETURN(t.data, LoadDatasets(*t.backend, job.datasets, nullptr));
  ASSIGN_OR_RETURN(t.split, StratifiedSplit(t.data.labels, t.data.classes, job.validation_fraction, job.seed));
  ASSIGN_OR_RETURN(t.result, Train(*t.backend, job, t.data, t.split));
  return t;
}

// The raw (unstandardized) feature rows of `rows`, from the loaded table.
LockedArray<float> Rows(Trained& t, const LockedArray<uint32_t>& rows) {
  const size_t F = t.data.features;
  auto all = LockedArray<float>::Create(t.data.rows * F);
  EXPECT_TRUE(all.ok());
  EXPECT_TRUE(t.backend->Download(all->data(), t.data.x, all->size()).ok());
  auto out = LockedArray<float>::Create(rows.size() * F);
  EXPECT_TRUE(out.ok());
  for (size_t i = 0; i < rows.size(); ++i) std::memcpy(out->data() + i * F, all->data() + rows[i] * F, F * 4);
  return std::move(out).value();
}

TEST_F(Outputs, ModelFileRoundTripsAndIsSelfDescribing) {
  auto t = TrainJob(BreastJob("[model]\nhidden = [8, 4]\nactivation = \"tanh\"\n[training]\nepochs = 2"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto m = MakeModelFile(t->result.shape, t->data.schema, t->result.mean, t->result.inv_std, t->result.params);
  ASSERT_TRUE(m.ok());
  auto bytes = EncodeModelFile(*m);
  ASSERT_TRUE(bytes.ok());
  auto back = ParseModelFile(bytes->ExposeSecret());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->shape.inputs, 30u);
  EXPECT_EQ(back->shape.hidden, (std::vector<uint32_t>{8, 4}));
  EXPECT_EQ(back->shape.activation, kernels::kActTanh);
  EXPECT_EQ(back->shape.classes, 2u);
  EXPECT_EQ(back->schema.classes, (std::vector<std::string>{"benign", "malignant"}));
  EXPECT_EQ(back->schema.columns[back->schema.label_column()].name, "diagnosis");
  EXPECT_TRUE(BitIdentical(back->params, t->result.params));
  EXPECT_TRUE(BitIdentical(back->mean, t->result.mean));
  EXPECT_TRUE(BitIdentical(back->inv_std, t->result.inv_std));
  // Encoding is a function of the model: the same bytes again.
  auto again = EncodeModelFile(*back);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), bytes->size());
  EXPECT_EQ(std::memcmp(again->ExposeSecret().data(), bytes->ExposeSecret().data(), bytes->size()), 0);
}

TEST_F(Outputs, ModelFileReaderIsStrict) {
  auto t = TrainJob(Job(kCredit, "label = \"card\"\npositive = \"yes\"", "[model]\nhidden = [3]\n[training]\nepochs = 1"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto m = MakeModelFile(t->result.shape, t->data.schema, t->result.mean, t->result.inv_std, t->result.params);
  ASSERT_TRUE(m.ok());
  auto enc = EncodeModelFile(*m);
  ASSERT_TRUE(enc.ok());
  const std::vector<uint8_t> good(enc->ExposeSecret().begin(), enc->ExposeSecret().end());
  ASSERT_TRUE(ParseModelFile(good).ok());
  // Any single changed byte is refused (magic, version, or the digest catches it).
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x01;
    EXPECT_FALSE(ParseModelFile(bad).ok()) << "byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{7}, size_t{12}, good.size() - 1}) {
    EXPECT_FALSE(ParseModelFile(std::span(good).first(n)).ok()) << n;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_FALSE(ParseModelFile(longer).ok());
  // With the digest recomputed, the field checks themselves still refuse.
  auto refix = [](std::vector<uint8_t> b) {
    const crypto::Digest256 d = crypto::Sha256(std::span(b).first(b.size() - 32));
    std::memcpy(b.data() + b.size() - 32, d.data(), 32);
    return b;
  };
  auto expect_code = [&](std::vector<uint8_t> b, Code code, const std::string& what) {
    auto r = ParseModelFile(refix(std::move(b)));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), code) << what << ": " << r.status().ToString();
  };
  std::vector<uint8_t> b = good;
  b[8] = 4;
  expect_code(b, Code::kUnsupported, "version 4");
  b = good;
  b[8] = 3;  // version 3 has version 2's layout and a threshold: version 1's bytes do not fit it
  expect_code(b, Code::kInvalidInput, "version 3");
  b = good;
  b[8] = 2;  // a known version, but this model (plain data, classification) has only version 1
  expect_code(b, Code::kInvalidInput, "version 2");
  b = good;
  b[10] = 1;
  expect_code(b, Code::kInvalidInput, "flags");
  b = good;
  b[20] = 0;
  expect_code(b, Code::kInvalidInput, "activation identity");
  b = good;
  b[21] = 17;
  expect_code(b, Code::kInvalidInput, "17 hidden layers");
  b = good;
  b[12] += 1;
  expect_code(b, Code::kInvalidInput, "inputs off by one");
  b = good;
  b[16] = 3;
  expect_code(b, Code::kInvalidInput, "classes differ from the schema");
  b = good;
  b[24] = 0;
  expect_code(b, Code::kInvalidInput, "hidden size 0");
  // A NaN parameter (the last float before the digest).
  b = good;
  const size_t last = b.size() - 32 - 4;
  b[last] = 0x00, b[last + 1] = 0x00, b[last + 2] = 0xc0, b[last + 3] = 0x7f;
  expect_code(b, Code::kInvalidInput, "NaN parameter");
  // Not a model at all.
  EXPECT_EQ(ParseModelFile(AsBytes("ENCLSEAL and more bytes than the header needs ....")).status().code(),
            Code::kInvalidInput);
}

// Predictions of a model that went through export, open and parse equal the trainer's own
// validation metrics exactly: same probabilities, bit for bit.
TEST_F(Outputs, ExportedModelPredictsAsTheTrainerEvaluated) {
  for (const char* model : {"[model]\nhidden = []", "[model]\nhidden = [16]\nactivation = \"relu\""}) {
    auto t = TrainJob(BreastJob(std::string(model) + "\n[training]\nepochs = 3\nbatch_size = 16\n[optimizer]\nlr = 0.01"));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto m = MakeModelFile(t->result.shape, t->data.schema, t->result.mean, t->result.inv_std, t->result.params);
    ASSERT_TRUE(m.ok());
    auto plain = EncodeModelFile(*m);
    ASSERT_TRUE(plain.ok());

    auto entry = ks_->FindExportKey("");
    if (!entry.ok()) {
      ASSERT_TRUE(ks_->CreateExportKey("export").ok());
    }
    auto pub = crypto::ExportPublicKeyOf(*ks_, "");
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    crypto::ModelSealOptions opt;
    opt.info.format_id = kModelFormatId;
    const std::string sealed = (dir_ / "model.sealed").string();
    auto info = crypto::SealModelToFile(*pub, plain->ExposeSecret(), opt, sealed, true);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    crypto::ModelExportInfo opened_info;
    auto opened = crypto::OpenModelToMemory(sealed, *ks_, 1u << 30, &opened_info);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_EQ(opened_info.metadata.info.format_id, kModelFormatId);
    ASSERT_EQ(opened->size(), plain->size());
    EXPECT_EQ(std::memcmp(opened->ExposeSecret().data(), plain->ExposeSecret().data(), plain->size()), 0);

    auto parsed = ParseModelFile(opened->ExposeSecret());
    ASSERT_TRUE(parsed.ok());
    LockedArray<float> xv = Rows(*t, t->split.val);
    auto probs = PredictProbabilities(*t->backend, *parsed, xv.data(), t->split.val.size());
    ASSERT_TRUE(probs.ok()) << probs.status().ToString();
    auto labels = LockedArray<float>::Create(t->split.val.size());
    ASSERT_TRUE(labels.ok());
    for (size_t i = 0; i < labels->size(); ++i) (*labels)[i] = t->data.labels[t->split.val[i]];
    const EpochMetrics& f = t->result.epochs.back();
    EXPECT_EQ(Accuracy(probs->data(), labels->data(), labels->size(), 2), f.val_accuracy);
    EXPECT_EQ(RocAuc(probs->data(), labels->data(), labels->size(), 2), f.val_auc);
    EXPECT_GT(f.val_accuracy, 0.85);
  }
}

// `enclave-train run` keeps the model in backend memory and seals it there (on the GPU
// backend: on the device). On the CPU backend that path must give exactly the model file,
// digests and predictions of the downloaded model.
TEST_F(Outputs, ModelSealedWhereItLivesIsTheDownloadedModel) {
  const JobSpec job = BreastJob("[model]\nhidden = [8]\nactivation = \"tanh\"\n[training]\nepochs = 2");
  auto t = TrainJob(job);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto m = MakeModelFile(t->result.shape, t->data.schema, t->result.mean, t->result.inv_std, t->result.params);
  ASSERT_TRUE(m.ok());
  auto plain = EncodeModelFile(*m);
  ASSERT_TRUE(plain.ok());

  std::unique_ptr<Backend> backend = MakeCpuBackend();
  auto data = LoadDatasets(*backend, job.datasets, nullptr);
  ASSERT_TRUE(data.ok());
  auto split = StratifiedSplit(data->labels, data->classes, job.validation_fraction, job.seed);
  ASSERT_TRUE(split.ok());
  TrainCallbacks cb;
  cb.model_stays_on_backend = true;
  auto r = Train(*backend, job, *data, *split, cb);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->params.size(), 0u);
  EXPECT_EQ(r->mean.size(), 0u);
  const size_t P = r->shape.parameter_count();

  auto params_digest = DigestResident(*backend, r->Resident().params, P);
  ASSERT_TRUE(params_digest.ok());
  EXPECT_EQ(*params_digest, crypto::Sha256({reinterpret_cast<const uint8_t*>(t->result.params.data()), P * 4}));

  if (!ks_->FindExportKey("").ok()) {
    ASSERT_TRUE(ks_->CreateExportKey("export").ok());
  }
  auto pub = crypto::ExportPublicKeyOf(*ks_, "");
  ASSERT_TRUE(pub.ok());
  crypto::ModelSealOptions opt;
  opt.info.format_id = kModelFormatId;
  opt.chunk_size = 1000;  // several chunks
  const std::string path = (dir_ / "resident.sealed").string();
  auto sealed = SealResidentModel(*backend, r->Resident(), data->schema, *pub, opt, path, true);
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  EXPECT_EQ(sealed->plaintext_bytes, plain->size());
  EXPECT_EQ(sealed->plaintext_sha256, crypto::Sha256(plain->ExposeSecret()));
  auto opened = crypto::OpenModelToMemory(path, *ks_, 1u << 30);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_EQ(opened->size(), plain->size());
  EXPECT_EQ(std::memcmp(opened->ExposeSecret().data(), plain->ExposeSecret().data(), plain->size()), 0);

  // Every row predicted from backend memory, as predict does from the opened model.
  LockedArray<uint32_t> all = *LockedArray<uint32_t>::Create(t->data.rows);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  const LockedArray<float> x = Rows(*t, all);
  auto want = PredictProbabilities(*t->backend, *m, x.data(), all.size());
  auto got = PredictResident(*backend, r->Resident(), data->x, data->rows);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_TRUE(BitIdentical(*want, *got));
}

TEST_F(Outputs, FeatureCsvIsReadByColumnName) {
  auto t = TrainJob(Job(kCredit, "label = \"card\"\npositive = \"yes\"", "[training]\nepochs = 1"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const dataset::DatasetSchema& schema = t->data.schema;
  auto table = ReadFeatureCsv(kCredit, schema);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->rows, t->data.rows);
  EXPECT_TRUE(table->has_labels);
  // The same values as the trainer's own CSV path.
  LockedArray<uint32_t> all = std::move(LockedArray<uint32_t>::Create(t->data.rows)).value();
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  EXPECT_TRUE(BitIdentical(Rows(*t, all), table->x));
  EXPECT_TRUE(BitIdentical(table->labels, t->data.labels));

  // Columns reversed and the label dropped: same features; a missing feature is refused.
  std::ifstream in(kCredit);
  std::vector<std::vector<std::string>> cells;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> row;
    size_t start = 0;
    for (size_t p; (p = line.find(',', start)) != std::string::npos; start = p + 1) row.push_back(line.substr(start, p - start));
    row.push_back(line.substr(start));
    cells.push_back(row);
  }
  const size_t label = schema.label_column();
  auto write = [&](const std::string& name, bool drop_first_feature) {
    std::ofstream out(dir_ / name);
    for (const auto& row : cells) {
      std::string line;
      for (size_t i = row.size(); i-- > 0;) {
        if (i == label || (drop_first_feature && i == (label == 0 ? 1 : 0))) continue;
        line += (line.empty() ? "" : ",") + row[i];
      }
      out << line << "\n";
    }
    return (dir_ / name).string();
  };
  auto reordered = ReadFeatureCsv(write("reordered.csv", false), schema);
  ASSERT_TRUE(reordered.ok()) << reordered.status().ToString();
  EXPECT_FALSE(reordered->has_labels);
  EXPECT_TRUE(BitIdentical(reordered->x, table->x));
  auto missing = ReadFeatureCsv(write("missing.csv", true), schema);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing feature column"), std::string::npos);
}

// Interrupted after K steps and resumed from the encrypted checkpoint: the same bits as a
// run that was never interrupted (SGD and AdamW; mid-epoch and at an epoch boundary).
TEST_F(Outputs, ResumeFromCheckpointIsBitIdentical) {
  auto key = CheckpointKeyFromKeystore(*ks_, true);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  // The key is stored: asking again (without create) finds the same one.
  auto again = CheckpointKeyFromKeystore(*ks_, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->key_id, key->key_id);
  // 456 training rows, batch 40: 12 steps per epoch.
  for (const char* opt : {"[optimizer]\ntype = \"sgd\"\nlr = 0.05", "[optimizer]\ntype = \"adamw\"\nlr = 0.01"}) {
    const JobSpec job = BreastJob(std::string("[model]\nhidden = [12]\n[training]\nepochs = 4\nbatch_size = 40\n") +
                                  "[schedule]\ntype = \"cosine\"\n" + opt);
    auto full = TrainJob(job);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    for (uint64_t stop_at : {uint64_t{17}, uint64_t{24}, uint64_t{1}}) {
      Trained t;
      ASSERT_TRUE((t.data = std::move(LoadDatasets(*t.backend, job.datasets, nullptr)).value(), true));
      t.split = std::move(StratifiedSplit(t.data.labels, t.data.classes, job.validation_fraction, job.seed)).value();
      const std::string ckdir = (dir_ / ("ck-" + std::to_string(stop_at))).string();
      fs::create_directories(ckdir);
      TrainCallbacks cb;
      cb.checkpoint_every = 5;
      int written = 0;
      cb.on_checkpoint = [&](const ResidentTrainState& st) {
        ++written;
        RETURN_IF_ERROR(WriteCheckpoint(*key, job.digest, st, CheckpointPath(ckdir, st.host.step)));
        return PruneCheckpoints(ckdir, 2);
      };
      cb.should_stop = [stop_at](uint64_t step) { return step == stop_at; };
      auto part = Train(*t.backend, job, t.data, t.split, cb);
      ASSERT_TRUE(part.ok()) << part.status().ToString();
      ASSERT_TRUE(part->stopped);
      EXPECT_EQ(part->steps, stop_at);
      EXPECT_EQ(written, static_cast<int>(stop_at / 5 + (stop_at % 5 != 0)));
      auto latest = LatestCheckpoint(ckdir);
      ASSERT_TRUE(latest.ok());
      EXPECT_EQ(*latest, CheckpointPath(ckdir, stop_at));
      size_t files = 0;
      for (const auto& e : fs::directory_iterator(ckdir)) files += e.is_regular_file() ? 1 : 0;
      EXPECT_EQ(files, std::min<size_t>(written, 2));  // pruned to `keep`

      // A fresh process's view: a new backend, the data loaded again, the state from disk.
      auto st = ReadCheckpoint(*latest, *ks_, job.digest);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      Trained r;
      r.data = std::move(LoadDatasets(*r.backend, job.datasets, nullptr)).value();
      r.split = std::move(StratifiedSplit(r.data.labels, r.data.classes, job.validation_fraction, job.seed)).value();
      TrainCallbacks count;
      uint64_t steps_run = 0;
      count.on_step = [&](uint64_t, uint64_t) { ++steps_run; };
      auto resumed = Train(*r.backend, job, r.data, r.split, count, &*st);
      ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
      EXPECT_EQ(steps_run, full->result.steps - stop_at);  // it continued; it did not start over
      EXPECT_FALSE(resumed->stopped);
      EXPECT_EQ(resumed->resumed_step, stop_at);
      EXPECT_EQ(resumed->steps, full->result.steps);
      EXPECT_TRUE(BitIdentical(resumed->params, full->result.params)) << opt << " stop at " << stop_at;
      ASSERT_EQ(resumed->epochs.size(), full->result.epochs.size());
      for (size_t e = 0; e < resumed->epochs.size(); ++e) {
        EXPECT_EQ(resumed->epochs[e].train_loss, full->result.epochs[e].train_loss) << e;
        EXPECT_EQ(resumed->epochs[e].val_loss, full->result.epochs[e].val_loss) << e;
        EXPECT_EQ(resumed->epochs[e].lr, full->result.epochs[e].lr) << e;
      }
      // The comparison can fail: one parameter slightly off in the state gives another model.
      st->params[0] += 0.01f;
      auto nudged = Train(*r.backend, job, r.data, r.split, {}, &*st);
      ASSERT_TRUE(nudged.ok());
      EXPECT_FALSE(BitIdentical(nudged->params, full->result.params));
    }
  }
}

// A checkpoint is one AEAD message (at most 2^31 - 1 bytes): a job whose state could not be
// checkpointed is refused before its first step, not at its first checkpoint.
TEST_F(Outputs, CheckpointsThatCannotFitAreRefusedBeforeTraining) {
  // The size formula is EncodeTrainState's.
  const JobSpec small = BreastJob("[model]\nhidden = [12, 5]\n[training]\nepochs = 2\nbatch_size = 40\n"
                                  "[optimizer]\ntype = \"adamw\"\nlr = 0.01");
  Trained t;
  t.data = std::move(LoadDatasets(*t.backend, small.datasets, nullptr)).value();
  t.split = std::move(StratifiedSplit(t.data.labels, t.data.classes, small.validation_fraction, small.seed)).value();
  TrainCallbacks cb;
  cb.checkpoint_every = 7;
  int checked = 0;
  cb.on_checkpoint = [&](const ResidentTrainState& resident) -> Status {
    ASSIGN_OR_RETURN(const TrainState st, DownloadTrainState(resident));
    ASSIGN_OR_RETURN(crypto::SecretBytes plain, EncodeTrainState(st));
    EXPECT_EQ(plain.size(), TrainStateBytes(st.shape.hidden.size(), st.shape.inputs, st.shape.parameter_count(),
                                            st.moment1.size() + st.moment2.size(), st.order.size(), st.epochs.size()));
    ++checked;
    return OkStatus();
  };
  ASSERT_TRUE(Train(*t.backend, small, t.data, t.split, cb).ok());
  EXPECT_GT(checked, 0);
  // 196 million parameters: AdamW's state (12 bytes a parameter) does not fit, SGD's (8) does.
  const JobSpec big = BreastJob("[model]\nhidden = [14000, 14000]\n[training]\nepochs = 2\nbatch_size = 40\n"
                                "[optimizer]\ntype = \"adamw\"\nlr = 0.01");
  int steps = 0;
  TrainCallbacks big_cb;
  big_cb.on_step = [&](uint64_t, uint64_t) { ++steps; };
  big_cb.on_checkpoint = [](const ResidentTrainState&) { return OkStatus(); };
  auto r = Train(*t.backend, big, t.data, t.split, big_cb);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
  EXPECT_NE(r.status().message().find("more than a checkpoint holds"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(steps, 0);
  ModelShape shape;
  shape.inputs = 30;
  shape.hidden = {14000, 14000};
  shape.classes = 2;
  EXPECT_FALSE(CheckpointsFit(shape, 456, /*adamw=*/true, 2).ok());
  EXPECT_TRUE(CheckpointsFit(shape, 456, /*adamw=*/false, 2).ok());
}

// A checkpoint of several chunks, read back against docs/training.md alone: the header's
// fields, the file key (HKDF-SHA256 of the checkpoint key, salt || job digest, "enclave-
// train checkpoint v2") and every chunk as the GPU's sealing code makes it (kernels::
// SealChunks, the CPU reference of SealChunksOnGpu): the bytes a GPU-sealed checkpoint
// has. Chunks exchanged or the file cut at a chunk boundary: refused.
TEST_F(Outputs, ChunkedCheckpointIsWhatTheDocumentAndTheGpuSealerSay) {
  auto key = CheckpointKeyFromKeystore(*ks_, true);
  ASSERT_TRUE(key.ok());
  // About 1.3 MB of state (AdamW, 12 bytes a parameter): two chunks of 1 MiB.
  const JobSpec job = BreastJob("[model]\nhidden = [300, 300]\n[training]\nepochs = 1\nbatch_size = 100");
  Trained t;
  t.data = std::move(LoadDatasets(*t.backend, job.datasets, nullptr)).value();
  t.split = std::move(StratifiedSplit(t.data.labels, t.data.classes, job.validation_fraction, job.seed)).value();
  const std::string path = CheckpointPath((dir_ / "ck").string(), 2);
  fs::create_directories(dir_ / "ck");
  TrainCallbacks cb;
  cb.on_checkpoint = [&](const ResidentTrainState& st) { return WriteCheckpoint(*key, job.digest, st, path); };
  cb.should_stop = [](uint64_t step) { return step == 2; };
  ASSERT_TRUE(Train(*t.backend, job, t.data, t.split, cb).ok());
  auto state = ReadCheckpoint(path, *ks_, job.digest);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  auto plain = EncodeTrainState(*state);
  ASSERT_TRUE(plain.ok());
  auto file = ReadWholeFile(path, 1 << 24);
  ASSERT_TRUE(file.ok());
  const std::vector<uint8_t>& f = *file;
  ASSERT_GE(f.size(), 128u);
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{f[at + i]} << (8 * i);
    return v;
  };
  EXPECT_EQ(std::string(f.begin(), f.begin() + 8), "ENCLCKPT");
  EXPECT_EQ(le(8, 2), 2u);
  EXPECT_EQ(le(10, 2), 1u);
  EXPECT_TRUE(std::equal(f.begin() + 12, f.begin() + 28, key->keystore_id.begin()));
  EXPECT_TRUE(std::equal(f.begin() + 28, f.begin() + 44, key->key_id.begin()));
  EXPECT_TRUE(std::equal(f.begin() + 44, f.begin() + 76, job.digest.begin()));
  EXPECT_EQ(le(76, 8), 2u);
  const uint64_t chunk = le(116, 4), length = le(120, 8);
  EXPECT_EQ(chunk, 1u << 20);
  ASSERT_EQ(length, plain->size());
  const uint64_t chunks = (length + chunk - 1) / chunk;
  ASSERT_EQ(chunks, 2u);
  ASSERT_EQ(f.size(), 128 + length + 16 * chunks);
  std::vector<uint8_t> salt(f.begin() + 84, f.begin() + 116);
  salt.insert(salt.end(), job.digest.begin(), job.digest.end());
  auto file_key = crypto::HkdfSha256(key->key, salt, "enclave-train checkpoint v2", 32);
  ASSERT_TRUE(file_key.ok());
  kernels::ChunkBatch batch;
  batch.suite = crypto::Suite::kAes256Gcm;
  batch.first_index = 0;
  batch.count = batch.file_chunk_count = chunks;
  batch.chunk_size = static_cast<uint32_t>(chunk);
  batch.payload_length = length;
  const crypto::Digest256 header_digest = crypto::Sha256(ByteSpan(f).first(128));
  std::copy(header_digest.begin(), header_digest.end(), batch.header_digest.begin());
  std::vector<uint8_t> sealed(batch.InputBytes());
  ASSERT_TRUE(kernels::SealChunks(*file_key, batch, plain->ExposeSecret().data(), sealed.data()).ok());
  EXPECT_TRUE(std::equal(sealed.begin(), sealed.end(), f.begin() + 128)) << "chunks differ from the GPU sealer's";

  auto code_of = [&](const std::vector<uint8_t>& bytes) {
    const std::string p = (dir_ / "bad.ckpt").string();
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                               static_cast<std::streamsize>(bytes.size()));
    return ReadCheckpoint(p, *ks_, job.digest).status();
  };
  // Chunk 1 (the last, shorter) and a chunk-sized piece of chunk 0 exchanged: the sizes
  // still fit, the tags do not.
  std::vector<uint8_t> swapped = f;
  const uint64_t stride = chunk + 16, last = length - chunk + 16;
  std::swap_ranges(swapped.begin() + 128, swapped.begin() + 128 + last, swapped.begin() + 128 + stride);
  Status st = code_of(swapped);
  EXPECT_EQ(st.code(), Code::kAuthFailed) << st.ToString();
  EXPECT_NE(st.message().find("chunk 0 failed authentication"), std::string::npos) << st.ToString();
  // The last chunk dropped and the length edited to one chunk: the header's tag-free
  // fields are the chunks' associated data, so chunk 0 (now "last") fails.
  std::vector<uint8_t> cut(f.begin(), f.begin() + 128 + stride);
  for (int i = 0; i < 8; ++i) cut[120 + i] = static_cast<uint8_t>(chunk >> (8 * i));
  st = code_of(cut);
  EXPECT_EQ(st.code(), Code::kAuthFailed) << st.ToString();
  // Cut without editing: the size check.
  cut.assign(f.begin(), f.begin() + 128 + stride);
  st = code_of(cut);
  EXPECT_EQ(st.code(), Code::kAuthFailed) << st.ToString();
  EXPECT_NE(st.message().find("does not match its header"), std::string::npos) << st.ToString();
}

// Checkpoints of version 1 (one AEAD message after a 136-byte header; earlier releases
// wrote them) still resume: one made here from the document's layout opens to its state.
TEST_F(Outputs, VersionOneCheckpointsStillOpen) {
  auto key = CheckpointKeyFromKeystore(*ks_, true);
  ASSERT_TRUE(key.ok());
  const JobSpec job = BreastJob("[model]\nhidden = [4]\n[training]\nepochs = 1\nbatch_size = 100");
  Trained t;
  t.data = std::move(LoadDatasets(*t.backend, job.datasets, nullptr)).value();
  t.split = std::move(StratifiedSplit(t.data.labels, t.data.classes, job.validation_fraction, job.seed)).value();
  std::optional<TrainState> saved;
  TrainCallbacks cb;
  cb.on_checkpoint = [&](const ResidentTrainState& st) -> Status {
    ASSIGN_OR_RETURN(TrainState copy, DownloadTrainState(st));
    saved.emplace(std::move(copy));
    return OkStatus();
  };
  cb.should_stop = [](uint64_t step) { return step == 3; };
  ASSERT_TRUE(Train(*t.backend, job, t.data, t.split, cb).ok());
  ASSERT_TRUE(saved.has_value());
  auto plain = EncodeTrainState(*saved);
  ASSERT_TRUE(plain.ok());
  ByteWriter h;
  h.Bytes(std::string_view("ENCLCKPT"));
  h.U16(1);
  h.U16(1);  // AES-256-GCM
  h.Bytes(key->keystore_id);
  h.Bytes(key->key_id);
  h.Bytes(job.digest);
  h.U64(3);
  std::vector<uint8_t> salt(32, 0x5a), nonce(12, 0x3c);
  h.Bytes(salt);
  h.Bytes(nonce);
  h.U64(plain->size());
  ASSERT_EQ(h.size(), 136u);
  std::vector<uint8_t> kdf_salt = salt;
  kdf_salt.insert(kdf_salt.end(), job.digest.begin(), job.digest.end());
  auto file_key = crypto::HkdfSha256(key->key, kdf_salt, "enclave-train checkpoint v1", 32);
  ASSERT_TRUE(file_key.ok());
  auto aead = crypto::Aead::Create(crypto::Suite::kAes256Gcm, *file_key);
  ASSERT_TRUE(aead.ok());
  std::array<uint8_t, 12> n{};
  std::copy(nonce.begin(), nonce.end(), n.begin());
  std::vector<uint8_t> sealed(plain->size() + 16);
  ASSERT_TRUE((*aead)->Seal(n, h.bytes(), plain->ExposeSecret(), sealed).ok());
  std::vector<uint8_t> bytes = h.bytes();
  bytes.insert(bytes.end(), sealed.begin(), sealed.end());
  const std::string path = CheckpointPath((dir_ / "v1").string(), 3);
  fs::create_directories(dir_ / "v1");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  auto opened = ReadCheckpoint(path, *ks_, job.digest);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto again = EncodeTrainState(*opened);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), plain->size());
  EXPECT_EQ(std::memcmp(again->ExposeSecret().data(), plain->ExposeSecret().data(), plain->size()), 0);
  bytes[200] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_EQ(ReadCheckpoint(path, *ks_, job.digest).status().code(), Code::kAuthFailed);
}

// The checkpoint fuzz target's seeds reach what they are for: the state seed decodes (so
// fuzzing starts from an accepted state and its round trip), the file seeds parse as far
// as authentication.
TEST_F(Outputs, CheckpointFuzzSeedsGetWhereTheyAreMeantTo) {
  auto state = ReadWholeFile(std::string(ENCLAVE_CHECKPOINT_CORPUS) + "/state-sgd.bin", 1 << 20);
  ASSERT_TRUE(state.ok());
  ASSERT_EQ((*state)[0], 'S');
  auto decoded = DecodeTrainState(ByteSpan(*state).subspan(1));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  auto key = CheckpointKeyFromKeystore(*ks_, true);
  ASSERT_TRUE(key.ok());
  crypto::Digest256 digest{};
  for (const char* name : {"v1.ckpt", "v2-one-chunk.ckpt", "v2-three-chunks.ckpt"}) {
    auto seed = ReadWholeFile(std::string(ENCLAVE_CHECKPOINT_CORPUS) + "/" + name, 1 << 20);
    ASSERT_TRUE(seed.ok());
    std::vector<uint8_t> bytes(seed->begin() + 1, seed->end());  // as the target patches them
    std::copy(key->keystore_id.begin(), key->keystore_id.end(), bytes.begin() + 12);
    std::copy(key->key_id.begin(), key->key_id.end(), bytes.begin() + 28);
    std::copy(digest.begin(), digest.end(), bytes.begin() + 44);
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                             static_cast<std::streamsize>(bytes.size()));
    Status st = ReadCheckpoint(p, *ks_, digest).status();
    EXPECT_EQ(st.code(), Code::kAuthFailed) << name << ": " << st.ToString();
    EXPECT_NE(st.message().find("failed authentication"), std::string::npos) << name << ": " << st.ToString();
  }
}

TEST_F(Outputs, TamperedForeignAndTruncatedCheckpointsAreRefused) {
  auto key = CheckpointKeyFromKeystore(*ks_, true);
  ASSERT_TRUE(key.ok());
  const JobSpec job = BreastJob("[model]\nhidden = [4]\n[training]\nepochs = 1\nbatch_size = 100");
  Trained t;
  t.data = std::move(LoadDatasets(*t.backend, job.datasets, nullptr)).value();
  t.split = std::move(StratifiedSplit(t.data.labels, t.data.classes, job.validation_fraction, job.seed)).value();
  const std::string path = CheckpointPath((dir_ / "ck").string(), 2);
  fs::create_directories(dir_ / "ck");
  TrainCallbacks cb;
  cb.on_checkpoint = [&](const ResidentTrainState& st) { return WriteCheckpoint(*key, job.digest, st, path); };
  cb.should_stop = [](uint64_t step) { return step == 2; };
  ASSERT_TRUE(Train(*t.backend, job, t.data, t.split, cb).ok());
  ASSERT_TRUE(ReadCheckpoint(path, *ks_, job.digest).ok());
  auto file = ReadWholeFile(path, 1 << 24);
  ASSERT_TRUE(file.ok());
  const std::vector<uint8_t> good = *file;
  auto code_of = [&](const std::vector<uint8_t>& bytes, const crypto::Digest256& digest, const crypto::Keystore& ks) {
    const std::string p = (dir_ / "bad.ckpt").string();
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                               static_cast<std::streamsize>(bytes.size()));
    return ReadCheckpoint(p, ks, digest).status().code();
  };
  // Any byte of the header or the ciphertext: refused.
  for (size_t i : {size_t{0}, size_t{9}, size_t{76}, size_t{90}, size_t{120}, size_t{130}, size_t{200},
                   good.size() / 2, good.size() - 1}) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x80;
    const Code c = code_of(bad, job.digest, *ks_);
    EXPECT_NE(c, Code::kOk) << "byte " << i;
    if (i >= 76) {  // step, salt, nonce, length, ciphertext
      EXPECT_EQ(c, Code::kAuthFailed) << "byte " << i;
    }
  }
  std::vector<uint8_t> cut(good.begin(), good.end() - 1);
  EXPECT_EQ(code_of(cut, job.digest, *ks_), Code::kAuthFailed);
  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  EXPECT_EQ(code_of(bad, job.digest, *ks_), Code::kInvalidInput);
  // Another job's checkpoint (another digest): refused before any decryption.
  crypto::Digest256 other = job.digest;
  other[0] ^= 1;
  EXPECT_EQ(code_of(good, other, *ks_), Code::kPermissionDenied);
  // The job digest edited in the header to match this job: authentication fails.
  bad = good;
  std::memcpy(bad.data() + 44, other.data(), 32);
  EXPECT_EQ(code_of(bad, other, *ks_), Code::kAuthFailed);
  // An older checkpoint renamed as a newer one (LatestCheckpoint goes by the name): refused.
  const std::string renamed = CheckpointPath((dir_ / "ck").string(), 7);
  fs::copy_file(path, renamed);
  EXPECT_EQ(ReadCheckpoint(renamed, *ks_, job.digest).status().code(), Code::kAuthFailed);
  fs::remove(renamed);
  // Another tenant keystore does not hold the key.
  std::optional<crypto::Keystore> ks2 = MakeKeystore("other.keystore");
  EXPECT_EQ(code_of(good, job.digest, *ks2), Code::kNotFound);
  // A state that does not fit the job (another model) is refused by Train.
  auto st = ReadCheckpoint(path, *ks_, job.digest);
  ASSERT_TRUE(st.ok());
  const JobSpec wider = BreastJob("[model]\nhidden = [5]\n[training]\nepochs = 1\nbatch_size = 100");
  auto r = Train(*t.backend, wider, t.data, t.split, {}, &*st);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  // The state round-trips through its encoding exactly.
  auto enc = EncodeTrainState(*st);
  ASSERT_TRUE(enc.ok());
  auto dec = DecodeTrainState(enc->ExposeSecret());
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  EXPECT_TRUE(BitIdentical(dec->params, st->params));
  EXPECT_TRUE(BitIdentical(dec->moment2, st->moment2));
  EXPECT_EQ(dec->step, 2u);
  EXPECT_FALSE(DecodeTrainState(enc->ExposeSecret().first(enc->size() - 1)).ok());
}

// The fuzz seeds (tests/trainer/make_model_seeds.py: written from docs/formats/model.md by an
// independent Python encoder, plus one real trained model): valid-* parse, invalid-* do not.
TEST(ModelFileSeeds, ValidParseInvalidDoNot) {
  size_t valid = 0, invalid = 0;
  for (const auto& e : fs::directory_iterator(ENCLAVE_MODEL_CORPUS)) {
    const std::string name = e.path().filename().string();
    auto bytes = ReadWholeFile(e.path().string(), 1 << 24);
    ASSERT_TRUE(bytes.ok());
    auto m = ParseModelFile(*bytes);
    if (name.rfind("valid-", 0) == 0) {
      ++valid;
      EXPECT_TRUE(m.ok()) << name << ": " << m.status().ToString();
      if (!m.ok()) continue;
      auto again = EncodeModelFile(*m);  // canonical: the Python bytes exactly
      ASSERT_TRUE(again.ok());
      EXPECT_TRUE(again->size() == bytes->size() &&
                  std::memcmp(again->ExposeSecret().data(), bytes->data(), bytes->size()) == 0)
          << name;
    } else if (name.rfind("invalid-", 0) == 0) {
      ++invalid;
      EXPECT_FALSE(m.ok()) << name;
    }
  }
  EXPECT_GE(valid, 4u);
  EXPECT_GE(invalid, 5u);
}

// A binary model's threshold other than 0.5 makes the file version 3 (format id
// enclave-train-model/3) and comes back as written; at 0.5 the bytes are version 1's, as
// before thresholds existed; a model of three classes has none.
TEST(ModelFileThreshold, VersionThreeCarriesTheThresholdAndOnlyWhenNeeded) {
  auto read = [](const char* name) {
    auto bytes = ReadWholeFile(std::string(ENCLAVE_MODEL_CORPUS) + "/" + name, 1 << 24);
    EXPECT_TRUE(bytes.ok());
    return std::move(bytes).value();
  };
  const std::vector<uint8_t> v1 = read("valid-logreg.model");
  auto m = ParseModelFile(v1);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->threshold, 0.5f);
  EXPECT_STREQ(ModelFormatIdFor(m->preprocessing, m->shape, m->family, m->threshold), "enclave-train-mlp/1");
  m->threshold = 0.3125f;
  EXPECT_STREQ(ModelFormatIdFor(m->preprocessing, m->shape, m->family, m->threshold), "enclave-train-model/3");
  auto v3 = EncodeModelFile(*m);
  ASSERT_TRUE(v3.ok()) << v3.status().message();
  EXPECT_EQ(v3->ExposeSecret()[8], 3);  // version
  auto back = ParseModelFile(v3->ExposeSecret());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->threshold, 0.3125f);
  back->threshold = 0.5f;
  auto again = EncodeModelFile(*back);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->size() == v1.size() && std::memcmp(again->ExposeSecret().data(), v1.data(), v1.size()) == 0);
  auto three = ParseModelFile(read("valid-softmax-3-classes.model"));
  ASSERT_TRUE(three.ok());
  three->threshold = 0.25f;
  EXPECT_FALSE(EncodeModelFile(*three).ok());
}

TEST(Plot, SvgHasTheJobsSeriesAndSkipsUndefinedPoints) {
  std::vector<EpochMetrics> e(3);
  for (uint32_t i = 0; i < 3; ++i) {
    e[i].epoch = i + 1;
    e[i].train_loss = 0.5 / (i + 1);
    e[i].val_loss = 0.6 / (i + 1);
    e[i].val_accuracy = 0.8 + 0.05 * i;
    e[i].val_auc = i == 1 ? std::numeric_limits<double>::quiet_NaN() : 0.9;
  }
  const std::string all = TrainingCurveSvg(e, kMetricLoss | kMetricAccuracy | kMetricRocAuc, "a <job> & \"name\"");
  for (const char* s : {"series-train_loss", "series-val_loss", "series-val_accuracy", "series-val_roc_auc"}) {
    EXPECT_NE(all.find(std::string("id=\"") + s + "\""), std::string::npos) << s;
  }
  EXPECT_NE(all.find("a &lt;job&gt; &amp; &quot;name&quot;"), std::string::npos);
  EXPECT_NE(all.find("data-series=\"val_roc_auc\" data-points=\"2\""), std::string::npos);
  EXPECT_EQ(all.find("nan"), std::string::npos);
  const std::string acc = TrainingCurveSvg(e, kMetricAccuracy, "x");
  EXPECT_EQ(acc.find("series-train_loss"), std::string::npos);
  EXPECT_NE(acc.find("series-val_accuracy"), std::string::npos);
  EXPECT_EQ(acc.rfind("</svg>\n"), acc.size() - 7);
}

TEST(Plot, HeaderNamesDataRowsFinalMetricsAndMode) {
  std::vector<EpochMetrics> e(2);
  for (uint32_t i = 0; i < 2; ++i) {
    e[i].epoch = i + 1;
    e[i].train_loss = 0.123456789 / (i + 1);
    e[i].val_loss = 0.0523;
    e[i].val_accuracy = 1.0;
    e[i].val_auc = 0.987654321;
  }
  PlotInfo info;
  info.title = "job";
  info.datasets = {{"a<b", "a.sealed", 400}, {"c", "c.csv", 169}};
  info.train_rows = 455;
  info.val_rows = 114;
  info.validation_fraction = 0.2;
  info.development_mode = true;
  const std::string svg = TrainingCurveSvg(e, kMetricLoss | kMetricAccuracy | kMetricRocAuc, info);
  EXPECT_NE(svg.find(">datasets: a&lt;b (a.sealed, 400 rows), c (c.csv, 169 rows)<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">455 training rows, 114 validation rows (validation_fraction 0.2)<"), std::string::npos);
  EXPECT_NE(svg.find(">final (epoch 2): training loss 0.06173, validation loss 0.05230, validation accuracy 1.000, "
                     "ROC AUC 0.9877<"),
            std::string::npos);
  EXPECT_NE(svg.find("id=\"info-mode\""), std::string::npos);
  EXPECT_NE(svg.find("development mode"), std::string::npos);
  info.development_mode = false;
  EXPECT_EQ(TrainingCurveSvg(e, kMetricLoss, info).find("info-mode"), std::string::npos);

  // No validation split: a note instead of the quality panel's axes, no val_* series.
  for (EpochMetrics& m : e) m.val_loss = m.val_accuracy = m.val_auc = std::numeric_limits<double>::quiet_NaN();
  info.val_rows = 0;
  info.validation_fraction = 0;
  const std::string none = TrainingCurveSvg(e, kMetricLoss | kMetricAccuracy | kMetricRocAuc, info);
  EXPECT_NE(none.find(">455 training rows, no validation split (validation_fraction = 0)<"), std::string::npos);
  EXPECT_NE(none.find("id=\"panel-note\""), std::string::npos);
  EXPECT_NE(none.find("final (epoch 2): training loss 0.06173, no validation split<"), std::string::npos);
  EXPECT_EQ(none.find("series-val_"), std::string::npos);
  EXPECT_EQ(none.find("nan"), std::string::npos);

  // Names need not be UTF-8: the SVG stays well-formed, each bad byte U+FFFD.
  info.title = "a\xff\xc3\xa9";
  info.datasets = {{"d", "f\xc3(.csv", 1}};
  const std::string bad = TrainingCurveSvg(e, kMetricLoss, info);
  EXPECT_NE(bad.find("<title>a\xef\xbf\xbd\xc3\xa9</title>"), std::string::npos);
  EXPECT_NE(bad.find("(f\xef\xbf\xbd(.csv, 1 rows)"), std::string::npos);
}

TEST(Plot, HumanMetricHasFourSignificantDigits) {
  EXPECT_EQ(HumanMetric(0.964912280701754), "0.9649");
  EXPECT_EQ(HumanMetric(0.0523), "0.05230");
  EXPECT_EQ(HumanMetric(1.0), "1.000");
  EXPECT_EQ(HumanMetric(12.3456), "12.35");
  EXPECT_EQ(HumanMetric(std::numeric_limits<double>::quiet_NaN()), "n/a");
}

}  // namespace
}  // namespace enclave::trainer
