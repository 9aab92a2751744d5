// The trainer's data path on the host side: datasets named by a job are read record by
// record (float32 features in column order, then the class index: the sealed format's
// record layout) straight into backend memory. A sealed dataset is authenticated and
// decrypted chunk by chunk into locked memory (dataset::SealedDatasetReader); a clear CSV
// (development and the determinism proof) goes through the same layout, encoded with the
// rules of `enclave-data seal`. Plus the stratified splits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "enclave/crypto/hash.h"
#include "enclave/crypto/keystore.h"
#include "enclave/dataset/schema.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/locked.h"

namespace enclave::trainer {

// Called with (records, first_row, row_count) for consecutive runs of rows.
using RecordFn = std::function<Status(const float* records, uint64_t first_row, uint64_t count)>;

struct SourceInfo {
  std::string id, path;
  DatasetFormat format = DatasetFormat::kSealed;
  uint64_t rows = 0;
  crypto::Digest256 file_digest{};  // SHA-256 of the file (sealed or CSV)
};

// Streams the records of one dataset. Every record is checked (dataset::CheckRecord:
// finite features, yes/no 0 or 1, categories in their dictionary, missing only where
// allowed, label a class index) before `fn` sees it. A sealed file must carry the job's
// dataset id in its authenticated header.
// With `hashed_header`, a sealed file whose header digest differs (the file changed since
// it was hashed for the report) is refused.
Status ReadDatasetRecords(const DatasetSpec& spec, const crypto::Keystore* keystore, dataset::DatasetSchema* schema,
                          uint64_t* rows, const std::function<Status(const dataset::DatasetSchema&, uint64_t rows)>& begin,
                          const RecordFn& fn, const crypto::Digest256* hashed_header = nullptr);

// The trainer reads numeric, yes/no and categorical features, missing values where the
// schema allows them, and classification or regression labels. Categorical columns,
// missing values (preprocess.h) and regression labels are trained on the loaded CPU path
// only: the GPU backend and [streaming] refuse such a schema as unsupported (exit 9),
// naming the dataset and the column, before any record is read.

// The record check ReadDatasetRecords applies (exposed for benchmarks' clear baselines).
Status CheckRecords(const dataset::DatasetSchema& schema, const std::string& path, const float* records,
                    uint64_t first_row, uint64_t count);

// Random access to the records of a job's datasets, concatenated in job order: what a
// streaming job (JobSpec::streaming) re-reads every epoch. Sealed datasets are read chunk by
// chunk on demand, authenticated and decrypted on every read (the file handle stays open,
// and every chunk is bound to the header that was checked); a clear CSV (development only)
// is parsed once into locked memory. Used by one thread at a time.
class RecordTable {
 public:
  virtual ~RecordTable() = default;
  uint64_t rows() const { return rows_; }
  size_t width() const { return width_; }  // floats per record: features + 1
  // Records [first, first + count) into out (count * width floats, memory of the backend
  // the table was opened for: locked host memory for the CPU, device memory for the GPU),
  // each checked as ReadDatasetRecords checks them; may span datasets. The GPU table writes
  // on a stream of its own and is done when Read returns: the caller synchronizes its own
  // backend first if queued work may still read `out`.
  virtual Status Read(uint64_t first, uint64_t count, float* out) = 0;

 protected:
  uint64_t rows_ = 0;
  size_t width_ = 0;
};

struct LoadedData {
  dataset::DatasetSchema schema;
  size_t rows = 0, features = 0;
  uint32_t classes = 0;        // 0: regression (labels are the targets)
  OwnedBuffer x;               // rows x features, backend memory (empty when streamed)
  OwnedBuffer y;               // rows (class indices), backend memory (empty when streamed)
  LockedArray<float> labels;   // the class indices again on the host (for stratification)
  LockedArray<float> sample_weights;  // the job's sample_weight_column, by row (weights.h); empty: none
  std::vector<SourceInfo> sources;
  std::shared_ptr<RecordTable> table;  // set when streamed: Train reads rows from it each epoch
};

// Loads every dataset of the job, in order, into one table; their schemas must be equal.
// `keystore` may be null when no dataset is sealed.
Result<LoadedData> LoadDatasets(Backend& backend, const std::vector<DatasetSpec>& specs,
                                const crypto::Keystore* keystore);

// For a streaming job: checks the datasets as LoadDatasets does and reads every record
// once for the labels (one pass), but keeps no features in memory; `table` serves the
// records afterwards.
Result<LoadedData> OpenDatasetsForStreaming(const std::vector<DatasetSpec>& specs, const crypto::Keystore* keystore);
// The same for `backend`: on the GPU backend the table's Read writes device memory (sealed
// chunks authenticated and decrypted on the device, every record checked there), and the
// labels pass runs there too: no plaintext record reaches the host.
Result<LoadedData> OpenDatasetsForStreaming(Backend& backend, const std::vector<DatasetSpec>& specs,
                                            const crypto::Keystore* keystore);

// LoadDatasets or OpenDatasetsForStreaming, as the job says; then the job's sample-weight
// column moves out of the features (weights.h). Weights train on the CPU backend only: the
// GPU backend refuses a job with weights as unsupported before any record is read.
Result<LoadedData> LoadJobData(Backend& backend, const JobSpec& job, const crypto::Keystore* keystore);

struct Split {
  LockedArray<uint32_t> train, val;  // row numbers, ascending
};

// Per class (in class order) the rows of that class are shuffled with Rng(seed,
// kStreamSplit) and the first round(fraction * n_class) go to validation. `classes` 0
// (regression): all rows are one class.
Result<Split> StratifiedSplit(const LockedArray<float>& labels, uint32_t classes, double fraction, uint64_t seed);

// Stratified k-fold: per class, the class's rows shuffled with Rng(seed, kStreamFolds)
// are dealt to folds round-robin, each class starting where the previous one stopped.
// `classes` 0 (regression): all rows are one class.
Result<std::vector<Split>> StratifiedKFold(const LockedArray<float>& labels, uint32_t classes, uint32_t folds,
                                           uint64_t seed);

}  // namespace enclave::trainer
