#include "enclave/trainer/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/crypto/aead.h"
#include "le_cursor.h"

namespace enclave::trainer {
namespace {

constexpr uint32_t kStateVersion = 1;
constexpr char kKdfInfo[] = "enclave-train checkpoint v1";
constexpr size_t kSaltBytes = 32;
constexpr size_t kMaxStateBytes = size_t{16} << 30;
constexpr size_t kEpochBytes = 4 + 6 * 8;

// The per-file key: HKDF-SHA256(checkpoint key, salt = file salt || job digest).
Result<std::unique_ptr<crypto::Aead>> FileAead(const crypto::SecretBytes& key, crypto::Suite suite,
                                               ByteSpan salt, const crypto::Digest256& job_digest) {
  std::vector<uint8_t> s(salt.begin(), salt.end());
  s.insert(s.end(), job_digest.begin(), job_digest.end());
  ASSIGN_OR_RETURN(crypto::SecretBytes k, crypto::HkdfSha256(key, s, kKdfInfo, crypto::kAeadKeyBytes));
  return crypto::Aead::Create(suite, k);
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

Result<crypto::SecretBytes> EncodeTrainState(const TrainState& st) {
  const size_t F = st.shape.inputs, P = st.shape.parameter_count(), H = st.shape.hidden.size();
  if (st.mean.size() != F || st.inv_std.size() != F || st.params.size() != P || st.moment1.size() != P ||
      st.order.size() != st.train_rows || H > 16) {
    return Internal("EncodeTrainState: inconsistent state");
  }
  const uint64_t total64 = TrainStateBytes(H, F, P, st.moment1.size() + st.moment2.size(), st.order.size(),
                                           st.epochs.size());
  if (total64 > kMaxCheckpointStateBytes) return InvalidInput("checkpoint state larger than a checkpoint holds");
  const size_t total = static_cast<size_t>(total64);
  ASSIGN_OR_RETURN(crypto::SecretBytes out, crypto::SecretBytes::Create(total));
  LeCursor c(out.ExposeSecretMutable());
  c.Le(kStateVersion, 4);
  c.Le(st.shape.inputs, 4);
  c.Le(st.shape.classes, 4);
  c.Le(static_cast<uint8_t>(st.shape.activation), 1);
  c.Le(H, 1);
  c.Le(st.optimizer == OptimizerKind::kAdamW ? 1 : 0, 1);
  c.Le(st.moment2.empty() ? 0 : 1, 1);
  for (uint32_t h : st.shape.hidden) c.Le(h, 4);
  c.Le(st.train_rows, 8);
  c.Le(st.val_rows, 8);
  c.Le(st.steps_per_epoch, 8);
  c.Le(st.step, 8);
  c.Le(st.epoch, 4);
  c.Le(st.batch, 8);
  c.F64(st.loss_sum);
  for (uint64_t s : st.shuffle_rng) c.Le(s, 8);
  c.Le(st.epochs.size(), 4);
  for (const EpochMetrics& m : st.epochs) {
    c.Le(m.epoch, 4);
    for (double v : {m.lr, m.train_loss, m.val_loss, m.val_accuracy, m.val_auc, m.seconds}) c.F64(v);
  }
  c.Array32(st.order.data(), st.order.size());
  c.Array32(st.mean.data(), F);
  c.Array32(st.inv_std.data(), F);
  c.Le(P, 8);
  c.Array32(st.params.data(), P);
  c.Array32(st.moment1.data(), P);
  c.Array32(st.moment2.data(), st.moment2.size());
  c.Le(0xA5, 1);  // end marker: a decoder that lost count fails here, not silently
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

Status WriteCheckpoint(const CheckpointKey& key, const crypto::Digest256& job_digest, const TrainState& state,
                       const std::string& path) {
  ASSIGN_OR_RETURN(crypto::SecretBytes plain, EncodeTrainState(state));
  std::array<uint8_t, kSaltBytes> salt{};
  std::array<uint8_t, crypto::kAeadNonceBytes> nonce{};
  crypto::RandomBytes(salt);
  crypto::RandomBytes(nonce);
  ByteWriter h;
  h.Bytes(std::string_view(kCheckpointMagic, sizeof(kCheckpointMagic)));
  h.U16(kCheckpointVersion);
  h.U16(static_cast<uint16_t>(crypto::Suite::kAes256Gcm));
  h.Bytes(key.keystore_id);
  h.Bytes(key.key_id);
  h.Bytes(job_digest);
  h.U64(state.step);
  h.Bytes(salt);
  h.Bytes(nonce);
  h.U64(plain.size());
  if (h.size() != kCheckpointHeaderBytes) return Internal("checkpoint header size");
  ASSIGN_OR_RETURN(std::unique_ptr<crypto::Aead> aead, FileAead(key.key, crypto::Suite::kAes256Gcm, salt, job_digest));
  std::vector<uint8_t> sealed(plain.size() + crypto::kAeadTagBytes);
  RETURN_IF_ERROR(aead->Seal(nonce, h.bytes(), plain.ExposeSecret(), sealed));
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, true));
  RETURN_IF_ERROR(out.Write(h.bytes().data(), h.size()));
  RETURN_IF_ERROR(out.Write(sealed.data(), sealed.size()));
  return out.Commit();
}

Result<TrainState> ReadCheckpoint(const std::string& path, const crypto::Keystore& keystore,
                                  const crypto::Digest256& job_digest) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> file, ReadWholeFile(path, kCheckpointHeaderBytes + kMaxStateBytes + 16));
  auto bad = [&](const std::string& what) { return InvalidInput(path + ": not a usable checkpoint: " + what); };
  if (file.size() < kCheckpointHeaderBytes) return bad("shorter than its header");
  if (std::memcmp(file.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0) return bad("magic is not ENCLCKPT");
  ByteReader r(ByteSpan(file).first(kCheckpointHeaderBytes));
  ByteSpan skip, keystore_id, key_id, digest, salt, nonce;
  uint16_t version = 0, suite_wire = 0;
  uint64_t step = 0, length = 0;
  RETURN_IF_ERROR(r.Bytes("magic", 8, &skip));
  RETURN_IF_ERROR(r.U16("version", &version));
  if (version != kCheckpointVersion) return Unsupported(path + ": checkpoint version " + std::to_string(version));
  RETURN_IF_ERROR(r.U16("suite", &suite_wire));
  ASSIGN_OR_RETURN(crypto::Suite suite, crypto::SuiteFromWire(suite_wire));
  RETURN_IF_ERROR(r.Bytes("keystore_id", 16, &keystore_id));
  RETURN_IF_ERROR(r.Bytes("key_id", 16, &key_id));
  RETURN_IF_ERROR(r.Bytes("job_digest", 32, &digest));
  RETURN_IF_ERROR(r.U64("step", &step));
  RETURN_IF_ERROR(r.Bytes("salt", kSaltBytes, &salt));
  RETURN_IF_ERROR(r.Bytes("nonce", crypto::kAeadNonceBytes, &nonce));
  RETURN_IF_ERROR(r.U64("payload_length", &length));
  if (length > kMaxStateBytes || file.size() != kCheckpointHeaderBytes + length + crypto::kAeadTagBytes) {
    return AuthFailed(path + ": checkpoint size does not match its header (truncated or extended)");
  }
  if (std::memcmp(digest.data(), job_digest.data(), 32) != 0) {
    return PermissionDenied(path + ": checkpoint of another job (job sha256 " + HexEncode(digest) + ", this job " +
                            HexEncode(job_digest) + ")");
  }
  if (!std::equal(keystore_id.begin(), keystore_id.end(), keystore.id().begin())) {
    return NotFound(path + ": checkpoint sealed with another keystore (" + HexEncode(keystore_id) + ")");
  }
  crypto::Id128 kid{};
  std::copy(key_id.begin(), key_id.end(), kid.begin());
  ASSIGN_OR_RETURN(crypto::SecretBytes key, keystore.GetDataKey(kCheckpointKeyId, kid));
  ASSIGN_OR_RETURN(std::unique_ptr<crypto::Aead> aead, FileAead(key, suite, salt, job_digest));
  ASSIGN_OR_RETURN(crypto::SecretBytes plain, crypto::SecretBytes::Create(length));
  Status opened = aead->Open(nonce, ByteSpan(file).first(kCheckpointHeaderBytes),
                             ByteSpan(file).subspan(kCheckpointHeaderBytes), plain.ExposeSecretMutable());
  if (!opened.ok()) return AuthFailed(path + ": checkpoint failed authentication (tampered or damaged)");
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
