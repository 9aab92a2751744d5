#include "enclave/trainer/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/kernels/chunk_open.h"
#include "enclave/kernels/device_seal.h"
#include "le_cursor.h"

namespace enclave::trainer {
namespace {

constexpr uint32_t kStateVersion = 1;
constexpr char kKdfInfo[] = "enclave-train checkpoint v1";
constexpr size_t kSaltBytes = 32;
constexpr size_t kMaxStateBytes = size_t{16} << 30;
constexpr size_t kEpochBytes = 4 + 6 * 8;

constexpr char kKdfInfoV2[] = "enclave-train checkpoint v2";

// The per-file key: HKDF-SHA256(checkpoint key, salt = file salt || job digest, info).
Result<crypto::SecretBytes> FileKey(const crypto::SecretBytes& key, const char* info, ByteSpan salt,
                                    const crypto::Digest256& job_digest) {
  std::vector<uint8_t> s(salt.begin(), salt.end());
  s.insert(s.end(), job_digest.begin(), job_digest.end());
  return crypto::HkdfSha256(key, s, info, crypto::kAeadKeyBytes);
}

// Before any decryption: written for this job (kPermissionDenied) with this keystore (kNotFound).
Status CheckOwner(const std::string& path, ByteSpan digest, ByteSpan keystore_id, const crypto::Keystore& keystore,
                  const crypto::Digest256& job_digest) {
  if (std::memcmp(digest.data(), job_digest.data(), 32) != 0) {
    return PermissionDenied(path + ": checkpoint of another job (job sha256 " + HexEncode(digest) + ", this job " +
                            HexEncode(job_digest) + ")");
  }
  if (!std::equal(keystore_id.begin(), keystore_id.end(), keystore.id().begin())) {
    return NotFound(path + ": checkpoint sealed with another keystore (" + HexEncode(keystore_id) + ")");
  }
  return OkStatus();
}

Result<crypto::SecretBytes> KeyOf(const crypto::Keystore& keystore, ByteSpan key_id) {
  crypto::Id128 kid{};
  std::copy(key_id.begin(), key_id.end(), kid.begin());
  return keystore.GetDataKey(kCheckpointKeyId, kid);
}

double LoadF64(ByteReader& r, const char* field, Status* st) {
  uint64_t u = 0;
  *st = r.U64(field, &u);
  double v;
  std::memcpy(&v, &u, 8);
  return v;
}

template <typename T>
Status ReadArray(ByteReader& r, const char* field, size_t n, LockedArray<T>* out) {
  if (n > r.remaining() / 4) return InvalidInput(std::string("checkpoint state: ") + field + " does not fit");
  ByteSpan raw;
  RETURN_IF_ERROR(r.Bytes(field, n * 4, &raw));
  ASSIGN_OR_RETURN(*out, LockedArray<T>::Create(n));
  for (size_t i = 0; i < n; ++i) (*out)[i] = LoadLe32As<T>(raw.data() + 4 * i);
  return OkStatus();
}

bool IsCheckpointName(const std::string& name, uint64_t* step) {
  // step-<12 digits>.ckpt
  if (name.size() != 22 || name.compare(0, 5, "step-") != 0 || name.compare(17, 5, ".ckpt") != 0) return false;
  uint64_t v = 0;
  for (size_t i = 5; i < 17; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *step = v;
  return true;
}

Result<std::vector<std::pair<uint64_t, std::string>>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    return IoError("listing " + dir + ": " + ec.message());
  }
  for (const auto& e : it) {
    uint64_t step = 0;
    if (e.is_regular_file() && IsCheckpointName(e.path().filename().string(), &step)) {
      out.emplace_back(step, e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<CheckpointKey> CheckpointKeyFromKeystore(crypto::Keystore& keystore, bool create) {
  CheckpointKey k;
  k.keystore_id = keystore.id();
  const crypto::DataKeyEntry* found = nullptr;
  for (const crypto::DataKeyEntry& e : keystore.entries()) {
    if (e.dataset_id == kCheckpointKeyId) found = &e;  // the newest (entries are in creation order)
  }
  if (found != nullptr) {
    k.key_id = found->key_id;
    ASSIGN_OR_RETURN(k.key, keystore.GetDataKey(kCheckpointKeyId, found->key_id));
    return k;
  }
  if (!create) return NotFound(std::string("the keystore has no checkpoint key ('") + kCheckpointKeyId + "')");
  ASSIGN_OR_RETURN(k.key, keystore.CreateDataKey(kCheckpointKeyId, crypto::Suite::kAes256Gcm, &k.key_id));
  return k;
}

uint64_t TrainStateBytes(size_t hidden_layers, size_t features, size_t params, size_t moment_floats,
                         uint64_t train_rows, size_t epochs) {
  return 4 + 4 + 4 + 4 + 4 * uint64_t{hidden_layers} + 8 * 4 + 4 + 8 + 8 + 8 * 4 + 4 + kEpochBytes * uint64_t{epochs} +
         4 * train_rows + 8 * uint64_t{features} + 8 + 4 * (uint64_t{params} + moment_floats) + 1;
}

Status CheckpointsFit(const ModelShape& shape, uint64_t train_rows, bool adamw, uint32_t epochs) {
  const size_t P = shape.parameter_count();
  const uint64_t bytes = TrainStateBytes(shape.hidden.size(), shape.inputs, P, adamw ? 2 * P : P, train_rows, epochs);
  if (bytes <= kMaxCheckpointStateBytes) return OkStatus();
  return InvalidInput("checkpoints: the training state of this job is " + std::to_string(bytes) +
                      " bytes (" + std::to_string(P) + " parameters" + (adamw ? " and AdamW's two moments" : "") +
                      "), more than a checkpoint holds (" + std::to_string(kMaxCheckpointStateBytes) +
                      "): use a smaller model, or no [checkpoint]");
}

namespace {

// The encoding up to and including the row order (EncodeTrainState's first part); the
// arrays follow: mean and inv_std (F each), u64 P, params, moment1 (P each), moment2 (P
// or none), then the end marker.
Result<crypto::SecretBytes> EncodeStateHead(const TrainState& st) {
  const size_t H = st.shape.hidden.size();
  const uint64_t bytes = 4 + 4 + 4 + 4 + 4 * uint64_t{H} + 8 * 4 + 4 + 8 + 8 + 8 * 4 + 4 +
                         kEpochBytes * uint64_t{st.epochs.size()} + 4 * uint64_t{st.order.size()};
  if (bytes > kMaxCheckpointStateBytes) return InvalidInput("checkpoint state larger than a checkpoint holds");
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(static_cast<size_t>(bytes)));
  LeCursor c(out.ExposeSecretMutable());
  c.Le(kStateVersion, 4);
  c.Le(st.shape.inputs, 4);
  c.Le(st.shape.classes, 4);
  c.Le(static_cast<uint8_t>(st.shape.activation), 1);
  c.Le(H, 1);
  c.Le(st.optimizer == OptimizerKind::kAdamW ? 1 : 0, 1);
  c.Le(st.optimizer == OptimizerKind::kAdamW ? 1 : 0, 1);  // has_moment2: AdamW's second moment
  for (uint32_t h : st.shape.hidden) c.Le(h, 4);
  c.Le(st.train_rows, 8);
  c.Le(st.val_rows, 8);
  c.Le(st.steps_per_epoch, 8);
  c.Le(st.step, 8);
  c.Le(st.epoch, 4);
  c.Le(st.batch, 8);
  c.F64(st.loss_sum);
  for (uint64_t v : st.shuffle_rng) c.Le(v, 8);
  c.Le(st.epochs.size(), 4);
  for (const EpochMetrics& m : st.epochs) {
    c.Le(m.epoch, 4);
    for (double v : {m.lr, m.train_loss, m.val_loss, m.val_accuracy, m.val_auc, m.seconds}) c.F64(v);
  }
  c.Array32(st.order.data(), st.order.size());
  if (c.pos() != bytes) return Internal("EncodeStateHead: size mismatch");
  return out;
}

constexpr uint8_t kStateEnd = 0xA5;  // end marker: a decoder that lost count fails here, not silently

std::array<uint8_t, 8> U64Le(uint64_t v) {
  std::array<uint8_t, 8> b{};
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

}  // namespace

Result<crypto::SecretBytes> EncodeTrainState(const TrainState& st) {
  const size_t F = st.shape.inputs, P = st.shape.parameter_count(), H = st.shape.hidden.size();
  const bool adamw = st.optimizer == OptimizerKind::kAdamW;
  if (st.mean.size() != F || st.inv_std.size() != F || st.params.size() != P || st.moment1.size() != P ||
      st.moment2.size() != (adamw ? P : 0) || st.order.size() != st.train_rows || H > 16) {
    return Internal("EncodeTrainState: inconsistent state");
  }
  const uint64_t total64 = TrainStateBytes(H, F, P, st.moment1.size() + st.moment2.size(), st.order.size(),
                                           st.epochs.size());
  if (total64 > kMaxCheckpointStateBytes) return InvalidInput("checkpoint state larger than a checkpoint holds");
  const size_t total = static_cast<size_t>(total64);
  ASSIGN_OR_RETURN(crypto::SecretBytes head, EncodeStateHead(st));
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(total));
  LeCursor c(out.ExposeSecretMutable());
  c.Raw(head.ExposeSecret().data(), head.size());
  c.Array32(st.mean.data(), F);
  c.Array32(st.inv_std.data(), F);
  c.Le(P, 8);
  c.Array32(st.params.data(), P);
  c.Array32(st.moment1.data(), P);
  c.Array32(st.moment2.data(), st.moment2.size());
  c.Le(kStateEnd, 1);
  if (c.pos() != total) return Internal("EncodeTrainState: size mismatch");
  return out;
}

Result<TrainState> DecodeTrainState(ByteSpan bytes) {
  ByteReader r(bytes);
  TrainState st;
  uint32_t version = 0, epochs = 0;
  uint8_t act = 0, nh = 0, opt = 0, has_m2 = 0, end = 0;
  RETURN_IF_ERROR(r.U32("state_version", &version));
  if (version != kStateVersion) return Unsupported("checkpoint state version " + std::to_string(version));
  RETURN_IF_ERROR(r.U32("inputs", &st.shape.inputs));
  RETURN_IF_ERROR(r.U32("classes", &st.shape.classes));
  RETURN_IF_ERROR(r.U8("activation", &act));
  RETURN_IF_ERROR(r.U8("hidden_count", &nh));
  RETURN_IF_ERROR(r.U8("optimizer", &opt));
  RETURN_IF_ERROR(r.U8("has_moment2", &has_m2));
  if (st.shape.inputs < 1 || st.shape.inputs > (1u << 20) || st.shape.classes == 1 || st.shape.classes > (1u << 16) ||
      act < kernels::kActRelu || act > kernels::kActSigmoid || nh > 16 || opt > 1 || has_m2 != opt) {
    return InvalidInput("checkpoint state: bad shape or optimizer fields");
  }
  st.shape.activation = static_cast<Activation>(act);
  st.optimizer = opt == 1 ? OptimizerKind::kAdamW : OptimizerKind::kSgd;
  for (uint8_t i = 0; i < nh; ++i) {
    uint32_t h = 0;
    RETURN_IF_ERROR(r.U32("hidden", &h));
    if (h < 1 || h > 65536) return InvalidInput("checkpoint state: hidden size out of range");
    st.shape.hidden.push_back(h);
  }
  RETURN_IF_ERROR(r.U64("train_rows", &st.train_rows));
  RETURN_IF_ERROR(r.U64("val_rows", &st.val_rows));
  RETURN_IF_ERROR(r.U64("steps_per_epoch", &st.steps_per_epoch));
  RETURN_IF_ERROR(r.U64("step", &st.step));
  RETURN_IF_ERROR(r.U32("epoch", &st.epoch));
  RETURN_IF_ERROR(r.U64("batch", &st.batch));
  Status s;
  st.loss_sum = LoadF64(r, "loss_sum", &s);
  RETURN_IF_ERROR(s);
  for (uint64_t& v : st.shuffle_rng) RETURN_IF_ERROR(r.U64("shuffle_rng", &v));
  RETURN_IF_ERROR(r.U32("epoch_count", &epochs));
  if (epochs > r.remaining() / kEpochBytes) return InvalidInput("checkpoint state: epoch count does not fit");
  for (uint32_t i = 0; i < epochs; ++i) {
    EpochMetrics m;
    RETURN_IF_ERROR(r.U32("epochs.epoch", &m.epoch));
    for (double* v : {&m.lr, &m.train_loss, &m.val_loss, &m.val_accuracy, &m.val_auc, &m.seconds}) {
      *v = LoadF64(r, "epochs.value", &s);
      RETURN_IF_ERROR(s);
    }
    st.epochs.push_back(m);
  }
  RETURN_IF_ERROR(ReadArray(r, "order", st.train_rows, &st.order));
  RETURN_IF_ERROR(ReadArray(r, "mean", st.shape.inputs, &st.mean));
  RETURN_IF_ERROR(ReadArray(r, "inv_std", st.shape.inputs, &st.inv_std));
  uint64_t p = 0;
  RETURN_IF_ERROR(r.U64("parameter_count", &p));
  if (p != st.shape.parameter_count()) return InvalidInput("checkpoint state: parameter count does not match the shape");
  RETURN_IF_ERROR(ReadArray(r, "params", p, &st.params));
  RETURN_IF_ERROR(ReadArray(r, "moment1", p, &st.moment1));
  if (has_m2) RETURN_IF_ERROR(ReadArray(r, "moment2", p, &st.moment2));
  RETURN_IF_ERROR(r.U8("end", &end));
  if (end != 0xA5 || r.remaining() != 0) return InvalidInput("checkpoint state: bad end");
  return st;
}

namespace {

// Version 2's 128-byte header (docs/training.md#checkpoints).
struct HeaderV2 {
  crypto::Id128 keystore_id{}, key_id{};
  crypto::Digest256 job_digest{};
  uint64_t step = 0;
  std::array<uint8_t, kSaltBytes> salt{};
  uint32_t chunk_size = kCheckpointChunkBytes;
  uint64_t length = 0;
  uint64_t ChunkCount() const { return length == 0 ? 1 : (length + chunk_size - 1) / chunk_size; }
  uint64_t FileSize() const { return kCheckpointHeaderBytes + length + crypto::kAeadTagBytes * ChunkCount(); }
};

std::vector<uint8_t> EncodeHeaderV2(const HeaderV2& h) {
  ByteWriter w;
  w.Bytes(std::string_view(kCheckpointMagic, sizeof(kCheckpointMagic)));
  w.U16(kCheckpointVersion);
  w.U16(static_cast<uint16_t>(crypto::Suite::kAes256Gcm));
  w.Bytes(h.keystore_id);
  w.Bytes(h.key_id);
  w.Bytes(h.job_digest);
  w.U64(h.step);
  w.Bytes(h.salt);
  w.U32(h.chunk_size);
  w.U64(h.length);
  return w.bytes();
}

// The file's chunk geometry for the sealing code of kernels/ (chunk_open.h).
kernels::ChunkBatch CheckpointChunks(const HeaderV2& h, const crypto::Digest256& header_digest) {
  kernels::ChunkBatch file;
  file.suite = crypto::Suite::kAes256Gcm;
  file.file_chunk_count = h.ChunkCount();
  file.chunk_size = h.chunk_size;
  file.payload_length = h.length;
  std::copy(header_digest.begin(), header_digest.end(), file.header_digest.begin());
  return file;
}

// Each chunk of a batch sealed with OpenSSL from host memory (`plain` is the whole payload).
Status SealChunksOnHost(crypto::Aead& aead, const kernels::ChunkBatch& batch, const uint8_t* plain,
                        uint8_t* sealed_out) {
  for (uint64_t i = batch.first_index; i < batch.first_index + batch.count; ++i) {
    const uint64_t n = batch.PlaintextSize(i);
    RETURN_IF_ERROR(aead.Seal(crypto::ChunkNonce(i, i + 1 == batch.file_chunk_count), batch.header_digest,
                              ByteSpan(plain + i * uint64_t{batch.chunk_size}, n),
                              std::span<uint8_t>(sealed_out + batch.InputOffset(i), n + crypto::kAeadTagBytes)));
  }
  return OkStatus();
}

constexpr uint64_t kSealBatchBytes = uint64_t{64} << 20;

// Writes a version 2 checkpoint of the `length`-byte encoded state at `image`: host memory,
// or device memory when `on_gpu` (sealed there).
Status SealCheckpoint(const CheckpointKey& key, const crypto::Digest256& job_digest, uint64_t step,
                      const uint8_t* image, uint64_t length, bool on_gpu, const std::string& path) {
  HeaderV2 h;
  h.keystore_id = key.keystore_id;
  h.key_id = key.key_id;
  h.job_digest = job_digest;
  h.step = step;
  h.length = length;
  crypto::RandomBytes(h.salt);
  const std::vector<uint8_t> header = EncodeHeaderV2(h);
  if (header.size() != kCheckpointHeaderBytes) return Internal("checkpoint header size");
  const crypto::Digest256 header_digest = crypto::Sha256(header);
  ASSIGN_OR_RETURN(crypto::SecretBytes file_key, FileKey(key.key, kKdfInfoV2, h.salt, job_digest));
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, true));
  RETURN_IF_ERROR(out.Write(header.data(), header.size()));
  const kernels::ChunkBatch file = CheckpointChunks(h, header_digest);
  auto write = [&](ByteSpan sealed) { return out.Write(sealed.data(), sealed.size()); };
  if (on_gpu) {
    RETURN_IF_ERROR(kernels::SealDeviceChunks(file_key, file, image, write));
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<crypto::Aead> aead, crypto::Aead::Create(crypto::Suite::kAes256Gcm, file_key));
    RETURN_IF_ERROR(kernels::SealInBatches(
        file, kSealBatchBytes,
        [&](const kernels::ChunkBatch& batch, uint8_t* sealed_out) {
          return SealChunksOnHost(*aead, batch, image, sealed_out);
        },
        write));
  }
  return out.Commit();
}

}  // namespace

Status WriteCheckpoint(const CheckpointKey& key, const crypto::Digest256& job_digest, const TrainState& state,
                       const std::string& path) {
  ASSIGN_OR_RETURN(crypto::SecretBytes plain, EncodeTrainState(state));
  return SealCheckpoint(key, job_digest, state.step, plain.ExposeSecret().data(), plain.size(), /*on_gpu=*/false,
                        path);
}

namespace {

// Sizes of the resident arrays against the host part's shape.
Status CheckResident(const ResidentTrainState& state) {
  const TrainState& st = state.host;
  const size_t F = st.shape.inputs, P = st.shape.parameter_count();
  const bool adamw = st.optimizer == OptimizerKind::kAdamW;
  if (state.backend == nullptr || state.mean.size < F || state.inv_std.size < F || state.params.size < P ||
      state.moment1.size < P || (adamw ? state.moment2.size < P : !state.moment2.empty()) || !st.params.empty() ||
      st.order.size() != st.train_rows || st.shape.hidden.size() > 16) {
    return Internal("checkpoint: inconsistent resident state");
  }
  return OkStatus();
}

}  // namespace

Result<TrainState> DownloadTrainState(const ResidentTrainState& state) {
  RETURN_IF_ERROR(CheckResident(state));
  const TrainState& h = state.host;
  const size_t F = h.shape.inputs, P = h.shape.parameter_count();
  Backend& backend = *state.backend;
  TrainState st;
  st.shape = h.shape;
  st.optimizer = h.optimizer;
  st.train_rows = h.train_rows;
  st.val_rows = h.val_rows;
  st.steps_per_epoch = h.steps_per_epoch;
  st.step = h.step;
  st.epoch = h.epoch;
  st.batch = h.batch;
  st.loss_sum = h.loss_sum;
  std::copy(std::begin(h.shuffle_rng), std::end(h.shuffle_rng), std::begin(st.shuffle_rng));
  ASSIGN_OR_RETURN(st.order, h.order.Clone());
  st.epochs = h.epochs;
  auto download = [&](Buffer src, size_t n, LockedArray<float>* out) -> Status {
    ASSIGN_OR_RETURN(*out, LockedArray<float>::Create(n));
    return backend.Download(out->data(), src, n);
  };
  RETURN_IF_ERROR(download(state.mean, F, &st.mean));
  RETURN_IF_ERROR(download(state.inv_std, F, &st.inv_std));
  RETURN_IF_ERROR(download(state.params, P, &st.params));
  RETURN_IF_ERROR(download(state.moment1, P, &st.moment1));
  if (h.optimizer == OptimizerKind::kAdamW) RETURN_IF_ERROR(download(state.moment2, P, &st.moment2));
  return st;
}

Status WriteCheckpoint(const CheckpointKey& key, const crypto::Digest256& job_digest, const ResidentTrainState& state,
                       const std::string& path) {
  RETURN_IF_ERROR(CheckResident(state));
  Backend& backend = *state.backend;
  const TrainState& st = state.host;
  const size_t F = st.shape.inputs, P = st.shape.parameter_count(), H = st.shape.hidden.size();
  const bool adamw = st.optimizer == OptimizerKind::kAdamW;
  const uint64_t total = TrainStateBytes(H, F, P, adamw ? 2 * P : P, st.order.size(), st.epochs.size());
  if (total > kMaxCheckpointStateBytes) return InvalidInput("checkpoint state larger than a checkpoint holds");
  ASSIGN_OR_RETURN(const crypto::SecretBytes head, EncodeStateHead(st));
  // The encoding in backend memory (zeroized when freed, like every backend buffer).
  ASSIGN_OR_RETURN(OwnedBuffer image, AllocOwned(backend, (total + sizeof(float) - 1) / sizeof(float)));
  size_t at = 0;
  auto bytes = [&](const uint8_t* p, size_t n) {
    Status s = backend.UploadBytes(image, at, p, n);
    at += n;
    return s;
  };
  auto floats = [&](Buffer src, size_t n) {
    Status s = backend.CopyToBytes(image, at, src, n);
    at += n * sizeof(float);
    return s;
  };
  const std::array<uint8_t, 8> p_le = U64Le(P);
  RETURN_IF_ERROR(bytes(head.ExposeSecret().data(), head.size()));
  RETURN_IF_ERROR(floats(state.mean, F));
  RETURN_IF_ERROR(floats(state.inv_std, F));
  RETURN_IF_ERROR(bytes(p_le.data(), p_le.size()));
  RETURN_IF_ERROR(floats(state.params, P));
  RETURN_IF_ERROR(floats(state.moment1, P));
  if (adamw) RETURN_IF_ERROR(floats(state.moment2, P));
  RETURN_IF_ERROR(bytes(&kStateEnd, 1));
  if (at != total) return Internal("WriteCheckpoint: state size mismatch");
  const bool on_gpu = std::string_view(backend.kind()) == "gpu";
  if (on_gpu) RETURN_IF_ERROR(backend.Synchronize());  // the copies run on the backend's stream
  return SealCheckpoint(key, job_digest, st.step, reinterpret_cast<const uint8_t*>(image.get().data), total, on_gpu,
                        path);
}

namespace {

// Version 1: one AEAD message after a 136-byte header (read only). On success *plain
// holds the state's encoding.
Status OpenV1(const std::string& path, const std::vector<uint8_t>& file, const crypto::Keystore& keystore,
              const crypto::Digest256& job_digest, uint64_t* step, crypto::SecretBytes* plain) {
  if (file.size() < kCheckpointV1HeaderBytes) return InvalidInput(path + ": not a usable checkpoint: shorter than its header");
  ByteReader r(ByteSpan(file).first(kCheckpointV1HeaderBytes));
  ByteSpan skip, keystore_id, key_id, digest, salt, nonce;
  uint16_t version = 0, suite_wire = 0;
  uint64_t length = 0;
  RETURN_IF_ERROR(r.Bytes("magic", 8, &skip));
  RETURN_IF_ERROR(r.U16("version", &version));
  RETURN_IF_ERROR(r.U16("suite", &suite_wire));
  ASSIGN_OR_RETURN(crypto::Suite suite, crypto::SuiteFromWire(suite_wire));
  RETURN_IF_ERROR(r.Bytes("keystore_id", 16, &keystore_id));
  RETURN_IF_ERROR(r.Bytes("key_id", 16, &key_id));
  RETURN_IF_ERROR(r.Bytes("job_digest", 32, &digest));
  RETURN_IF_ERROR(r.U64("step", step));
  RETURN_IF_ERROR(r.Bytes("salt", kSaltBytes, &salt));
  RETURN_IF_ERROR(r.Bytes("nonce", crypto::kAeadNonceBytes, &nonce));
  RETURN_IF_ERROR(r.U64("payload_length", &length));
  if (length > kMaxStateBytes || file.size() != kCheckpointV1HeaderBytes + length + crypto::kAeadTagBytes) {
    return AuthFailed(path + ": checkpoint size does not match its header (truncated or extended)");
  }
  RETURN_IF_ERROR(CheckOwner(path, digest, keystore_id, keystore, job_digest));
  ASSIGN_OR_RETURN(crypto::SecretBytes key, KeyOf(keystore, key_id));
  ASSIGN_OR_RETURN(crypto::SecretBytes file_key, FileKey(key, kKdfInfo, salt, job_digest));
  ASSIGN_OR_RETURN(std::unique_ptr<crypto::Aead> aead, crypto::Aead::Create(suite, file_key));
  ASSIGN_OR_RETURN(*plain, crypto::SecretBytes::Create(length));
  Status opened = aead->Open(nonce, ByteSpan(file).first(kCheckpointV1HeaderBytes),
                             ByteSpan(file).subspan(kCheckpointV1HeaderBytes), plain->ExposeSecretMutable());
  if (!opened.ok()) return AuthFailed(path + ": checkpoint failed authentication (tampered or damaged)");
  return OkStatus();
}

Status OpenV2(const std::string& path, const std::vector<uint8_t>& file, const crypto::Keystore& keystore,
              const crypto::Digest256& job_digest, uint64_t* step, crypto::SecretBytes* plain) {
  if (file.size() < kCheckpointHeaderBytes) return InvalidInput(path + ": not a usable checkpoint: shorter than its header");
  const ByteSpan header = ByteSpan(file).first(kCheckpointHeaderBytes);
  ByteReader r(header);
  ByteSpan skip, keystore_id, key_id, digest, salt;
  uint16_t version = 0, suite_wire = 0;
  HeaderV2 h;
  RETURN_IF_ERROR(r.Bytes("magic", 8, &skip));
  RETURN_IF_ERROR(r.U16("version", &version));
  RETURN_IF_ERROR(r.U16("suite", &suite_wire));
  if (suite_wire != static_cast<uint16_t>(crypto::Suite::kAes256Gcm)) {
    return Unsupported(path + ": checkpoint suite " + std::to_string(suite_wire) + " (version 2 has AES-256-GCM only)");
  }
  RETURN_IF_ERROR(r.Bytes("keystore_id", 16, &keystore_id));
  RETURN_IF_ERROR(r.Bytes("key_id", 16, &key_id));
  RETURN_IF_ERROR(r.Bytes("job_digest", 32, &digest));
  RETURN_IF_ERROR(r.U64("step", &h.step));
  RETURN_IF_ERROR(r.Bytes("salt", kSaltBytes, &salt));
  RETURN_IF_ERROR(r.U32("chunk_size", &h.chunk_size));
  RETURN_IF_ERROR(r.U64("payload_length", &h.length));
  if (h.chunk_size < 4096 || h.chunk_size > crypto::kMaxChunkBytes) {
    return AuthFailed(path + ": checkpoint chunk size " + std::to_string(h.chunk_size) + " outside 4096..2^30");
  }
  if (h.length > kMaxStateBytes || file.size() != h.FileSize()) {
    return AuthFailed(path + ": checkpoint size does not match its header (truncated or extended)");
  }
  RETURN_IF_ERROR(CheckOwner(path, digest, keystore_id, keystore, job_digest));
  ASSIGN_OR_RETURN(crypto::SecretBytes key, KeyOf(keystore, key_id));
  std::copy(salt.begin(), salt.end(), h.salt.begin());
  ASSIGN_OR_RETURN(crypto::SecretBytes file_key, FileKey(key, kKdfInfoV2, salt, job_digest));
  ASSIGN_OR_RETURN(std::unique_ptr<crypto::Aead> aead, crypto::Aead::Create(crypto::Suite::kAes256Gcm, file_key));
  const crypto::Digest256 header_digest = crypto::Sha256(header);
  const kernels::ChunkBatch chunks = CheckpointChunks(h, header_digest);
  ASSIGN_OR_RETURN(*plain, crypto::SecretBytes::Create(h.length));
  for (uint64_t i = 0; i < chunks.file_chunk_count; ++i) {
    const uint64_t n = chunks.PlaintextSize(i);
    const ByteSpan sealed = ByteSpan(file).subspan(kCheckpointHeaderBytes + i * (uint64_t{h.chunk_size} + 16), n + 16);
    Status opened = aead->Open(crypto::ChunkNonce(i, i + 1 == chunks.file_chunk_count), header_digest, sealed,
                               plain->ExposeSecretMutable().subspan(i * uint64_t{h.chunk_size}, n));
    if (!opened.ok()) {
      *plain = crypto::SecretBytes();
      return AuthFailed(path + ": checkpoint chunk " + std::to_string(i) + " failed authentication (tampered or damaged)");
    }
  }
  *step = h.step;
  return OkStatus();
}

}  // namespace

Result<TrainState> ReadCheckpoint(const std::string& path, const crypto::Keystore& keystore,
                                  const crypto::Digest256& job_digest) {
  // The largest file either version allows: version 2's tags are 16 bytes per chunk of
  // at least 4096 bytes.
  ASSIGN_OR_RETURN(std::vector<uint8_t> file,
                   ReadWholeFile(path, kCheckpointV1HeaderBytes + kMaxStateBytes + (kMaxStateBytes >> 8) + 16));
  if (file.size() < 10) return InvalidInput(path + ": not a usable checkpoint: shorter than its header");
  if (std::memcmp(file.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0) {
    return InvalidInput(path + ": not a usable checkpoint: magic is not ENCLCKPT");
  }
  const uint16_t version = static_cast<uint16_t>(file[8] | file[9] << 8);
  uint64_t step = 0;
  crypto::SecretBytes plain;
  if (version == 1) {
    RETURN_IF_ERROR(OpenV1(path, file, keystore, job_digest, &step, &plain));
  } else if (version == 2) {
    RETURN_IF_ERROR(OpenV2(path, file, keystore, job_digest, &step, &plain));
  } else {
    return Unsupported(path + ": checkpoint version " + std::to_string(version));
  }
  Result<TrainState> st = DecodeTrainState(plain.ExposeSecret());
  if (!st.ok()) return st.status().Annotate(path);
  if (st->step != step) return InvalidInput(path + ": checkpoint header and state disagree on the step");
  // LatestCheckpoint picks by name: a name that is not the authenticated step is a file
  // renamed to pose as another (an older state as the newest).
  uint64_t named = 0;
  if (IsCheckpointName(std::filesystem::path(path).filename().string(), &named) && named != step) {
    return AuthFailed(path + ": named for step " + std::to_string(named) + " but holds the authenticated state of step " +
                      std::to_string(step) + " (renamed)");
  }
  return st;
}

std::string CheckpointPath(const std::string& dir, uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%012llu.ckpt", static_cast<unsigned long long>(step));
  return (std::filesystem::path(dir) / name).string();
}

Result<std::string> LatestCheckpoint(const std::string& dir) {
  ASSIGN_OR_RETURN(auto list, ListCheckpoints(dir));
  if (list.empty()) return NotFound("no checkpoint to resume from in " + dir);
  return list.back().second;
}

Status PruneCheckpoints(const std::string& dir, uint32_t keep) {
  ASSIGN_OR_RETURN(auto list, ListCheckpoints(dir));
  for (size_t i = 0; i + keep < list.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(list[i].second, ec);
    if (ec) return IoError("removing old checkpoint " + list[i].second + ": " + ec.message());
  }
  return OkStatus();
}

}  // namespace enclave::trainer
