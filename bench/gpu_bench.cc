// Sealed data into GPU memory, side by side with the plaintext baselines on the same GPU
// in one run; GPU times from CUDA events, end-to-end file times from the host clock.
//
//   gpu_resident/<suite>   ciphertext already in pinned host memory -> device plaintext:
//                          H2D copies on one stream, the decrypt kernels on another, 3
//                          batches in flight (as GpuSealedStream), against one pinned H2D
//                          copy of the same bytes (pinned_h2d_GBps). Counter ratio =
//                          sealed / copy (target >= 0.95: decryption hides behind the
//                          copy). Batches of 16, 64 (GpuSealedStream's default) and 256
//                          MiB. ratio_per_stream, ratio_copies_only and the copies_ms_*
//                          counters: the other layouts measured beside it (see Resident).
//   gpu_file/<suite>       a sealed file (page cache) -> device plaintext through
//                          kernels::GpuSealedStream, against the same staging pipeline
//                          reading the plaintext file of the same payload and only copying
//                          (clear_file_GBps; ratio = sealed / clear), and the pinned copy.
//   gpu_kernel/<suite>     the tag and decrypt kernels alone on device-resident ciphertext
//                          (one batch of the whole payload), GB/s of plaintext; counters
//                          tag_segments_GBps, tag_finish_GBps, decrypt_GBps: each kernel
//                          alone (the payload over its time), to show which one bounds.
//
// Payload: ENCLAVE_GPU_BENCH_GIB GiB (default 2) of 64 KiB chunks, per suite.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/crypto/secret_bytes.h"
#include "enclave/kernels/chunk_open.h"
#include "enclave/kernels/gpu_stream.h"

namespace {

using enclave::crypto::SecretBytes;
using enclave::crypto::Suite;
using enclave::kernels::ChunkBatch;

constexpr uint32_t kChunk = 64 * 1024;
constexpr uint64_t kBatchBytes = 64ull << 20;
constexpr int kDepth = 3;
constexpr int kReadThreads = 4;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "enclave_bench_gpu: %s\n", what.c_str());
  std::exit(1);
}
template <typename T>
T Must(enclave::Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}
void Must(const enclave::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}
void Cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

uint64_t PayloadBytes() {
  const char* gib = std::getenv("ENCLAVE_GPU_BENCH_GIB");
  const double g = gib != nullptr ? std::atof(gib) : 2.0;
  if (!(g > 0 && g <= 64)) Die("ENCLAVE_GPU_BENCH_GIB must be in (0, 64]");
  return static_cast<uint64_t>(g * (1ull << 30)) / kChunk * kChunk;
}

std::string TempDir() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr ? t : "/tmp";
}

// A sink straight into pinned host memory (no vector growth for GiBs).
class PinnedSink final : public enclave::crypto::ByteSink {
 public:
  explicit PinnedSink(uint64_t capacity) : capacity_(capacity) {
    Cuda(cudaHostAlloc(&data_, capacity, cudaHostAllocDefault), "cudaHostAlloc(sealed)");
  }
  ~PinnedSink() override { cudaFreeHost(data_); }
  enclave::Status Write(enclave::ByteSpan bytes) override {
    if (size_ + bytes.size() > capacity_) return enclave::Internal("pinned sink full");
    std::memcpy(data_ + size_, bytes.data(), bytes.size());
    size_ += bytes.size();
    return enclave::OkStatus();
  }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0, capacity_;
};

// One suite's data: the payload, its sealed file in pinned memory and on disk, the
// plaintext file, and device buffers for the output and the resident ciphertext.
struct Fixture {
  Suite suite;
  uint64_t payload = 0;
  std::vector<uint8_t> plaintext;
  SecretBytes dek;
  enclave::crypto::SealedHeader header;
  SecretBytes payload_key;
  std::unique_ptr<PinnedSink> sealed;
  std::string sealed_path, clear_path;
  uint8_t* d_out = nullptr;  // payload bytes
  uint8_t* d_in = nullptr;   // the chunks (ciphertext + tags)

  ~Fixture() {
    cudaFree(d_out);
    cudaFree(d_in);
    std::error_code ec;
    std::filesystem::remove(sealed_path, ec);
    std::filesystem::remove(clear_path, ec);
  }

  uint64_t ChunkBytes() const { return header.FileSize() - header.header_length; }
  const uint8_t* Chunks() const { return sealed->data() + header.header_length; }

  ChunkBatch Batch(uint64_t first, uint64_t count) const {
    ChunkBatch b;
    b.suite = suite;
    b.first_index = first;
    b.count = count;
    b.file_chunk_count = header.chunk_count;
    b.chunk_size = header.params.chunk_size;
    b.payload_length = header.params.payload_length;
    std::copy(header.header_digest.begin(), header.header_digest.end(), b.header_digest.begin());
    return b;
  }
};

// Into the page cache (no fsync: the benchmark reads it back at once).
void WriteFile(const std::string& path, const uint8_t* data, uint64_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) Die("cannot write " + path);
}

Fixture& Get(Suite suite) {
  static std::unique_ptr<Fixture> current;
  if (current != nullptr && current->suite == suite) return *current;
  current.reset();  // one suite's GiBs at a time
  auto f = std::make_unique<Fixture>();
  f->suite = suite;
  f->payload = PayloadBytes();
  f->plaintext.resize(f->payload);
  uint64_t x = 0x9E3779B97F4A7C15ull;  // xorshift: cheap, incompressible enough
  for (uint64_t i = 0; i + 8 <= f->payload; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(f->plaintext.data() + i, &x, 8);
  }
  f->dek = Must(SecretBytes::Random(32), "dek");
  enclave::crypto::SealParams p;
  p.suite = suite;
  p.object_id = "gpu-bench";
  p.chunk_size = kChunk;
  p.payload_length = f->payload;
  const uint64_t chunks = enclave::crypto::ChunkCountFor(f->payload, kChunk);
  f->sealed = std::make_unique<PinnedSink>(f->payload + 16 * chunks + 4096);
  auto writer = Must(enclave::crypto::SealedFileWriter::Create(p, f->dek, f->sealed.get()), "writer");
  Must(writer->Append(f->plaintext), "seal");
  Must(writer->Finish(), "finish");
  f->header = Must(enclave::crypto::ParseSealedHeader({f->sealed->data(), f->sealed->size()}), "header");
  f->payload_key =
      Must(enclave::crypto::HkdfSha256(f->dek, f->header.salt, "enclave sealed-file v1 payload key", 32), "hkdf");
  const std::string tag = suite == Suite::kAes256Gcm ? "gcm" : "chacha";
  f->sealed_path = TempDir() + "/enclave-gpu-bench-" + tag + ".sealed";
  f->clear_path = TempDir() + "/enclave-gpu-bench-" + tag + ".clear";
  WriteFile(f->sealed_path, f->sealed->data(), f->sealed->size());
  WriteFile(f->clear_path, f->plaintext.data(), f->payload);
  Cuda(cudaMalloc(&f->d_out, f->payload), "cudaMalloc(out)");
  Cuda(cudaMemset(f->d_out, 0, f->payload), "cudaMemset(out)");
  Cuda(cudaMalloc(&f->d_in, f->ChunkBytes()), "cudaMalloc(in)");
  Cuda(cudaMemcpy(f->d_in, f->Chunks(), f->ChunkBytes(), cudaMemcpyHostToDevice), "cudaMemcpy(in)");
  current = std::move(f);
  return *current;
}

// Device plaintext equals the payload: first and last MiB and one in the middle.
bool OutputMatches(const Fixture& f) {
  const uint64_t mib = 1 << 20;
  std::vector<uint8_t> got(mib);
  for (uint64_t at : {uint64_t{0}, f.payload / 2 / mib * mib, f.payload - mib}) {
    if (cudaMemcpy(got.data(), f.d_out + at, mib, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    if (std::memcmp(got.data(), f.plaintext.data() + at, mib) != 0) return false;
  }
  return true;
}

// Elapsed milliseconds between two events on `streams`, all of which start after
// `start` and end before `stop`.
struct StreamTimer {
  cudaEvent_t start{}, stop{}, done[kDepth]{};
  cudaStream_t* streams;
  explicit StreamTimer(cudaStream_t* s) : streams(s) {
    Cuda(cudaEventCreate(&start), "event");
    Cuda(cudaEventCreate(&stop), "event");
    for (auto& d : done) Cuda(cudaEventCreateWithFlags(&d, cudaEventDisableTiming), "event");
  }
  ~StreamTimer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    for (auto& d : done) cudaEventDestroy(d);
  }
  void Begin() {
    Cuda(cudaEventRecord(start, streams[0]), "record");
    for (int i = 1; i < kDepth; ++i) Cuda(cudaStreamWaitEvent(streams[i], start, 0), "wait");
  }
  double EndMs() {
    for (int i = 1; i < kDepth; ++i) {
      Cuda(cudaEventRecord(done[i], streams[i]), "record");
      Cuda(cudaStreamWaitEvent(streams[0], done[i], 0), "wait");
    }
    Cuda(cudaEventRecord(stop, streams[0]), "record");
    Cuda(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    Cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    return ms;
  }
};

double PinnedCopyMs(Fixture& f, cudaStream_t s) {
  cudaEvent_t a, b;
  Cuda(cudaEventCreate(&a), "event");
  Cuda(cudaEventCreate(&b), "event");
  Cuda(cudaEventRecord(a, s), "record");
  Cuda(cudaMemcpyAsync(f.d_out, f.Chunks(), f.payload, cudaMemcpyHostToDevice, s), "copy");
  Cuda(cudaEventRecord(b, s), "record");
  Cuda(cudaEventSynchronize(b), "sync");
  float ms = 0;
  Cuda(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

double GBps(uint64_t bytes, double ms) { return static_cast<double>(bytes) / (ms * 1e-3) / 1e9; }

void Resident(benchmark::State& state, Suite suite) {
  Fixture& f = Get(suite);
  auto opener = Must(enclave::kernels::GpuChunkOpener::Create(f.payload_key, suite), "opener");
  cudaStream_t streams[kDepth];
  uint8_t* staging[kDepth];
  const uint64_t stored = kChunk + 16, per_batch = (static_cast<uint64_t>(state.range(0)) << 20) / stored;
  for (int i = 0; i < kDepth; ++i) {
    Cuda(cudaStreamCreate(&streams[i]), "stream");
    Cuda(cudaMalloc(&staging[i], per_batch * stored), "staging");
  }
  StreamTimer timer(streams);
  // The pipeline as GpuSealedStream runs it (kCopyStream: every copy on one stream, every
  // batch's kernels on another, joined by events), and variants that show why:
  // kPerStream, each batch's copy and kernels on one of kDepth streams (the layout before
  // 2026-11-30: its copies ran about 4% slower); kCopiesOnly, the same copies without
  // kernels; kCopiesBesideKernels, those copies while the kernels open the device-resident
  // chunks on a fourth stream (kernel work beside the copies did not slow them).
  enum Mode { kCopyStream, kPerStream, kCopiesOnly, kCopiesBesideKernels };
  cudaStream_t side;
  Cuda(cudaStreamCreate(&side), "stream");
  cudaEvent_t copied[kDepth], consumed[kDepth], first_in, last_out;
  for (int i = 0; i < kDepth; ++i) {
    Cuda(cudaEventCreateWithFlags(&copied[i], cudaEventDisableTiming), "event");
    Cuda(cudaEventCreateWithFlags(&consumed[i], cudaEventDisableTiming), "event");
  }
  Cuda(cudaEventCreate(&first_in), "event");  // around the copies: how long they took
  Cuda(cudaEventCreate(&last_out), "event");
  struct Times {
    double total = 0, copies = 0;
  };
  auto pipeline = [&](Mode mode, Times* t) {
    timer.Begin();
    if (mode == kCopiesBesideKernels) Cuda(cudaStreamWaitEvent(side, timer.start, 0), "wait");
    const uint64_t batches = (f.header.chunk_count + per_batch - 1) / per_batch;
    uint64_t k = 0;
    for (uint64_t first = 0; first < f.header.chunk_count; first += per_batch, ++k) {
      const int slot = static_cast<int>(k % kDepth);
      auto batch = f.Batch(first, std::min(per_batch, f.header.chunk_count - first));
      cudaStream_t copy = mode == kCopyStream ? streams[0] : streams[slot];
      cudaStream_t compute = mode == kCopyStream ? streams[1] : streams[slot];
      if (mode == kCopyStream && k >= kDepth) Cuda(cudaStreamWaitEvent(copy, consumed[slot], 0), "wait");
      if (k == 0) Cuda(cudaEventRecord(first_in, copy), "record");
      Cuda(cudaMemcpyAsync(staging[slot], f.Chunks() + batch.first_index * stored, batch.InputBytes(),
                           cudaMemcpyHostToDevice, copy),
           "copy");
      if (k + 1 == batches) Cuda(cudaEventRecord(last_out, copy), "record");
      if (mode == kCopyStream) {
        Cuda(cudaEventRecord(copied[slot], copy), "record");
        Cuda(cudaStreamWaitEvent(compute, copied[slot], 0), "wait");
      }
      if (mode == kCopyStream || mode == kPerStream) {
        Must(opener->Enqueue(batch, staging[slot], f.d_out + first * kChunk, compute), "enqueue");
      }
      if (mode == kCopyStream) Cuda(cudaEventRecord(consumed[slot], compute), "record");
      if (mode == kCopiesBesideKernels) {
        Must(opener->Enqueue(batch, f.d_in + first * stored, f.d_out + first * kChunk, side), "enqueue");
      }
    }
    if (mode == kCopiesBesideKernels) {  // the timer's end waits for the side stream too
      Cuda(cudaEventRecord(consumed[0], side), "record");
      Cuda(cudaStreamWaitEvent(streams[0], consumed[0], 0), "wait");
    }
    const double ms = timer.EndMs();
    float copies = 0;
    Cuda(cudaEventElapsedTime(&copies, first_in, last_out), "elapsed");
    t->total += ms;
    t->copies += copies;
    if (mode != kCopiesOnly) Must(opener->Check(), "authentication");
    return ms;
  };
  double copy_ms = 0;
  Times sealed, per_stream, copies_only, beside;
  for (auto _ : state) {
    copy_ms += PinnedCopyMs(f, streams[0]);
    pipeline(kCopiesOnly, &copies_only);
    pipeline(kCopiesBesideKernels, &beside);
    pipeline(kPerStream, &per_stream);
    state.SetIterationTime(pipeline(kCopyStream, &sealed) * 1e-3);  // last: its output is checked below
  }
  cudaStreamDestroy(side);
  for (int i = 0; i < kDepth; ++i) {
    cudaEventDestroy(copied[i]);
    cudaEventDestroy(consumed[i]);
  }
  cudaEventDestroy(first_in);
  cudaEventDestroy(last_out);
  const double sealed_ms = sealed.total;
  {
    const double n = static_cast<double>(state.iterations());
    state.counters["ratio_per_stream"] = copy_ms / per_stream.total;
    state.counters["ratio_copies_only"] = copy_ms / copies_only.total;
    // The copies' own time (first copy's start to last copy's end), in each layout.
    state.counters["copies_ms"] = sealed.copies / n;
    state.counters["copies_ms_per_stream"] = per_stream.copies / n;
    state.counters["copies_ms_alone"] = copies_only.copies / n;
    state.counters["copies_ms_beside_kernels"] = beside.copies / n;
  }
  if (!OutputMatches(f)) state.SkipWithError("device plaintext differs from the payload");
  const double n = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(f.payload * state.iterations()));
  state.counters["sealed_GBps"] = GBps(f.payload, sealed_ms / n);
  state.counters["pinned_h2d_GBps"] = GBps(f.payload, copy_ms / n);
  state.counters["ratio"] = copy_ms / sealed_ms;
  for (int i = 0; i < kDepth; ++i) {
    cudaFree(staging[i]);
    cudaStreamDestroy(streams[i]);
  }
}

// The clear baseline of gpu_file: GpuSealedStream's staging (same batch size, depth and
// read threads) reading plaintext and only copying it.
double ClearFileMs(const Fixture& f, uint8_t* pinned[kDepth], uint8_t* d_out, cudaStream_t streams[kDepth],
                   cudaEvent_t copied[kDepth]) {
  auto file = Must(enclave::FileReader::Open(f.clear_path), "open clear file");
  const auto t0 = std::chrono::steady_clock::now();
  bool pending[kDepth] = {};
  uint64_t k = 0;
  const uint64_t batch = kBatchBytes / (kChunk + 16) * kChunk;
  for (uint64_t at = 0; at < f.payload; at += batch, ++k) {
    const int slot = static_cast<int>(k % kDepth);
    if (pending[slot]) Cuda(cudaEventSynchronize(copied[slot]), "sync");
    const uint64_t bytes = std::min(batch, f.payload - at), part = (bytes + kReadThreads - 1) / kReadThreads;
    {
      std::vector<std::jthread> readers;
      for (uint64_t from = 0; from < bytes; from += part) {
        readers.emplace_back([&, from] {
          Must(file.ReadAt(at + from, pinned[slot] + from, std::min(part, bytes - from)), "read");
        });
      }
    }
    Cuda(cudaMemcpyAsync(d_out + at, pinned[slot], bytes, cudaMemcpyHostToDevice, streams[slot]), "copy");
    Cuda(cudaEventRecord(copied[slot], streams[slot]), "record");
    pending[slot] = true;
  }
  Cuda(cudaDeviceSynchronize(), "sync");
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void File(benchmark::State& state, Suite suite) {
  Fixture& f = Get(suite);
  enclave::kernels::GpuStreamOptions opt;
  opt.batch_bytes = kBatchBytes;
  opt.depth = kDepth;
  opt.read_threads = kReadThreads;
  auto stream = Must(enclave::kernels::GpuSealedStream::Open(f.sealed_path, f.dek, opt), "open sealed file");
  uint8_t* pinned[kDepth];
  cudaStream_t streams[kDepth];
  cudaEvent_t copied[kDepth];
  for (int i = 0; i < kDepth; ++i) {
    Cuda(cudaHostAlloc(&pinned[i], kBatchBytes, cudaHostAllocDefault), "pinned");
    Cuda(cudaStreamCreate(&streams[i]), "stream");
    Cuda(cudaEventCreateWithFlags(&copied[i], cudaEventDisableTiming), "event");
  }
  double sealed_ms = 0, clear_ms = 0, copy_ms = 0;
  for (auto _ : state) {
    copy_ms += PinnedCopyMs(f, streams[0]);
    clear_ms += ClearFileMs(f, pinned, f.d_out, streams, copied);
    Cuda(cudaMemset(f.d_out, 0, f.payload), "cudaMemset");  // the check below must see the sealed path's output
    Cuda(cudaDeviceSynchronize(), "sync");
    const auto t0 = std::chrono::steady_clock::now();
    Must(stream->ReadAll(f.d_out), "sealed stream");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(ms * 1e-3);
    sealed_ms += ms;
  }
  if (!OutputMatches(f)) state.SkipWithError("device plaintext differs from the payload");
  const double n = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(f.payload * state.iterations()));
  state.counters["sealed_GBps"] = GBps(f.payload, sealed_ms / n);
  state.counters["clear_file_GBps"] = GBps(f.payload, clear_ms / n);
  state.counters["pinned_h2d_GBps"] = GBps(f.payload, copy_ms / n);
  state.counters["ratio"] = clear_ms / sealed_ms;
  for (int i = 0; i < kDepth; ++i) {
    cudaEventDestroy(copied[i]);
    cudaStreamDestroy(streams[i]);
    cudaFreeHost(pinned[i]);
  }
}

void Kernel(benchmark::State& state, Suite suite) {
  Fixture& f = Get(suite);
  auto opener = Must(enclave::kernels::GpuChunkOpener::Create(f.payload_key, suite), "opener");
  cudaStream_t s;
  Cuda(cudaStreamCreate(&s), "stream");
  cudaEvent_t a, b;
  Cuda(cudaEventCreate(&a), "event");
  Cuda(cudaEventCreate(&b), "event");
  const auto batch = f.Batch(0, f.header.chunk_count);
  Cuda(cudaMemset(f.d_out, 0, f.payload), "cudaMemset");
  Must(opener->Enqueue(batch, f.d_in, f.d_out, s), "warm-up");
  Must(opener->Check(), "authentication");
  for (auto _ : state) {
    Cuda(cudaEventRecord(a, s), "record");
    Must(opener->Enqueue(batch, f.d_in, f.d_out, s), "enqueue");
    Cuda(cudaEventRecord(b, s), "record");
    Cuda(cudaEventSynchronize(b), "sync");
    float ms = 0;
    Cuda(cudaEventElapsedTime(&ms, a, b), "elapsed");
    state.SetIterationTime(ms * 1e-3);
  }
  Must(opener->Check(), "authentication");
  if (!OutputMatches(f)) state.SkipWithError("device plaintext differs from the payload");
  state.SetBytesProcessed(static_cast<int64_t>(f.payload * state.iterations()));
  // Where the time goes, kernel by kernel (one more run, events between the launches).
  const auto times = Must(opener->TimeKernels(batch, f.d_in, f.d_out), "kernel times");
  Must(opener->Check(), "authentication");
  const double bytes = static_cast<double>(f.payload);
  state.counters["tag_segments_GBps"] = bytes / (times.tag_segments_ms * 1e-3) / 1e9;
  state.counters["tag_finish_GBps"] = bytes / (times.tag_finish_ms * 1e-3) / 1e9;
  state.counters["decrypt_GBps"] = bytes / (times.decrypt_ms * 1e-3) / 1e9;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
}

void Register() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {  // the CUDA error says why (no device, driver too old, ...)
    std::fprintf(stderr, "enclave_bench_gpu: no GPU visible (%s): no GPU benchmark registered\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    std::fprintf(stderr, "enclave_bench_gpu: %s (sm_%d%d, %d SMs, %.0f GiB), CUDA runtime %d, driver %d\n", prop.name,
                 prop.major, prop.minor, prop.multiProcessorCount,
                 static_cast<double>(prop.totalGlobalMem) / (1ull << 30), runtime, driver);
  }
  for (Suite s : {Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
    const std::string name = s == Suite::kAes256Gcm ? "aes-256-gcm" : "chacha20-poly1305";
    benchmark::RegisterBenchmark(("gpu_kernel/" + name).c_str(), [s](benchmark::State& st) { Kernel(st, s); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(5);
    benchmark::RegisterBenchmark(("gpu_resident/" + name).c_str(), [s](benchmark::State& st) { Resident(st, s); })
        ->ArgName("batch_MiB")
        ->Arg(16)
        ->Arg(64)
        ->Arg(256)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(5);
    benchmark::RegisterBenchmark(("gpu_file/" + name).c_str(), [s](benchmark::State& st) { File(st, s); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Must(enclave::crypto::InitCrypto(), "crypto init");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
