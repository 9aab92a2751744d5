#include "enclave/trainer/data.h"
#include "enclave/trainer/weights.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <string_view>

#include "enclave/common/files.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/csv.h"
#include "enclave/dataset/sealed_dataset.h"
#include "enclave/kernels/gpu_stream.h"
#include "enclave/trainer/rng.h"
#include "cells.h"

namespace enclave::trainer {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

int YesNo(const std::string& cell) {
  std::string v = Trim(cell);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "yes") return 1;
  if (v == "no") return 0;
  return -1;
}

// The number rules of enclave-data seal, from the one parser both use.
bool ParseFloat(const std::string& cell, float* out) { return dataset::ParseCsvNumber(cell, out); }

namespace {

using dataset::ColumnKind;
using dataset::DatasetSchema;

// --- the CSV side: the encoding rules of enclave-data seal (docs/formats/sealed-dataset.md),
// so that a CSV and the file sealed from it give the same records bit for bit. The
// determinism test (tests/trainer/determinism_test.cc) checks that they do.

constexpr uint64_t kCsvBatchRows = 4096;

Status ReadCsvRecords(const DatasetSpec& spec, DatasetSchema* schema, uint64_t* rows,
                      const std::function<Status(const DatasetSchema&, uint64_t)>& begin, const RecordFn& fn) {
  dataset::LabelSpec label;
  label.column = spec.label;
  label.positive = spec.positive;
  label.classes = spec.classes;
  label.task = spec.task;
  ASSIGN_OR_RETURN(dataset::CsvScan scan, dataset::ScanCsv(spec.path, label));
  *schema = scan.schema;
  *rows = scan.rows;
  RETURN_IF_ERROR(begin(*schema, scan.rows));
  const dataset::CsvRowEncoder encoder(*schema, dataset::CellSpec{});
  const size_t width = schema->columns.size();
  ASSIGN_OR_RETURN(LockedArray<float> batch, LockedArray<float>::Create(kCsvBatchRows * width));
  ASSIGN_OR_RETURN(dataset::CsvReader csv, dataset::CsvReader::Open(spec.path));
  std::vector<std::string> row;
  ASSIGN_OR_RETURN(bool have_header, csv.Next(&row));
  if (!have_header) return InvalidInput(spec.path + ": changed while reading");
  uint64_t done = 0, in_batch = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool have, csv.Next(&row));
    if (!have) break;
    if (done + in_batch >= scan.rows) return InvalidInput(spec.path + ": changed while reading (more rows)");
    RETURN_IF_ERROR(encoder.Encode(csv, row, batch.data() + in_batch * width));
    if (++in_batch == kCsvBatchRows) {
      RETURN_IF_ERROR(fn(batch.data(), done, in_batch));
      done += in_batch;
      in_batch = 0;
    }
  }
  if (in_batch > 0) RETURN_IF_ERROR(fn(batch.data(), done, in_batch));
  done += in_batch;
  if (done != scan.rows) return InvalidInput(spec.path + ": changed while reading (fewer rows)");
  return OkStatus();
}

}  // namespace

// Authenticated records may still be invalid if another implementation sealed them.
Status CheckRecords(const DatasetSchema& schema, const std::string& path, const float* records, uint64_t first_row,
                    uint64_t count) {
  const size_t width = schema.columns.size();
  for (uint64_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(dataset::CheckRecord(schema, records + r * width, first_row + r).Annotate(path));
  }
  return OkStatus();
}

// Categorical columns, missing values and regression labels are trained on the loaded
// CPU path only (preprocess.h runs on the host; the GPU kernels and the streamed path know
// classification of complete numeric records only): refused elsewhere before any record
// is read.
static Status RequireLoadedCpuPath(const DatasetSchema& schema, const std::string& dataset_id, const std::string& path,
                                   const std::string& where) {
  const std::string which = "dataset '" + dataset_id + "' (" + path + "): ";
  const std::string cpu = " (the loaded CPU path does: device = \"cpu\", no [streaming])";
  if (schema.task == dataset::Task::kRegression) {
    return Unsupported(which + "regression label, which " + where + " does not support yet" + cpu);
  }
  for (const dataset::Column& col : schema.columns) {
    if (col.kind != ColumnKind::kCategorical && !col.missing_allowed) continue;
    return Unsupported(which + "column '" + col.name + "' is " +
                       (col.kind == ColumnKind::kCategorical ? "categorical" : "allowed missing values") + ", which " +
                       where + " does not support yet" + cpu);
  }
  return OkStatus();
}

namespace {

bool SameSchema(const DatasetSchema& a, const DatasetSchema& b) {
  if (a.columns.size() != b.columns.size() || a.classes != b.classes) return false;
  for (size_t i = 0; i < a.columns.size(); ++i) {
    const dataset::Column &x = a.columns[i], &y = b.columns[i];
    // Category indices mean the same only under the same dictionary.
    if (x.name != y.name || x.kind != y.kind || x.missing_allowed != y.missing_allowed || x.categories != y.categories) {
      return false;
    }
  }
  return true;
}

// The next dataset of a job joins the table: the first sets the schema, every other must
// have the same; the rows of all must stay below 2^31.
Status AcceptDataset(const DatasetSpec& spec, const std::string& first_id, bool first, const DatasetSchema& s,
                     uint64_t n, LoadedData* out) {
  if (!first && !SameSchema(s, out->schema)) {
    return InvalidInput(spec.path + ": schema (columns, kinds, missing values, categories, classes) differs from dataset '" +
                        first_id + "'");
  }
  if (first) out->schema = s;
  if (n == 0) return InvalidInput(spec.path + ": no rows");
  if (out->rows + n >= (uint64_t{1} << 32) / 2) return InvalidInput(spec.path + ": too many rows (2^31 at most)");
  return OkStatus();
}

// A sealed file's header, as read, against the one hashed for the report.
Status SameAsHashed(const DatasetSpec& spec, const crypto::Digest256& read, const crypto::Digest256* hashed) {
  if (hashed == nullptr || read == *hashed) return OkStatus();
  return InvalidInput(spec.path + ": changed while reading (its header is not the one hashed for the report)");
}

Status SortAscending(LockedArray<uint32_t>& a) {
  std::sort(a.begin(), a.end());
  return OkStatus();
}

}  // namespace

Status ReadDatasetRecords(const DatasetSpec& spec, const crypto::Keystore* keystore, DatasetSchema* schema,
                          uint64_t* rows, const std::function<Status(const DatasetSchema&, uint64_t)>& begin,
                          const RecordFn& fn, const crypto::Digest256* hashed_header) {
  auto checked = [&](const float* records, uint64_t first, uint64_t count) -> Status {
    RETURN_IF_ERROR(CheckRecords(*schema, spec.path, records, first, count));
    return fn(records, first, count);
  };
  if (spec.format == DatasetFormat::kCsv) return ReadCsvRecords(spec, schema, rows, begin, checked);
  if (keystore == nullptr) return FailedPrecondition(spec.path + ": a sealed dataset needs a keystore");
  ASSIGN_OR_RETURN(dataset::SealedDatasetReader reader, dataset::SealedDatasetReader::Open(spec.path, *keystore));
  RETURN_IF_ERROR(SameAsHashed(spec, reader.header().header_digest, hashed_header));
  // The id is in the authenticated header: a file swapped for another dataset is refused.
  if (reader.header().params.object_id != spec.id) {
    return PermissionDenied(spec.path + ": sealed dataset id is '" + reader.header().params.object_id +
                            "', the job names '" + spec.id + "'");
  }
  *schema = reader.schema();
  *rows = reader.rows();
  RETURN_IF_ERROR(begin(*schema, *rows));
  return reader.ForEachChunk([&](std::span<const float> records, uint64_t first, uint64_t count) {
    return checked(records.data(), first, count);
  });
}

namespace {

// The column flags of the device record check: 1 for a yes/no feature.
Result<std::vector<uint8_t>> YesNoFlags(const DatasetSchema& schema, const std::string& path) {
  std::vector<uint8_t> yes_no;
  for (const dataset::Column& col : schema.columns) {
    if (col.kind != ColumnKind::kLabel) yes_no.push_back(col.kind == ColumnKind::kYesNo ? 1 : 0);
  }
  if (yes_no.size() != schema.feature_count()) return InvalidInput(path + ": schema has no label column");
  return yes_no;
}

Status RecordCheckFailed(const std::string& path, uint64_t record) {
  return InvalidInput(path + ": record " + std::to_string(record) +
                      ": invalid value (a feature not finite, a yes/no column not 0 or 1, or the label not a "
                      "class index)");
}

// A sealed dataset for the GPU: the header checks of SealedDatasetReader (keystore, suite,
// key commitment, header tag, schema; it decrypts no chunk), the job's dataset id, and a
// kernels::GpuSealedStream over that same header (ciphertext in pinned host buffers,
// authenticated and decrypted on the device: no plaintext record is ever on the host).
Result<std::unique_ptr<kernels::GpuSealedStream>> OpenSealedForDevice(const DatasetSpec& spec,
                                                                     const crypto::Keystore* keystore,
                                                                     const crypto::Digest256* hashed_header,
                                                                     DatasetSchema* schema, uint64_t* rows,
                                                                     const kernels::GpuStreamOptions& options = {}) {
  if (keystore == nullptr) return FailedPrecondition(spec.path + ": a sealed dataset needs a keystore");
  ASSIGN_OR_RETURN(dataset::SealedDatasetReader reader, dataset::SealedDatasetReader::Open(spec.path, *keystore));
  const crypto::SealedHeader& h = reader.header();
  RETURN_IF_ERROR(SameAsHashed(spec, h.header_digest, hashed_header));
  if (h.params.object_id != spec.id) {
    return PermissionDenied(spec.path + ": sealed dataset id is '" + h.params.object_id + "', the job names '" +
                            spec.id + "'");
  }
  *schema = reader.schema();
  *rows = reader.rows();
  // Before any device memory is touched.
  RETURN_IF_ERROR(RequireLoadedCpuPath(*schema, spec.id, spec.path, "the GPU backend"));
  ASSIGN_OR_RETURN(crypto::SecretBytes dek, keystore->GetDataKey(h.params.object_id, h.params.key_id));
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::GpuSealedStream> stream,
                   kernels::GpuSealedStream::Open(spec.path, dek, options));
  // The header the stream authenticated must be the one checked above (the file may not
  // have been replaced in between): its digest is every chunk's associated data.
  if (stream->header().header_digest != h.header_digest) {
    return InvalidInput(spec.path + ": changed while reading (header differs)");
  }
  const uint64_t bytes = *rows * schema->columns.size() * sizeof(float);
  if (stream->OutputBytes(0, stream->header().chunk_count) != bytes) {
    return InvalidInput(spec.path + ": payload length does not match the records");
  }
  return stream;
}

// The GPU backend's sealed path: the whole file into device memory (`target` is the
// backend buffer that `begin` allocated), then every record checked there.
Status ReadSealedIntoDevice(Backend& backend, const DatasetSpec& spec, const crypto::Keystore* keystore,
                            const crypto::Digest256* hashed_header, DatasetSchema* schema, uint64_t* rows,
                            const std::function<Status(const DatasetSchema&, uint64_t)>& begin,
                            const std::function<Buffer()>& target) {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::GpuSealedStream> stream,
                   OpenSealedForDevice(spec, keystore, hashed_header, schema, rows));
  RETURN_IF_ERROR(begin(*schema, *rows));
  const size_t width = schema->columns.size();
  const uint32_t features = schema->feature_count();
  const Buffer dst = target();
  if (dst.size < *rows * width) return Internal(spec.path + ": target buffer too small");
  // Alloc's zero fill is queued on the backend's stream; the stream writes on its own.
  RETURN_IF_ERROR(backend.Synchronize());
  // On failure (a chunk failing authentication) the whole range is zeroed first.
  RETURN_IF_ERROR(stream->ReadAll(reinterpret_cast<uint8_t*>(dst.data)));
  ASSIGN_OR_RETURN(std::vector<uint8_t> yes_no, YesNoFlags(*schema, spec.path));
  uint64_t first_bad = *rows;
  RETURN_IF_ERROR(backend.CheckRecords(dst, *rows, features, yes_no.data(),
                                       static_cast<uint32_t>(schema->classes.size()), &first_bad));
  if (first_bad < *rows) return RecordCheckFailed(spec.path, first_bad);
  return OkStatus();
}

bool OnGpu(const Backend& backend) { return std::string_view(backend.kind()) == "gpu"; }

// The report's description of a dataset, with the SHA-256 of its file (rows: the
// caller's, once read). Taken before the data is read: a sealed file's readers then
// check that what they read has `*header_digest`, the header hashed here, so the digest
// names the bytes trained on (docs/training.md, "The report"). A clear CSV (development
// only) changed in between is not detected.
Result<SourceInfo> DescribeSource(const DatasetSpec& spec, crypto::Digest256* header_digest) {
  SourceInfo info;
  info.id = spec.id;
  info.path = spec.path;
  info.format = spec.format;
  if (spec.format == DatasetFormat::kSealed) {
    ASSIGN_OR_RETURN(crypto::SealedFileDigests d, crypto::DigestSealedFile(spec.path));
    info.file_digest = d.file;
    *header_digest = d.header;
    return info;
  }
  ASSIGN_OR_RETURN(FileReader f, FileReader::Open(spec.path));
  crypto::Sha256Hasher h;
  std::vector<uint8_t> buf(1 << 16);
  size_t got = 0;
  do {
    RETURN_IF_ERROR(f.Read(buf.data(), buf.size(), &got));
    h.Update({buf.data(), got});
  } while (got > 0);
  info.file_digest = h.Final();
  return info;
}

// The streaming table: per dataset either an open sealed reader or the parsed CSV records.
class JobRecordTable : public RecordTable {
 public:
  struct Part {
    std::string path;
    uint64_t first = 0, rows = 0;  // its rows in the whole table
    std::unique_ptr<dataset::SealedDatasetReader> sealed;
    LockedArray<float> clear;  // rows x width (CSV)
  };

  JobRecordTable(DatasetSchema schema, std::vector<Part> parts) : schema_(std::move(schema)), parts_(std::move(parts)) {
    width_ = schema_.columns.size();
    for (const Part& p : parts_) rows_ += p.rows;
  }

  Status Read(uint64_t first, uint64_t count, float* out) override {
    if (first > rows_ || count > rows_ - first) return Internal("record table: read past the end");
    for (Part& p : parts_) {
      const uint64_t lo = std::max(first, p.first), hi = std::min(first + count, p.first + p.rows);
      if (lo >= hi) continue;
      float* dst = out + (lo - first) * width_;
      if (p.sealed) {
        RETURN_IF_ERROR(p.sealed->ReadRows(lo - p.first, hi - lo, dst));
      } else {
        std::copy_n(p.clear.data() + (lo - p.first) * width_, (hi - lo) * width_, dst);
      }
      RETURN_IF_ERROR(CheckRecords(schema_, p.path, dst, lo - p.first, hi - lo));
    }
    return OkStatus();
  }

 private:
  DatasetSchema schema_;
  std::vector<Part> parts_;
};

// The GPU backend's streaming table: Read writes device memory. A sealed dataset's chunks
// go through its kernels::GpuSealedStream (read, copied, authenticated and decrypted on the
// device) into a device scratch buffer, and the requested records are copied out of it; a
// clear CSV (development only) was parsed once into locked host memory and is uploaded.
// Every record read is checked on the device. Its own GPU backend (a backend is not
// thread-safe) does the copies and the check, for whichever thread reads.
class DeviceRecordTable : public RecordTable {
 public:
  struct Part {
    std::string path;
    uint64_t first = 0, rows = 0;                     // its rows in the whole table
    std::unique_ptr<kernels::GpuSealedStream> sealed;
    uint64_t chunk_records = 0;                       // sealed: records per chunk but the last
    LockedArray<float> clear;                         // CSV: rows x width
  };

  static Result<std::unique_ptr<DeviceRecordTable>> Create(DatasetSchema schema, std::vector<Part> parts) {
    std::unique_ptr<DeviceRecordTable> t(new DeviceRecordTable(std::move(schema), std::move(parts)));
    ASSIGN_OR_RETURN(t->backend_, MakeBackend(Device::kGpu));
    ASSIGN_OR_RETURN(t->yes_no_, YesNoFlags(t->schema_, t->parts_.front().path));
    uint64_t scratch_floats = 0;  // kScratchBytes of whole chunks, at least one chunk
    for (const Part& p : t->parts_) {
      if (!p.sealed) continue;
      const uint64_t chunk = p.sealed->header().params.chunk_size;
      scratch_floats = std::max(scratch_floats, std::max<uint64_t>(1, kScratchBytes / chunk) * chunk / sizeof(float));
    }
    if (scratch_floats > 0) {
      ASSIGN_OR_RETURN(t->scratch_, AllocOwned(*t->backend_, scratch_floats));
    }
    return t;
  }

  Status Read(uint64_t first, uint64_t count, float* out) override {
    if (first > rows_ || count > rows_ - first) return Internal("record table: read past the end");
    for (Part& p : parts_) {
      const uint64_t lo = std::max(first, p.first), hi = std::min(first + count, p.first + p.rows);
      if (lo >= hi) continue;
      const Buffer dst{out + (lo - first) * width_, (hi - lo) * width_};
      if (p.sealed) {
        RETURN_IF_ERROR(ReadSealed(p, lo - p.first, hi - lo, dst));
      } else {
        RETURN_IF_ERROR(backend_->Upload(dst, p.clear.data() + (lo - p.first) * width_, dst.size));
      }
      uint64_t bad = hi - lo;
      RETURN_IF_ERROR(backend_->CheckRecords(dst, hi - lo, width_ - 1, yes_no_.data(),
                                             static_cast<uint32_t>(schema_.classes.size()), &bad));
      if (bad < hi - lo) return RecordCheckFailed(p.path, lo - p.first + bad);
    }
    return OkStatus();
  }

 private:
  static constexpr uint64_t kScratchBytes = 64ull << 20;

  DeviceRecordTable(DatasetSchema schema, std::vector<Part> parts)
      : schema_(std::move(schema)), parts_(std::move(parts)) {
    width_ = schema_.columns.size();
    for (const Part& p : parts_) rows_ += p.rows;
  }

  // Records [row, row + n) of a sealed part into dst, through the scratch buffer a batch of
  // whole chunks at a time (a chunk that fails authentication: the error, the scratch zeroed).
  Status ReadSealed(Part& p, uint64_t row, uint64_t n, Buffer dst) {
    const uint64_t per = p.chunk_records, chunk_bytes = p.sealed->header().params.chunk_size;
    const uint64_t batch = std::max<uint64_t>(1, scratch_.size() * sizeof(float) / chunk_bytes);
    size_t at = 0;
    while (n > 0) {
      const uint64_t c0 = row / per, c1 = std::min((row + n - 1) / per + 1, c0 + batch);
      RETURN_IF_ERROR(p.sealed->ReadChunks(c0, c1 - c0, reinterpret_cast<uint8_t*>(scratch_.get().data)));
      const uint64_t here = std::min(row + n, std::min(c1 * per, p.rows)) - row;
      const Buffer from = scratch_.get().Slice((row - c0 * per) * width_, here * width_);
      RETURN_IF_ERROR(backend_->CopyToBytes(dst, at * sizeof(float), from, here * width_));
      RETURN_IF_ERROR(backend_->Synchronize());  // before the next batch overwrites the scratch
      at += here * width_;
      row += here;
      n -= here;
    }
    return OkStatus();
  }

  DatasetSchema schema_;
  std::vector<Part> parts_;
  std::unique_ptr<Backend> backend_;  // before scratch_: freed after it
  std::vector<uint8_t> yes_no_;
  OwnedBuffer scratch_;
};

// OpenDatasetsForStreaming for the GPU backend: the same checks, the labels read through the
// device table (every record authenticated, decrypted and checked on the device, only the
// class indices brought back).
Result<LoadedData> OpenDatasetsForStreamingOnDevice(Backend& backend, const std::vector<DatasetSpec>& specs,
                                                    const crypto::Keystore* keystore) {
  LoadedData out;
  std::vector<DeviceRecordTable::Part> parts;
  for (const DatasetSpec& spec : specs) {
    DeviceRecordTable::Part part;
    part.path = spec.path;
    part.first = out.rows;
    crypto::Digest256 hashed_header{};  // hashed before anything is read
    ASSIGN_OR_RETURN(SourceInfo info, DescribeSource(spec, &hashed_header));
    auto begin = [&](const DatasetSchema& s, uint64_t n) -> Status {
      RETURN_IF_ERROR(AcceptDataset(spec, specs[0].id, parts.empty(), s, n, &out));
      RETURN_IF_ERROR(RequireLoadedCpuPath(s, spec.id, spec.path, "[streaming]"));
      if (spec.format == DatasetFormat::kCsv) {
        ASSIGN_OR_RETURN(part.clear, LockedArray<float>::Create(n * s.columns.size()));
      }
      return OkStatus();
    };
    if (spec.format == DatasetFormat::kCsv) {
      DatasetSchema schema;
      RETURN_IF_ERROR(ReadDatasetRecords(spec, keystore, &schema, &part.rows, begin,
                                         [&](const float* records, uint64_t first, uint64_t count) -> Status {
                                           const size_t w = out.schema.columns.size();
                                           if ((first + count) * w > part.clear.size()) {
                                             return InvalidInput(spec.path + ": more records than its header says");
                                           }
                                           std::copy_n(records, count * w, part.clear.data() + first * w);
                                           return OkStatus();
                                         }));
    } else {
      DatasetSchema schema;
      kernels::GpuStreamOptions options;
      options.batch_bytes = 16ull << 20;  // per dataset: 3 pinned and 3 device buffers of this
      ASSIGN_OR_RETURN(part.sealed, OpenSealedForDevice(spec, keystore, &hashed_header, &schema, &part.rows, options));
      RETURN_IF_ERROR(begin(schema, part.rows));
      part.chunk_records = part.sealed->header().params.chunk_size / schema.record_bytes();
    }
    info.rows = part.rows;
    out.sources.push_back(std::move(info));
    out.rows += part.rows;
    parts.push_back(std::move(part));
  }
  out.features = out.schema.feature_count();
  out.classes = static_cast<uint32_t>(out.schema.classes.size());
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRecordTable> table, DeviceRecordTable::Create(out.schema, std::move(parts)));
  // The labels, a piece at a time: records into device memory, split there, the class
  // indices down.
  const size_t width = out.schema.columns.size(), F = out.features;
  const uint64_t piece_rows = std::max<uint64_t>(1, (16ull << 20) / (width * sizeof(float)));
  const size_t piece = static_cast<size_t>(std::min<uint64_t>(out.rows, piece_rows));
  ASSIGN_OR_RETURN(OwnedBuffer records, AllocOwned(backend, piece * width));
  ASSIGN_OR_RETURN(OwnedBuffer x, AllocOwned(backend, piece * F));
  ASSIGN_OR_RETURN(OwnedBuffer y, AllocOwned(backend, piece));
  ASSIGN_OR_RETURN(out.labels, LockedArray<float>::Create(out.rows));
  RETURN_IF_ERROR(backend.Synchronize());
  for (uint64_t first = 0; first < out.rows; first += piece) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, out.rows - first));
    RETURN_IF_ERROR(table->Read(first, n, records.get().data));
    RETURN_IF_ERROR(backend.SplitRecords(records, n, F, x, y));
    RETURN_IF_ERROR(backend.Download(out.labels.data() + first, y, n));
  }
  out.table = std::move(table);
  return out;
}

}  // namespace

Result<LoadedData> OpenDatasetsForStreaming(const std::vector<DatasetSpec>& specs, const crypto::Keystore* keystore) {
  if (specs.empty()) return InvalidInput("the job names no dataset");
  LoadedData out;
  std::vector<JobRecordTable::Part> parts;
  std::vector<LockedArray<float>> labels;  // per dataset
  for (const DatasetSpec& spec : specs) {
    JobRecordTable::Part part;
    LockedArray<float> part_labels;
    part.path = spec.path;
    part.first = out.rows;
    auto begin = [&](const DatasetSchema& s, uint64_t n) -> Status {
      RETURN_IF_ERROR(AcceptDataset(spec, specs[0].id, parts.empty(), s, n, &out));
      RETURN_IF_ERROR(RequireLoadedCpuPath(s, spec.id, spec.path, "[streaming]"));
      ASSIGN_OR_RETURN(part_labels, LockedArray<float>::Create(n));
      if (spec.format == DatasetFormat::kCsv) {
        ASSIGN_OR_RETURN(part.clear, LockedArray<float>::Create(n * s.columns.size()));
      }
      return OkStatus();
    };
    auto fn = [&](const float* records, uint64_t first, uint64_t count) -> Status {
      const size_t w = out.schema.columns.size(), f = w - 1;
      if (first + count > part_labels.size()) return InvalidInput(spec.path + ": more records than its header says");
      for (uint64_t r = 0; r < count; ++r) part_labels[first + r] = records[r * w + f];
      if (!part.clear.empty()) std::copy_n(records, count * w, part.clear.data() + first * w);
      return OkStatus();
    };
    DatasetSchema schema;
    crypto::Digest256 hashed_header{};  // hashed before anything is read
    ASSIGN_OR_RETURN(SourceInfo info, DescribeSource(spec, &hashed_header));
    if (spec.format == DatasetFormat::kCsv) {
      RETURN_IF_ERROR(ReadDatasetRecords(spec, keystore, &schema, &part.rows, begin, fn));
    } else {
      if (keystore == nullptr) return FailedPrecondition(spec.path + ": a sealed dataset needs a keystore");
      ASSIGN_OR_RETURN(dataset::SealedDatasetReader reader, dataset::SealedDatasetReader::Open(spec.path, *keystore));
      RETURN_IF_ERROR(SameAsHashed(spec, reader.header().header_digest, &hashed_header));
      if (reader.header().params.object_id != spec.id) {
        return PermissionDenied(spec.path + ": sealed dataset id is '" + reader.header().params.object_id +
                                "', the job names '" + spec.id + "'");
      }
      part.rows = reader.rows();
      RETURN_IF_ERROR(begin(reader.schema(), part.rows));
      RETURN_IF_ERROR(reader.ForEachChunk([&](std::span<const float> records, uint64_t first, uint64_t count) {
        RETURN_IF_ERROR(CheckRecords(out.schema, spec.path, records.data(), first, count));
        return fn(records.data(), first, count);
      }));
      part.sealed = std::make_unique<dataset::SealedDatasetReader>(std::move(reader));
    }
    info.rows = part.rows;
    out.sources.push_back(std::move(info));
    out.rows += part.rows;
    parts.push_back(std::move(part));
    labels.push_back(std::move(part_labels));
  }
  out.features = out.schema.feature_count();
  out.classes = static_cast<uint32_t>(out.schema.classes.size());
  ASSIGN_OR_RETURN(out.labels, LockedArray<float>::Create(out.rows));
  size_t at = 0;
  for (const LockedArray<float>& l : labels) at = std::copy(l.begin(), l.end(), out.labels.begin() + at) - out.labels.begin();
  out.table = std::make_shared<JobRecordTable>(out.schema, std::move(parts));
  return out;
}

Result<LoadedData> OpenDatasetsForStreaming(Backend& backend, const std::vector<DatasetSpec>& specs,
                                            const crypto::Keystore* keystore) {
  if (!OnGpu(backend)) return OpenDatasetsForStreaming(specs, keystore);
  if (specs.empty()) return InvalidInput("the job names no dataset");
  return OpenDatasetsForStreamingOnDevice(backend, specs, keystore);
}

Result<LoadedData> LoadJobData(Backend& backend, const JobSpec& job, const crypto::Keystore* keystore) {
  if (job.weights.any() && OnGpu(backend)) {
    return Unsupported("training.class_weight and sample_weight_column train on the CPU backend only (device = \"cpu\")");
  }
  if (job.streaming.enabled) return OpenDatasetsForStreaming(backend, job.datasets, keystore);
  ASSIGN_OR_RETURN(LoadedData data, LoadDatasets(backend, job.datasets, keystore));
  if (!job.weights.column.empty()) RETURN_IF_ERROR(ExtractSampleWeights(job.weights.column, &data));
  return data;
}

Result<LoadedData> LoadDatasets(Backend& backend, const std::vector<DatasetSpec>& specs,
                                const crypto::Keystore* keystore) {
  if (specs.empty()) return InvalidInput("the job names no dataset");
  // Records land in one staging buffer per dataset, then are split into x and y; the
  // tables of several datasets are concatenated in job order.
  struct Part {
    OwnedBuffer records;
    uint64_t rows = 0;
  };
  std::vector<Part> parts;
  LoadedData out;
  for (const DatasetSpec& spec : specs) {
    Part part;
    DatasetSchema schema;
    uint64_t rows = 0;
    auto begin = [&](const DatasetSchema& s, uint64_t n) -> Status {
      RETURN_IF_ERROR(AcceptDataset(spec, specs[0].id, parts.empty(), s, n, &out));
      if (OnGpu(backend)) RETURN_IF_ERROR(RequireLoadedCpuPath(s, spec.id, spec.path, "the GPU backend"));
      ASSIGN_OR_RETURN(part.records, AllocOwned(backend, n * s.columns.size()));
      return OkStatus();
    };
    auto fn = [&](const float* records, uint64_t first, uint64_t count) -> Status {
      const size_t width = out.schema.columns.size();
      return backend.Upload(part.records.get().Slice(first * width, count * width), records, count * width);
    };
    crypto::Digest256 hashed_header{};  // hashed before anything is read
    ASSIGN_OR_RETURN(SourceInfo info, DescribeSource(spec, &hashed_header));
    const crypto::Digest256* hashed = spec.format == DatasetFormat::kSealed ? &hashed_header : nullptr;
    if (spec.format == DatasetFormat::kSealed && OnGpu(backend)) {
      RETURN_IF_ERROR(ReadSealedIntoDevice(backend, spec, keystore, hashed, &schema, &rows, begin,
                                           [&] { return part.records.get(); }));
    } else {
      RETURN_IF_ERROR(ReadDatasetRecords(spec, keystore, &schema, &rows, begin, fn, hashed));
    }
    info.rows = rows;
    out.sources.push_back(std::move(info));
    out.rows += rows;
    part.rows = rows;
    parts.push_back(std::move(part));
  }
  out.features = out.schema.feature_count();
  out.classes = static_cast<uint32_t>(out.schema.classes.size());
  ASSIGN_OR_RETURN(out.x, AllocOwned(backend, out.rows * out.features));
  ASSIGN_OR_RETURN(out.y, AllocOwned(backend, out.rows));
  size_t row = 0;
  for (Part& p : parts) {
    RETURN_IF_ERROR(backend.SplitRecords(p.records, p.rows, out.features,
                                         out.x.get().Slice(row * out.features, p.rows * out.features),
                                         out.y.get().Slice(row, p.rows)));
    row += p.rows;
    p.records.Reset();
  }
  ASSIGN_OR_RETURN(out.labels, LockedArray<float>::Create(out.rows));
  RETURN_IF_ERROR(backend.Download(out.labels.data(), out.y, out.rows));
  return out;
}

Result<Split> StratifiedSplit(const LockedArray<float>& labels, uint32_t classes, double fraction, uint64_t seed) {
  const size_t n = labels.size();
  // Regression (no classes): all rows are one stratum, so the split is a seeded random one.
  const bool one_stratum = classes == 0;
  if (one_stratum) classes = 1;
  auto stratum = [&](size_t i) { return one_stratum ? 0u : static_cast<uint32_t>(labels[i]); };
  std::vector<size_t> per_class(classes, 0);
  for (size_t i = 0; i < n; ++i) ++per_class[stratum(i)];
  size_t val_total = 0;
  std::vector<size_t> val_count(classes);
  for (uint32_t c = 0; c < classes; ++c) {
    val_count[c] = static_cast<size_t>(std::floor(fraction * static_cast<double>(per_class[c]) + 0.5));
    val_total += val_count[c];
  }
  if (val_total >= n) return InvalidInput("validation_fraction leaves no training rows");
  Split s;
  ASSIGN_OR_RETURN(s.train, LockedArray<uint32_t>::Create(n - val_total));
  ASSIGN_OR_RETURN(s.val, LockedArray<uint32_t>::Create(val_total));
  ASSIGN_OR_RETURN(LockedArray<uint32_t> members, LockedArray<uint32_t>::Create(n));
  Rng rng(seed, kStreamSplit);
  size_t ti = 0, vi = 0;
  for (uint32_t c = 0; c < classes; ++c) {
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      if (stratum(i) == c) members[m++] = static_cast<uint32_t>(i);
    }
    Shuffle(members.data(), m, rng);
    for (size_t i = 0; i < m; ++i) {
      if (i < val_count[c]) {
        s.val[vi++] = members[i];
      } else {
        s.train[ti++] = members[i];
      }
    }
  }
  RETURN_IF_ERROR(SortAscending(s.train));
  RETURN_IF_ERROR(SortAscending(s.val));
  return s;
}

Result<std::vector<Split>> StratifiedKFold(const LockedArray<float>& labels, uint32_t classes, uint32_t folds,
                                           uint64_t seed) {
  const size_t n = labels.size();
  if (folds < 2) return InvalidInput("--folds must be at least 2");
  if (folds > n) return InvalidInput("--folds " + std::to_string(folds) + " exceeds the " + std::to_string(n) + " rows");
  ASSIGN_OR_RETURN(LockedArray<uint32_t> fold_of, LockedArray<uint32_t>::Create(n));
  ASSIGN_OR_RETURN(LockedArray<uint32_t> members, LockedArray<uint32_t>::Create(n));
  Rng rng(seed, kStreamFolds);
  const bool one_stratum = classes == 0;  // regression: shuffled rows dealt round-robin
  if (one_stratum) classes = 1;
  size_t next = 0;
  for (uint32_t c = 0; c < classes; ++c) {
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      if (one_stratum || static_cast<uint32_t>(labels[i]) == c) members[m++] = static_cast<uint32_t>(i);
    }
    Shuffle(members.data(), m, rng);
    for (size_t i = 0; i < m; ++i) fold_of[members[i]] = static_cast<uint32_t>(next++ % folds);
  }
  std::vector<size_t> sizes(folds, 0);
  for (size_t i = 0; i < n; ++i) ++sizes[fold_of[i]];
  std::vector<Split> out;
  for (uint32_t f = 0; f < folds; ++f) {
    Split s;
    ASSIGN_OR_RETURN(s.val, LockedArray<uint32_t>::Create(sizes[f]));
    ASSIGN_OR_RETURN(s.train, LockedArray<uint32_t>::Create(n - sizes[f]));
    size_t ti = 0, vi = 0;
    for (size_t i = 0; i < n; ++i) {
      if (fold_of[i] == f) {
        s.val[vi++] = static_cast<uint32_t>(i);
      } else {
        s.train[ti++] = static_cast<uint32_t>(i);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace enclave::trainer
