// enclave._enclave: the attested job session and sealed datasets for Python (docs/pytorch.md).
//
// Keys never become Python objects: the keystore (development mode) or the broker's
// release (attested mode) lives in this module's C++ objects, in locked memory. Records
// are authenticated and decrypted into locked memory too, and Python reaches them only as
// DLPack tensors over that memory (zero copy: torch.from_dlpack, JAX and CuPy take them).
// When the session ends (close(), lease end or revocation) every buffer it handed out is
// wiped in place and every later call raises.
#include <dlfcn.h>
#ifdef ENCLAVE_PY_CUDA
#include <cuda_runtime_api.h>
#endif
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/model_export.h"
#include "enclave/crypto/secret_bytes.h"
#include "enclave/dataset/schema.h"
#include "enclave/dataset/sealed_dataset.h"
#include "enclave/net/plugin.h"
#include "enclave/session/distributed.h"
#include "enclave/trainer/nccl_collective.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#ifdef ENCLAVE_PY_ATTESTED
#include "enclave/session/attested_job.h"
#endif

namespace py = pybind11;

namespace enclave::python {
namespace {

// Python exceptions, one per way a session can fail (enclave/__init__.py re-exports them).
PyObject* g_error = nullptr;           // enclave.Error (RuntimeError)
PyObject* g_integrity_error = nullptr;  // enclave.IntegrityError: authentication failed
PyObject* g_session_ended = nullptr;    // enclave.SessionEnded: closed, lease ended, revoked

[[noreturn]] void Raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}
[[noreturn]] void Raise(const Status& s) {
  Raise(s.code() == Code::kAuthFailed ? g_integrity_error : g_error, s.ToString());
}
template <typename T>
T Take(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

// Memory a session must wipe when it ends.
class Wipeable {
 public:
  virtual ~Wipeable() = default;
  virtual void Wipe() = 0;
};

// A tensor's memory: host (locked) or device; wiped in place when the session ends.
class Storage : public Wipeable {
 public:
  virtual uint8_t* data() = 0;
  virtual DLDevice device() const = 0;
};

// One tensor's storage: locked, zeroed when freed, wiped in place when the session ends.
class LockedBuffer final : public Storage {
 public:
  static std::shared_ptr<LockedBuffer> Create(size_t bytes) {
    auto b = std::make_shared<LockedBuffer>();
    b->mem_ = Take(crypto::SecretBytes::Create(bytes == 0 ? 1 : bytes));
    return b;
  }
  uint8_t* data() override { return mem_.ExposeSecretMutable().data(); }
  DLDevice device() const override { return {kDLCPU, 0}; }
  void Wipe() override {
    std::span<uint8_t> m = mem_.ExposeSecretMutable();
    std::memset(m.data(), 0, m.size());
  }

 private:
  crypto::SecretBytes mem_;
};

class Session;

// A tensor over (part of) a Storage, exported through DLPack (__dlpack__,
// __dlpack_device__): LockedTensor on the host, DeviceTensor on the GPU.
class Tensor {
 public:
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, std::vector<int64_t> shape, DLDataType dtype)
      : storage_(std::move(storage)), byte_offset_(byte_offset), shape_(std::move(shape)), dtype_(dtype) {}
  const std::vector<int64_t>& shape() const { return shape_; }
  std::string dtype() const { return dtype_.code == kDLFloat ? "float32" : "int64"; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  py::tuple Device() const {
    const DLDevice d = storage_->device();
    return py::make_tuple(static_cast<int>(d.device_type), d.device_id);
  }

  // A DLManagedTensor that keeps the storage alive until its consumer calls the deleter.
  // The data pointer itself is offset (byte_offset 0): not every consumer honours
  // byte_offset.
  py::capsule DlPack() const {
    struct Context {
      std::shared_ptr<Storage> storage;
      std::vector<int64_t> shape;
      DLManagedTensor managed{};
    };
    auto* ctx = new Context{storage_, shape_, {}};
    DLTensor& t = ctx->managed.dl_tensor;
    t.data = ctx->storage->data() + byte_offset_;
    t.device = ctx->storage->device();
    t.ndim = static_cast<int32_t>(ctx->shape.size());
    t.dtype = dtype_;
    t.shape = ctx->shape.data();
    t.strides = nullptr;  // compact, row-major
    t.byte_offset = 0;
    ctx->managed.manager_ctx = ctx;
    ctx->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Context*>(m->manager_ctx); };
    // The DLPack protocol: a consumer renames the capsule "used_dltensor" and owns it; one
    // never consumed is freed here.
    return py::capsule(&ctx->managed, "dltensor", [](PyObject* capsule) {
      if (PyCapsule_IsValid(capsule, "dltensor")) {
        auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
        if (m != nullptr && m->deleter != nullptr) m->deleter(m);
      } else {
        PyErr_Clear();
      }
    });
  }

 private:
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_;
  std::vector<int64_t> shape_;
  DLDataType dtype_;
};

class LockedTensor final : public Tensor {
 public:
  LockedTensor(std::shared_ptr<LockedBuffer> buffer, std::vector<int64_t> shape, DLDataType dtype)
      : Tensor(std::move(buffer), 0, std::move(shape), dtype) {}
};
class DeviceTensor final : public Tensor {
 public:
  using Tensor::Tensor;
};

constexpr DLDataType kFloat32{kDLFloat, 32, 1};
constexpr DLDataType kInt64{kDLInt, 64, 1};

class Session : public std::enable_shared_from_this<Session> {
 public:
  static std::shared_ptr<Session> Development(const std::string& job_path, const std::string& keystore_path,
                                              int passphrase_fd) {
    auto s = std::shared_ptr<Session>(new Session());
    s->job_ = Take(trainer::LoadJob(job_path));
    std::fprintf(stderr,
                 "enclave: WARNING: development mode: data keys from the local keystore %s, not from an attested "
                 "broker; nothing binds them to approved code on an attested host\n",
                 keystore_path.c_str());
    crypto::SecretBytes pass = Take(cli::ReadPassphrase(passphrase_fd, "Keystore passphrase", false));
    s->keystore_.emplace(Take(crypto::Keystore::Unlock(keystore_path, pass)));
    s->mode_ = "development";
    return s;
  }

#ifdef ENCLAVE_PY_ATTESTED
  static std::shared_ptr<Session> Attested(const std::string& job_path, const std::string& tcti,
                                           const std::string& state_dir, const std::string& event_log,
                                           const std::string& ima_log, uint32_t rank, uint32_t world_size,
                                           const std::vector<std::string>& code) {
    auto s = std::shared_ptr<Session>(new Session());
    s->job_ = Take(trainer::LoadJob(job_path));
    session::AttestedJob::Options o;
    o.tcti = tcti;
    o.state_dir = state_dir;
    if (!event_log.empty()) o.logs.event_log = event_log;
    if (!ima_log.empty()) o.logs.ima_log = ima_log;
    o.release.rank = rank;
    o.release.world_size = world_size;
    // The script and the files it imports, relative to the job's folder: the workload the
    // data-use policy must approve, beside the interpreter IMA measured.
    const std::filesystem::path dir = std::filesystem::path(job_path).parent_path();
    o.release.code_dir = dir.empty() ? "." : dir.string();
    o.release.code = code;
    o.release.trainer_outputs = false;  // the package shows no result in clear: the script does, as approved
    py::gil_scoped_release unlocked;  // attestation talks to the TPM and the broker
    auto attested = session::AttestedJob::Start(s->job_, o);
    if (!attested.ok()) {
      py::gil_scoped_acquire locked;
      Raise(attested.status().Annotate("attested key release from " + s->job_.broker.url));
    }
    s->attested_ = std::move(attested).value();
    s->mode_ = "attested";
    s->attested_rank_ = {rank, world_size};
    return s;
  }
#endif

  ~Session() { End("the session was destroyed"); }

  const std::string& mode() const { return mode_; }
  const trainer::JobSpec& job() const { return job_; }

  // Raises SessionEnded (after wiping everything) once the session cannot be used.
  void CheckUsable() {
#ifdef ENCLAVE_PY_ATTESTED
    if (attested_ && !attested_->LeaseHeld()) End("the lease ended: " + attested_->LeaseEndReason());
#endif
    std::lock_guard<std::mutex> lock(mu_);
    if (!end_reason_.empty()) Raise(g_session_ended, "enclave session ended: " + end_reason_);
  }

  const crypto::Keystore* Keys() {
#ifdef ENCLAVE_PY_ATTESTED
    if (attested_) return &attested_->keystore();
#endif
    return keystore_ ? &*keystore_ : nullptr;
  }

  // The job communication key for the ring: the broker's (attested mode), else derived from
  // the keystore as enclave-train derives it (session::DevelopmentJobKey).
  Result<crypto::SecretBytes> JobKey() {
#ifdef ENCLAVE_PY_ATTESTED
    if (attested_) return attested_->release().job_key.Clone();
#endif
    if (!keystore_) return FailedPrecondition("the session holds no keys");
    return session::DevelopmentJobKey(*keystore_, job_);
  }
  // The attested mode: the release was for one rank of one world size.
  void CheckRank(uint32_t rank, uint32_t world_size) const {
    if (attested_rank_ && *attested_rank_ != std::make_pair(rank, world_size)) {
      Raise(g_error, "the keys were released to rank " + std::to_string(attested_rank_->first) + " of " +
                         std::to_string(attested_rank_->second) + ", not rank " + std::to_string(rank) + " of " +
                         std::to_string(world_size));
    }
  }
  // Where the ranks meet: the directory when one is given (null here), else the broker
  // (attested mode only).
  std::unique_ptr<net::HandleExchange> RendezvousExchange(const std::string& dir) {
#ifdef ENCLAVE_PY_ATTESTED
    if (attested_ && dir.empty()) return attested_->RendezvousExchange();
#endif
    if (dir.empty()) Raise(g_error, "a ring in development mode needs rendezvous=DIR (the attested mode meets at the broker)");
    return nullptr;
  }

  // For torch's NCCL (ProcessGroupNCCL) in this process: hands the job key to the
  // encrypted plugin through its exported C function (enclave_net_set_job_key, never the
  // environment) in the library NCCL loads for NCCL_NET_PLUGIN=enclave
  // (dlopen("libnccl-net-enclave.so"): the one this module is linked to, already loaded),
  // and sets NCCL's network to it (trainer::ForceNcclNetwork). The plugin's path.
  std::string ConfigureNccl() {
    CheckUsable();
    void* lib = dlopen("libnccl-net-enclave.so", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) Raise(g_error, std::string("configure_nccl: ") + dlerror());
    using SetKey = int (*)(const uint8_t*, size_t);
    auto set_key = reinterpret_cast<SetKey>(dlsym(lib, "enclave_net_set_job_key"));
    Dl_info where{};
    const bool same = set_key == &enclave_net_set_job_key && dladdr(reinterpret_cast<void*>(set_key), &where) != 0;
    const std::string path = same && where.dli_fname != nullptr ? where.dli_fname : "";
    dlclose(lib);  // still loaded: this module needs it
    if (!same) {
      Raise(g_error, "configure_nccl: the libnccl-net-enclave.so NCCL would load is not the one this module uses "
                     "(check LD_LIBRARY_PATH)");
    }
    if (Status st = trainer::ForceNcclNetwork("enclave"); !st.ok()) Raise(st.Annotate("configure_nccl"));
    crypto::SecretBytes key = Take(JobKey());
    const auto bytes = key.ExposeSecret();
    if (set_key(bytes.data(), bytes.size()) != 0) Raise(g_error, "configure_nccl: the plugin refused the job key");
    std::lock_guard<std::mutex> lock(mu_);
    nccl_configured_ = true;
    return path;
  }

  // Registers memory to wipe at the session's end.
  void Track(const std::shared_ptr<Wipeable>& w) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(tracked_, [](const std::weak_ptr<Wipeable>& t) { return t.expired(); });
    tracked_.push_back(w);
  }

  // Wipes every buffer handed out and the keys; every later use raises.
  void End(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!end_reason_.empty()) return;
    end_reason_ = reason;
    for (const std::weak_ptr<Wipeable>& t : tracked_) {
      if (auto w = t.lock()) w->Wipe();
    }
    tracked_.clear();
    if (nccl_configured_) enclave_net_clear_job_key();  // later NCCL communicators fail closed
    keystore_.reset();
#ifdef ENCLAVE_PY_ATTESTED
    attested_.reset();  // stops the lease keeper; the released keys are freed (zeroized)
#endif
  }

  // Seals `model` to the tenant's export key into `out_path` (the broker's export key in
  // attested mode, the job's export_key file otherwise), the job's digest and `format_id`
  // in its metadata; the file's SHA-256 as hex.
  std::string Export(py::bytes model, const std::string& out_path, const std::string& format_id, bool overwrite) {
    CheckUsable();
    std::optional<crypto::ExportPublicKey> to;
#ifdef ENCLAVE_PY_ATTESTED
    if (attested_) to = attested_->release().export_key;
#endif
    if (!to) {
      if (job_.export_key.empty()) Raise(g_error, "no export key: the job has no export_key");
      to = Take(crypto::ReadExportPublicKey(job_.export_key));
    }
    std::string_view bytes(model);
    crypto::ModelSealOptions options;
    options.info.format_id = format_id;  // the plaintext's format, for whoever opens it
    options.info.job_digest = job_.digest;
    auto info = Take(crypto::SealModelToFile(
        *to, ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), options, out_path, overwrite));
    static const char* kHex = "0123456789abcdef";
    std::string hex;
    for (uint8_t b : info.file_digest) {
      hex.push_back(kHex[b >> 4]);
      hex.push_back(kHex[b & 15]);
    }
    return hex;
  }

 private:
  Session() = default;
  trainer::JobSpec job_;
  std::string mode_;
  std::optional<crypto::Keystore> keystore_;
#ifdef ENCLAVE_PY_ATTESTED
  std::unique_ptr<session::AttestedJob> attested_;
#endif
  std::optional<std::pair<uint32_t, uint32_t>> attested_rank_;  // (rank, world size) the keys were released to
  std::mutex mu_;
  std::vector<std::weak_ptr<Wipeable>> tracked_;
  bool nccl_configured_ = false;
  std::string end_reason_;
};

// The decrypted records of one or all of the job's datasets: in locked memory (the CPU
// backend) or in device memory (the GPU backend: sealed chunks are authenticated and
// decrypted on the GPU, the host only ever holds their ciphertext). The class indices
// are also on the host, in locked memory (data.labels), for splits and batch labels.
class DatasetRecords final : public Wipeable {
 public:
  std::unique_ptr<trainer::Backend> backend;
  trainer::LoadedData data;
  // The backend is not thread-safe, and a consumer may drop a device tensor (its storage's
  // last reference) on another thread, e.g. torch's autograd thread: every use holds this.
  std::mutex mu;
  bool on_gpu() const { return std::string_view(backend->kind()) == "gpu"; }
  void Wipe() override {
    std::lock_guard<std::mutex> lock(mu);
    for (trainer::OwnedBuffer* b : {&data.x, &data.y}) {
      if (b->get().data == nullptr) continue;
      if (on_gpu()) {
        (void)backend->Fill(b->get(), 0.0f);
      } else {
        std::memset(b->get().data, 0, b->size() * sizeof(float));
      }
    }
    if (on_gpu()) (void)backend->Synchronize();
    for (float& v : data.labels) v = 0;
  }
};

#ifdef ENCLAVE_PY_CUDA
// Device memory of one gather (rows of x, or their labels as int64), from the dataset's
// GPU backend. Freed (zeroized by the backend) when the last tensor over it goes; wiped
// in place when the session ends.
class DeviceRows final : public Storage {
 public:
  DeviceRows(std::shared_ptr<DatasetRecords> owner, trainer::Buffer buffer, int device)
      : owner_(std::move(owner)), buffer_(buffer), device_(device) {}
  ~DeviceRows() override {
    // The consumer's kernels (on its own streams) may still read this memory: the backend
    // zeroizes it on its own stream before freeing, so wait for the whole device first.
    cudaDeviceSynchronize();
    std::lock_guard<std::mutex> lock(owner_->mu);
    owner_->backend->Free(buffer_);
  }
  uint8_t* data() override { return reinterpret_cast<uint8_t*>(buffer_.data); }
  DLDevice device() const override { return {kDLCUDA, device_}; }
  void Wipe() override {
    std::lock_guard<std::mutex> lock(owner_->mu);
    (void)owner_->backend->Fill(buffer_, 0.0f);
    (void)owner_->backend->Synchronize();
  }

 private:
  std::shared_ptr<DatasetRecords> owner_;
  trainer::Buffer buffer_;
  int device_;
};
#endif

// Which backend a dataset's records go to: "cpu" (locked memory) or "cuda" / "cuda:0"
// (device memory; the GPU backend uses device 0).
trainer::Device ParseDevice(const std::string& device) {
  if (device == "cpu") return trainer::Device::kCpu;
  if (device == "cuda" || device == "cuda:0") return trainer::Device::kGpu;
  Raise(g_error, "device='" + device + "': use 'cpu' or 'cuda' (the GPU backend runs on device 0)");
}

class BatchIterator;

// All records of the job's sealed datasets (or of the one named), authenticated and
// decrypted at construction: a tampered chunk raises IntegrityError and nothing is kept.
class SealedTensorDataset {
 public:
  SealedTensorDataset(std::shared_ptr<Session> session, const std::optional<std::string>& dataset_id,
                      const std::string& device)
      : session_(std::move(session)) {
    session_->CheckUsable();
    const trainer::Device where = ParseDevice(device);
    std::vector<trainer::DatasetSpec> specs;
    for (const trainer::DatasetSpec& d : session_->job().datasets) {
      if (!dataset_id || d.id == *dataset_id) specs.push_back(d);
    }
    if (specs.empty()) Raise(g_error, "the job has no dataset '" + dataset_id.value_or("") + "'");
    records_ = std::make_shared<DatasetRecords>();
    auto backend = trainer::MakeBackend(where);
    if (!backend.ok()) Raise(backend.status().Annotate("device='" + device + "'"));
    records_->backend = std::move(backend).value();
    {
      const crypto::Keystore* keys = session_->Keys();
      py::gil_scoped_release unlocked;
      auto loaded = trainer::LoadDatasets(*records_->backend, specs, keys);
      py::gil_scoped_acquire locked;
      records_->data = Take(std::move(loaded));
    }
    session_->Track(records_);
  }

  size_t rows() const { return records_->data.rows; }
  size_t features() const { return records_->data.features; }
  uint32_t classes() const { return records_->data.classes; }
  std::string device() const { return records_->on_gpu() ? "cuda:0" : "cpu"; }
  std::vector<std::string> feature_names() const {
    std::vector<std::string> names;
    for (const dataset::Column& c : records_->data.schema.columns) {
      if (c.kind != dataset::ColumnKind::kLabel) names.push_back(c.name);  // the record's feature order
    }
    return names;
  }

  // Rows `rows` (indices) as (x float32 [n, features], y int64 [n]) in fresh buffers:
  // LockedTensors, or DeviceTensors for a dataset on the GPU.
  std::pair<py::object, py::object> Gather(const std::vector<uint32_t>& rows) {
    session_->CheckUsable();
    for (uint32_t r : rows) {
      if (r >= this->rows()) Raise(g_error, "row " + std::to_string(r) + " is past the dataset's end");
    }
    const size_t n = rows.size(), f = features();
    const std::vector<int64_t> x_shape{static_cast<int64_t>(n), static_cast<int64_t>(f)};
    const std::vector<int64_t> y_shape{static_cast<int64_t>(n)};
    auto y = LockedBuffer::Create(n * sizeof(int64_t));  // the labels, from the host copy
    auto* dy = reinterpret_cast<int64_t*>(y->data());
    for (size_t i = 0; i < n; ++i) dy[i] = static_cast<int64_t>(records_->data.labels[rows[i]]);
    session_->Track(y);
    if (records_->on_gpu()) return GatherOnGpu(rows, *y, x_shape, y_shape);
    auto x = LockedBuffer::Create(n * f * sizeof(float));
    const float* src_x = records_->data.x.get().data;
    auto* dx = reinterpret_cast<float*>(x->data());
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(dx + i * f, src_x + static_cast<size_t>(rows[i]) * f, f * sizeof(float));
    }
    session_->Track(x);
    return {py::cast(LockedTensor(x, x_shape, kFloat32)), py::cast(LockedTensor(y, y_shape, kInt64))};
  }

  // The stratified split enclave-train makes of the same records (trainer::StratifiedSplit):
  // (training rows, validation rows), ascending.
  std::pair<std::vector<uint32_t>, std::vector<uint32_t>> StratifiedSplit(double fraction, uint64_t seed) {
    session_->CheckUsable();
    auto split = Take(trainer::StratifiedSplit(records_->data.labels, classes(), fraction, seed));
    return {std::vector<uint32_t>(split.train.begin(), split.train.end()),
            std::vector<uint32_t>(split.val.begin(), split.val.end())};
  }

  std::shared_ptr<Session> session() const { return session_; }

 private:
  // x gathered on the device (the backend's kernel), the labels uploaded from `labels`;
  // both ready (the backend's stream synchronized) before any consumer sees them.
  std::pair<py::object, py::object> GatherOnGpu(const std::vector<uint32_t>& rows, LockedBuffer& labels,
                                                const std::vector<int64_t>& x_shape,
                                                const std::vector<int64_t>& y_shape) {
#ifdef ENCLAVE_PY_CUDA
    const size_t n = rows.size(), f = features();
    std::shared_ptr<DeviceRows> x, y;
    {
      std::lock_guard<std::mutex> lock(records_->mu);
      trainer::Backend& b = *records_->backend;
      auto bx = b.Alloc(std::max<size_t>(n * f, 1));
      if (!bx.ok()) Raise(bx.status().Annotate("device memory for a batch"));
      x = std::make_shared<DeviceRows>(records_, bx.value(), 0);
      auto by = b.Alloc(std::max<size_t>(2 * n, 1));  // int64: two floats each
      if (!by.ok()) Raise(by.status().Annotate("device memory for a batch"));
      y = std::make_shared<DeviceRows>(records_, by.value(), 0);
      Status s = b.GatherRows(records_->data.x.get(), f, rows.data(), n, bx.value());
      if (s.ok()) s = b.UploadBytes(by.value(), 0, labels.data(), n * sizeof(int64_t));
      if (s.ok()) s = b.Synchronize();
      if (!s.ok()) Raise(s.Annotate("gathering a batch on the GPU"));
    }
    labels.Wipe();  // the host copy of the labels is not needed any longer
    session_->Track(x);
    session_->Track(y);
    return {py::cast(DeviceTensor(x, 0, x_shape, kFloat32)), py::cast(DeviceTensor(y, 0, y_shape, kInt64))};
#else
    (void)rows, (void)labels, (void)x_shape, (void)y_shape;
    Raise(g_error, "internal: a GPU dataset in a build without CUDA");
#endif
  }

  std::shared_ptr<Session> session_;
  std::shared_ptr<DatasetRecords> records_;
};

// This rank's batches of one epoch. The order: the rows (all, or those given), shuffled
// with std::mt19937_64 seeded by `seed` (std::shuffle) when asked, cut to a multiple of
// world_size (every rank gets as many rows), and rank r takes positions r, r + world, ...
// For a dataset on the GPU the whole epoch's rows are gathered on the device once, here
// (one kernel, device memory for this rank's rows), and each batch is a view into them:
// no allocation, copy or synchronization per batch.
class BatchIterator {
 public:
  BatchIterator(std::shared_ptr<SealedTensorDataset> ds, size_t batch_size, bool shuffle, uint64_t seed,
                uint32_t rank, uint32_t world_size, bool drop_last, const std::optional<std::vector<uint32_t>>& rows)
      : ds_(std::move(ds)), batch_size_(batch_size), drop_last_(drop_last) {
    if (batch_size == 0) Raise(g_error, "batch_size must be at least 1");
    if (world_size == 0 || rank >= world_size) Raise(g_error, "need 0 <= rank < world_size");
    std::vector<uint32_t> order;
    if (rows) {
      order = *rows;
    } else {
      order.resize(ds_->rows());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
    }
    if (shuffle) {
      std::mt19937_64 rng(seed);
      std::shuffle(order.begin(), order.end(), rng);
    }
    const size_t per_rank = order.size() / world_size;
    for (size_t i = 0; i < per_rank; ++i) mine_.push_back(order[i * world_size + rank]);
    if (ds_->device() != "cpu") epoch_ = ds_->Gather(mine_);  // raises IntegrityError/SessionEnded as Gather does
  }
  size_t batches() const {
    return drop_last_ ? mine_.size() / batch_size_ : (mine_.size() + batch_size_ - 1) / batch_size_;
  }
  std::pair<py::object, py::object> Next() {
    const size_t left = mine_.size() - next_;
    if (left == 0 || (drop_last_ && left < batch_size_)) throw py::stop_iteration();
    const size_t n = std::min(batch_size_, left);
    if (epoch_) {
      ds_->session()->CheckUsable();  // SessionEnded at the lease's end (the epoch's rows are wiped then)
      auto view = [&](const py::object& whole, size_t row_bytes, std::vector<int64_t> shape, DLDataType dtype) {
        const Tensor& t = whole.cast<const DeviceTensor&>();
        return py::cast(DeviceTensor(t.storage(), next_ * row_bytes, std::move(shape), dtype));
      };
      const size_t f = ds_->features();
      const auto rows = static_cast<int64_t>(n);
      auto batch = std::make_pair(view(epoch_->first, f * sizeof(float), {rows, static_cast<int64_t>(f)}, kFloat32),
                                  view(epoch_->second, sizeof(int64_t), {rows}, kInt64));
      next_ += n;
      return batch;
    }
    std::vector<uint32_t> rows(mine_.begin() + static_cast<std::ptrdiff_t>(next_),
                               mine_.begin() + static_cast<std::ptrdiff_t>(next_ + n));
    auto batch = ds_->Gather(rows);  // raises SessionEnded at the lease's end, before any row is copied
    next_ += n;
    return batch;
  }

 private:
  std::shared_ptr<SealedTensorDataset> ds_;
  size_t batch_size_;
  bool drop_last_;
  std::vector<uint32_t> mine_;
  size_t next_ = 0;
  std::optional<std::pair<py::object, py::object>> epoch_;  // a GPU dataset: this rank's rows, gathered
};

// The job's sealed datasets (or the one named) opened for streaming: the headers checked
// (keystore entry, key commitment, header tag, schema, the job's dataset id), no chunk
// decrypted. Chunks are read, authenticated and decrypted when an epoch needs them. The
// readers hold the files' payload keys: the session's end frees them (Wipe).
class SealedStream final : public Wipeable {
 public:
  struct Chunk {
    size_t part;             // which dataset
    uint64_t first, rows;    // its records within that dataset
  };

  static std::shared_ptr<SealedStream> Open(std::shared_ptr<Session> session,
                                            const std::optional<std::string>& dataset_id) {
    session->CheckUsable();
    auto s = std::shared_ptr<SealedStream>(new SealedStream());
    s->session_ = session;
    const crypto::Keystore* keys = session->Keys();
    for (const trainer::DatasetSpec& d : session->job().datasets) {
      if (dataset_id && d.id != *dataset_id) continue;
      if (d.format != trainer::DatasetFormat::kSealed) {
        Raise(g_error, d.path + ": SealedIterableDataset streams sealed files only (SealedTensorDataset reads CSV)");
      }
      if (keys == nullptr) Raise(g_error, d.path + ": a sealed dataset needs the session's keys");
      auto reader = std::make_unique<dataset::SealedDatasetReader>(
          Take(dataset::SealedDatasetReader::Open(d.path, *keys)));
      if (reader->header().params.object_id != d.id) {
        Raise(g_error, d.path + ": sealed dataset id is '" + reader->header().params.object_id +
                           "', the job names '" + d.id + "'");
      }
      if (s->parts_.empty()) {
        s->schema_ = reader->schema();
      } else if (dataset::EncodeSchema(reader->schema()) != dataset::EncodeSchema(s->schema_)) {
        Raise(g_error, d.path + ": schema differs from dataset '" + s->paths_[0] + "'");
      }
      // Every chunk but the last holds chunk_size / record_bytes whole records.
      const uint64_t per_chunk = reader->header().params.chunk_size / s->schema_.record_bytes();
      for (uint64_t first = 0; first < reader->rows(); first += per_chunk) {
        const uint64_t rows = std::min(per_chunk, reader->rows() - first);
        s->chunks_.push_back({s->parts_.size(), first, rows});
        s->max_chunk_rows_ = std::max(s->max_chunk_rows_, rows);
      }
      s->rows_ += reader->rows();
      s->paths_.push_back(d.path);
      s->parts_.push_back(std::move(reader));
    }
    if (s->parts_.empty()) Raise(g_error, "the job has no dataset '" + dataset_id.value_or("") + "'");
    session->Track(s);
    return s;
  }

  void Wipe() override {
    std::lock_guard<std::mutex> lock(mu_);
    parts_.clear();  // the readers' keys and plaintext scratch are zeroized as they are freed
  }

  // Chunk `c`'s records (rows * (features + 1) floats) into `out`: the chunk is
  // authenticated as a whole before any of its records is copied, then every record is
  // checked. On failure `out` holds nothing of it.
  void ReadChunk(size_t c, float* out) {
    const Chunk& k = chunks_[c];
    std::lock_guard<std::mutex> lock(mu_);
    if (parts_.empty()) Raise(g_session_ended, "enclave session ended: the stream's keys are wiped");
    Status s = parts_[k.part]->ReadRows(k.first, k.rows, out);
    if (s.ok()) s = trainer::CheckRecords(schema_, paths_[k.part], out, k.first, k.rows);
    if (!s.ok()) {
      std::memset(out, 0, k.rows * width() * sizeof(float));
      Raise(s);  // the reader's message names the file and the chunk; the record check, the row
    }
  }

  Session& session() { return *session_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  uint64_t rows() const { return rows_; }
  size_t width() const { return schema_.columns.size(); }
  size_t features() const { return schema_.feature_count(); }
  uint32_t classes() const { return static_cast<uint32_t>(schema_.classes.size()); }
  uint64_t max_chunk_rows() const { return max_chunk_rows_; }
  std::vector<std::string> feature_names() const {
    std::vector<std::string> names;
    for (const dataset::Column& c : schema_.columns) {
      if (c.kind != dataset::ColumnKind::kLabel) names.push_back(c.name);
    }
    return names;
  }

 private:
  SealedStream() = default;
  std::shared_ptr<Session> session_;
  std::mutex mu_;  // the readers: one read at a time, and none during the wipe
  std::vector<std::unique_ptr<dataset::SealedDatasetReader>> parts_;
  std::vector<std::string> paths_;
  dataset::DatasetSchema schema_;
  std::vector<Chunk> chunks_;
  uint64_t rows_ = 0, max_chunk_rows_ = 0;
};

// This rank's batches of one streamed epoch. The order: the chunks (permuted with
// std::mt19937_64 seeded by `seed` through std::shuffle when asked) are cut into windows
// of window_chunks chunks; a window's rows, chunk after chunk, are shuffled with the same
// generator; the epoch's order is the windows' rows one window after the other. As in
// BatchIterator it is cut to a multiple of world_size and rank r takes positions r, r +
// world_size, ...: every rank reads and authenticates every chunk but keeps only its rows.
// At most one window of records is resident (in one locked buffer, reused).
class StreamIterator {
 public:
  StreamIterator(std::shared_ptr<SealedStream> stream, size_t batch_size, size_t window_chunks, bool shuffle,
                 uint64_t seed, uint32_t rank, uint32_t world_size, bool drop_last)
      : stream_(std::move(stream)), batch_size_(batch_size), window_chunks_(window_chunks), shuffle_(shuffle),
        rng_(seed), rank_(rank), world_size_(world_size), drop_last_(drop_last) {
    if (batch_size == 0) Raise(g_error, "batch_size must be at least 1");
    if (window_chunks == 0) Raise(g_error, "window_chunks must be at least 1");
    if (world_size == 0 || rank >= world_size) Raise(g_error, "need 0 <= rank < world_size");
    stream_->session().CheckUsable();
    order_.resize(stream_->chunks().size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
    kept_ = stream_->rows() / world_size * world_size;
    window_capacity_ = std::min<uint64_t>(window_chunks_ * stream_->max_chunk_rows(), stream_->rows());
  }

  size_t mine() const { return kept_ / world_size_; }
  size_t batches() const { return drop_last_ ? mine() / batch_size_ : (mine() + batch_size_ - 1) / batch_size_; }
  uint64_t window_rows() const { return window_capacity_; }

  std::pair<LockedTensor, LockedTensor> Next() {
    stream_->session().CheckUsable();  // SessionEnded at the lease's end, before anything is read
    if (!failed_.empty()) Raise(g_error, "this epoch already failed: " + failed_);
    const size_t left = mine() - yielded_;
    if (left == 0 || (drop_last_ && left < batch_size_)) throw py::stop_iteration();
    const size_t n = std::min(batch_size_, left), f = stream_->features(), w = stream_->width();
    auto x = LockedBuffer::Create(n * f * sizeof(float));
    auto y = LockedBuffer::Create(n * sizeof(int64_t));
    auto* dx = reinterpret_cast<float*>(x->data());
    auto* dy = reinterpret_cast<int64_t*>(y->data());
    for (size_t i = 0; i < n;) {
      if (cursor_ == window_order_.size()) {
        try {
          LoadNextWindow();  // raises on a chunk that fails: x and y are freed (zeroized) unseen
        } catch (py::error_already_set& e) {
          failed_ = e.what();
          throw;
        }
        continue;
      }
      const uint64_t position = position_++;
      const uint32_t slot = window_order_[cursor_++];
      if (position >= kept_ || position % world_size_ != rank_) continue;
      const float* record = window_data() + static_cast<size_t>(slot) * w;
      std::memcpy(dx + i * f, record, f * sizeof(float));
      dy[i] = static_cast<int64_t>(record[f]);
      ++i;
    }
    yielded_ += n;
    stream_->session().Track(x);
    stream_->session().Track(y);
    return {LockedTensor(x, {static_cast<int64_t>(n), static_cast<int64_t>(f)}, kFloat32),
            LockedTensor(y, {static_cast<int64_t>(n)}, kInt64)};
  }

 private:
  float* window_data() { return reinterpret_cast<float*>(window_->data()); }

  // The next window's chunks into the window buffer, each authenticated whole and checked
  // before any of its rows can be taken; then the window's row order.
  void LoadNextWindow() {
    if (next_chunk_ == order_.size()) Raise(g_error, "internal: the epoch's chunks ran out");
    if (!window_) {  // allocated at the first read, reused for every window of the epoch
      window_ = LockedBuffer::Create(window_capacity_ * stream_->width() * sizeof(float));
      stream_->session().Track(window_);
    }
    const size_t end = std::min(order_.size(), next_chunk_ + window_chunks_);
    window_order_.clear();
    cursor_ = 0;
    uint32_t slot = 0;
    for (; next_chunk_ < end; ++next_chunk_) {
      const SealedStream::Chunk& c = stream_->chunks()[order_[next_chunk_]];
      stream_->ReadChunk(order_[next_chunk_], window_data() + static_cast<size_t>(slot) * stream_->width());
      for (uint64_t r = 0; r < c.rows; ++r) window_order_.push_back(slot++);
    }
    if (shuffle_) std::shuffle(window_order_.begin(), window_order_.end(), rng_);
  }

  std::shared_ptr<SealedStream> stream_;
  size_t batch_size_, window_chunks_;
  bool shuffle_;
  std::mt19937_64 rng_;
  uint32_t rank_, world_size_;
  bool drop_last_;
  std::vector<size_t> order_;        // the epoch's chunk order
  uint64_t kept_ = 0;                // rows of the epoch's order that go to some rank
  uint64_t window_capacity_ = 0;     // rows the window buffer holds
  std::shared_ptr<LockedBuffer> window_;
  std::vector<uint32_t> window_order_;  // the resident window's rows (slots), in epoch order
  size_t next_chunk_ = 0, cursor_ = 0;
  uint64_t position_ = 0;            // the epoch position of the next row of window_order_
  size_t yielded_ = 0;
  std::string failed_;
};


// This rank's connection to the job's encrypted ring (net/ring.h through
// session::RingCollective, as `enclave-train --world-size N` on the CPU): keyed with the job
// communication key, which stays in C++ (the broker's release in attested mode, derived
// from the keystore in development mode). The session's end closes it.
class RingConnection final : public Wipeable {
 public:
  static std::shared_ptr<RingConnection> Join(std::shared_ptr<Session> session, uint32_t rank, uint32_t world_size,
                                              const std::string& rendezvous, double timeout_s) {
    session->CheckUsable();
    if (world_size == 0 || rank >= world_size) Raise(g_error, "need 0 <= rank < world_size");
    if (timeout_s <= 0) Raise(g_error, "timeout_s must be positive");
    session->CheckRank(rank, world_size);
    session::DistributedOptions o;
    o.rank = rank;
    o.world_size = world_size;
    o.rendezvous_dir = rendezvous;
    o.peer_timeout = std::chrono::seconds(static_cast<int64_t>(std::ceil(timeout_s)));
    crypto::SecretBytes key = Take(session->JobKey());
    std::unique_ptr<net::HandleExchange> exchange = session->RendezvousExchange(rendezvous);
    auto c = std::make_shared<RingConnection>();
    c->session_ = session;
    {
      py::gil_scoped_release unlocked;  // waits for the other ranks
      auto joined = session::RingCollective::Join(session->job(), key, o, exchange.get());
      py::gil_scoped_acquire locked;
      if (!joined.ok()) {
        Raise(joined.status().Annotate("joining the encrypted ring as rank " + std::to_string(rank) + " of " +
                                       std::to_string(world_size)));
      }
      c->ring_ = std::move(joined).value();
    }
    session->Track(c);
    return c;
  }

  // In place: every element becomes its sum over the ranks (float32 or float64, contiguous).
  void AllReduceSum(const py::buffer& b) {
    session_->CheckUsable();
    py::buffer_info info = b.request(/*writable=*/true);
    const bool f32 = info.format == py::format_descriptor<float>::format();
    const bool f64 = info.format == py::format_descriptor<double>::format();
    if (!f32 && !f64) Raise(g_error, "all_reduce_sum takes float32 or float64 buffers, not format '" + info.format + "'");
    ssize_t expect = info.itemsize;
    for (ssize_t d = info.ndim - 1; d >= 0; --d) {
      if (info.shape[d] != 1 && info.strides[d] != expect) Raise(g_error, "all_reduce_sum needs a contiguous buffer");
      expect *= info.shape[d];
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!ring_) Raise(g_error, "the ring is closed");
    Status s;
    {
      py::gil_scoped_release unlocked;
      const auto n = static_cast<size_t>(info.size);
      s = f32 ? ring_->AllReduceSum(static_cast<float*>(info.ptr), n)
              : ring_->AllReduceSum(static_cast<double*>(info.ptr), n);
    }
    if (!s.ok()) Raise(s.Annotate("ring all-reduce"));
  }

  int rank() { return Ring().rank(); }
  int world_size() { return Ring().world_size(); }
  uint64_t bytes_sent() { return Ring().bytes_sent(); }
  std::string listen_address() { return Ring().listen_address(); }
  void Wipe() override {
    std::lock_guard<std::mutex> lock(mu_);
    ring_.reset();  // closes the connections; the staging memory is zeroized as it is freed
  }

 private:
  session::RingCollective& Ring() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ring_) Raise(g_error, "the ring is closed");
    return *ring_;
  }
  std::shared_ptr<Session> session_;
  std::mutex mu_;
  std::unique_ptr<session::RingCollective> ring_;
};

}  // namespace
}  // namespace enclave::python

using namespace enclave;
using namespace enclave::python;

PYBIND11_MODULE(_enclave, m) {
  m.doc() = "enclave: attested sessions and sealed datasets (C++ core; docs/pytorch.md)";
  if (Status s = crypto::InitCrypto(); !s.ok()) throw std::runtime_error(s.ToString());
  g_error = PyErr_NewException("enclave.Error", PyExc_RuntimeError, nullptr);
  g_integrity_error = PyErr_NewException("enclave.IntegrityError", g_error, nullptr);
  g_session_ended = PyErr_NewException("enclave.SessionEnded", g_error, nullptr);
  m.attr("Error") = py::handle(g_error);
  m.attr("IntegrityError") = py::handle(g_integrity_error);
  m.attr("SessionEnded") = py::handle(g_session_ended);
#ifdef ENCLAVE_PY_ATTESTED
  m.attr("ATTESTED_MODE") = true;
#else
  m.attr("ATTESTED_MODE") = false;
#endif

  // The record tensors: LockedTensor (host, locked memory), DeviceTensor (GPU memory).
  py::class_<Tensor>(m, "Tensor")
      .def_property_readonly("shape", &Tensor::shape)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def("__dlpack__", [](const Tensor& t, py::object /*stream*/) { return t.DlPack(); },
           py::arg("stream") = py::none())  // ready on every stream: made after a synchronize
      .def("__dlpack_device__", &Tensor::Device);
  py::class_<LockedTensor, Tensor>(m, "LockedTensor");
  py::class_<DeviceTensor, Tensor>(m, "DeviceTensor");
#ifdef ENCLAVE_PY_CUDA
  m.attr("CUDA") = true;
#else
  m.attr("CUDA") = false;
#endif

  py::class_<Session, std::shared_ptr<Session>>(m, "Session")
      .def_static("development", &Session::Development, py::arg("job"), py::arg("keystore"),
                  py::arg("passphrase_fd"))
#ifdef ENCLAVE_PY_ATTESTED
      .def_static("attested", &Session::Attested, py::arg("job"), py::arg("tcti") = "",
                  py::arg("state") = "/var/lib/enclave-attest", py::arg("event_log") = "", py::arg("ima_log") = "",
                  py::arg("rank") = 0, py::arg("world_size") = 1, py::arg("code") = std::vector<std::string>{})
#endif
      .def_property_readonly("mode", &Session::mode)
      .def_property_readonly("job_id", [](const Session& s) { return s.job().broker.job_id; })
      .def("check", &Session::CheckUsable)
      .def("close", [](Session& s) { s.End("closed by the program"); })
      .def(
          "ring",
          [](std::shared_ptr<Session> s, uint32_t rank, uint32_t world_size, const std::string& rendezvous,
             double timeout_s) { return RingConnection::Join(std::move(s), rank, world_size, rendezvous, timeout_s); },
          py::arg("rank"), py::arg("world_size"), py::arg("rendezvous") = "", py::arg("timeout_s") = 120.0)
      .def("configure_nccl", &Session::ConfigureNccl)
      .def("export", &Session::Export, py::arg("model"), py::arg("out"), py::arg("format") = "pytorch",
           py::arg("overwrite") = false);

  py::class_<SealedTensorDataset, std::shared_ptr<SealedTensorDataset>>(m, "SealedTensorDataset")
      .def(py::init<std::shared_ptr<Session>, std::optional<std::string>, std::string>(), py::arg("session"),
           py::arg("dataset") = py::none(), py::arg("device") = "cpu")
      .def("__len__", &SealedTensorDataset::rows)
      .def_property_readonly("device", &SealedTensorDataset::device)
      .def_property_readonly("features", &SealedTensorDataset::features)
      .def_property_readonly("classes", &SealedTensorDataset::classes)
      .def_property_readonly("feature_names", &SealedTensorDataset::feature_names)
      .def("gather", &SealedTensorDataset::Gather, py::arg("rows"))
      .def("stratified_split", &SealedTensorDataset::StratifiedSplit, py::arg("fraction"), py::arg("seed"))
      .def(
          "batches",
          [](std::shared_ptr<SealedTensorDataset> ds, size_t batch_size, bool shuffle, uint64_t seed, uint32_t rank,
             uint32_t world_size, bool drop_last, std::optional<std::vector<uint32_t>> rows) {
            return BatchIterator(std::move(ds), batch_size, shuffle, seed, rank, world_size, drop_last, rows);
          },
          py::arg("batch_size"), py::arg("shuffle") = false, py::arg("seed") = 0, py::arg("rank") = 0,
          py::arg("world_size") = 1, py::arg("drop_last") = false, py::arg("rows") = py::none());

  py::class_<SealedStream, std::shared_ptr<SealedStream>>(m, "SealedStream")
      .def(py::init(&SealedStream::Open), py::arg("session"), py::arg("dataset") = py::none())
      .def("__len__", &SealedStream::rows)
      .def_property_readonly("features", &SealedStream::features)
      .def_property_readonly("classes", &SealedStream::classes)
      .def_property_readonly("feature_names", &SealedStream::feature_names)
      .def_property_readonly("chunks", [](const SealedStream& s) { return s.chunks().size(); })
      .def_property_readonly("max_chunk_rows", &SealedStream::max_chunk_rows)
      .def(
          "epoch",
          [](std::shared_ptr<SealedStream> s, size_t batch_size, size_t window_chunks, bool shuffle, uint64_t seed,
             uint32_t rank, uint32_t world_size, bool drop_last) {
            return StreamIterator(std::move(s), batch_size, window_chunks, shuffle, seed, rank, world_size,
                                  drop_last);
          },
          py::arg("batch_size"), py::arg("window_chunks") = 8, py::arg("shuffle") = false, py::arg("seed") = 0,
          py::arg("rank") = 0, py::arg("world_size") = 1, py::arg("drop_last") = false);

  py::class_<StreamIterator>(m, "StreamIterator")
      .def("__iter__", [](StreamIterator& it) -> StreamIterator& { return it; }, py::return_value_policy::reference)
      .def("__next__", &StreamIterator::Next)
      .def("__len__", &StreamIterator::batches)
      .def_property_readonly("rows", &StreamIterator::mine)
      .def_property_readonly("window_rows", &StreamIterator::window_rows);

  py::class_<RingConnection, std::shared_ptr<RingConnection>>(m, "Ring")
      .def("all_reduce_sum", &RingConnection::AllReduceSum, py::arg("buffer"))
      .def_property_readonly("rank", &RingConnection::rank)
      .def_property_readonly("world_size", &RingConnection::world_size)
      .def_property_readonly("bytes_sent", &RingConnection::bytes_sent)
      .def_property_readonly("listen_address", &RingConnection::listen_address)
      .def("close", &RingConnection::Wipe);

  py::class_<BatchIterator>(m, "BatchIterator")
      .def("__iter__", [](BatchIterator& it) -> BatchIterator& { return it; }, py::return_value_policy::reference)
      .def("__next__", &BatchIterator::Next)
      .def("__len__", &BatchIterator::batches);
}
