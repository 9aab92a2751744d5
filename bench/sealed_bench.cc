// Throughput of the sealed-file envelope against the raw AEAD it is built on, one core,
// one thread, side by side in one run (./scripts/bench prints the ours/raw ratios).
//
// Every benchmark walks the same 64 MiB payload in chunks (64 KiB, and 1 MiB), chunk by
// chunk, so ours and the baselines stream the same amount of memory; rates are plaintext
// bytes per second of CPU time.
//
//   open/raw_evp      EVP_DecryptInit_ex with only the nonce per message (key set once),
//                     32 bytes of AAD, tag check: the floor any EVP-based reader pays
//   open/sodium       libsodium's crypto_aead_*_decrypt, for reference (AES-GCM only where
//                     libsodium supports the CPU)
//   open/ours         crypto::SealedFileKey::OpenChunk over an in-memory sealed payload
//   seal/raw_evp      EVP_EncryptInit_ex with only the nonce, tag out
//   seal/ours         crypto::SealedFileWriter sealing the whole payload (appended in
//                     chunk-sized pieces) into a sink that discards
//   file_read/ours    crypto::SealedFileReader: Open, Unlock, ReadChunk of every chunk, of
//                     a sealed file in the page cache (what SealedDatasetReader does)
//   file_read/pread   the same reads without decryption (the I/O part of file_read/ours)
//
// Names are <op>/<impl>/<suite>/<chunk>; ./scripts/bench parses them.
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/crypto/aead.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/crypto/secret_bytes.h"

namespace {

using enclave::ByteSpan;
using enclave::crypto::SecretBytes;
using enclave::crypto::Suite;

constexpr uint64_t kPayloadBytes = 64ull << 20;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "enclave_bench_sealed: %s\n", what.c_str());
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

const EVP_CIPHER* Cipher(Suite s) { return s == Suite::kAes256Gcm ? EVP_aes_256_gcm() : EVP_chacha20_poly1305(); }

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

// Everything one (suite, chunk size) needs, built once and kept while benchmarks of that
// configuration run (they are registered together).
struct Fixture {
  Suite suite;
  uint32_t chunk;
  SecretBytes dek;                 // the sealed file's data key
  std::vector<uint8_t> plaintext;  // kPayloadBytes
  std::vector<uint8_t> sealed;     // header || chunks, as SealedFileWriter wrote it
  enclave::crypto::SealedHeader header;
  // The same chunks sealed by raw EVP under raw_key, laid out at the same offsets as in
  // `sealed` (so both read memory with the same alignment); AAD is aad.
  std::vector<uint8_t> raw;
  std::vector<uint8_t> raw_key, aad;
  std::string file;  // `sealed` in a temporary file

  uint64_t chunks() const { return header.chunk_count; }
  uint64_t Offset(uint64_t i) const { return header.ChunkOffset(i); }
  std::array<uint8_t, 12> Nonce(uint64_t i) const { return enclave::crypto::ChunkNonce(i, i + 1 == chunks()); }

  ~Fixture() {
    if (!file.empty()) ::unlink(file.c_str());
  }
};

class DiscardSink final : public enclave::crypto::ByteSink {
 public:
  enclave::Status Write(ByteSpan bytes) override {
    benchmark::DoNotOptimize(bytes.data());
    return enclave::OkStatus();
  }
};

enclave::crypto::SealParams Params(Suite suite, uint32_t chunk) {
  enclave::crypto::SealParams p;
  p.suite = suite;
  p.object_id = "bench";
  p.chunk_size = chunk;
  p.payload_length = kPayloadBytes;
  p.metadata.assign(41, 0x5a);  // about the size of a small schema
  return p;
}

std::unique_ptr<Fixture> Build(Suite suite, uint32_t chunk) {
  auto f = std::make_unique<Fixture>();
  f->suite = suite;
  f->chunk = chunk;
  f->dek = Must(SecretBytes::Random(32), "dek");
  f->plaintext.resize(kPayloadBytes);
  uint64_t x = 0x9e3779b97f4a7c15ull;  // xorshift: cheap, not compressible
  for (size_t i = 0; i < f->plaintext.size(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(&f->plaintext[i], &x, 8);
  }

  enclave::crypto::MemorySink sink;
  sink.data.reserve(kPayloadBytes + (kPayloadBytes / chunk + 1) * 16 + 4096);
  auto w = Must(enclave::crypto::SealedFileWriter::Create(Params(suite, chunk), f->dek, &sink), "writer");
  Must(w->Append(f->plaintext), "append");
  Must(w->Finish(), "finish");
  f->sealed = std::move(sink.data);
  f->header = Must(enclave::crypto::ParseSealedHeader(f->sealed), "parse");

  f->raw_key.resize(32);
  f->aad.resize(32);
  randombytes_buf(f->raw_key.data(), 32);
  randombytes_buf(f->aad.data(), 32);
  f->raw.assign(f->sealed.size(), 0);
  Ctx ctx(EVP_CIPHER_CTX_new());
  if (EVP_EncryptInit_ex(ctx.get(), Cipher(suite), nullptr, f->raw_key.data(), nullptr) != 1) Die("EVP init");
  for (uint64_t i = 0; i < f->chunks(); ++i) {
    auto n = f->Nonce(i);
    uint8_t* out = &f->raw[f->Offset(i)];
    int len = 0;
    bool ok = EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, nullptr, n.data()) == 1 &&
              EVP_EncryptUpdate(ctx.get(), nullptr, &len, f->aad.data(), 32) == 1 &&
              EVP_EncryptUpdate(ctx.get(), out, &len, &f->plaintext[i * chunk], static_cast<int>(chunk)) == 1 &&
              EVP_EncryptFinal_ex(ctx.get(), out + len, &len) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_GET_TAG, 16, out + chunk) == 1;
    if (!ok) Die("EVP encrypt");
  }

  auto dir = std::filesystem::temp_directory_path();
  std::string templ = (dir / "enclave-bench-XXXXXX").string();
  int fd = ::mkstemp(templ.data());
  if (fd < 0) Die("mkstemp in " + dir.string());
  f->file = templ;
  for (size_t off = 0; off < f->sealed.size();) {
    ssize_t n = ::write(fd, f->sealed.data() + off, f->sealed.size() - off);
    if (n <= 0) Die("writing " + f->file);
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  Must(enclave::crypto::SealedFileDigest(f->file).status(), "warming the page cache");
  return f;
}

Fixture& Get(Suite suite, uint32_t chunk) {
  static std::unique_ptr<Fixture> cached;
  if (!cached || cached->suite != suite || cached->chunk != chunk) {
    cached.reset();
    cached = Build(suite, chunk);
  }
  return *cached;
}

void Done(benchmark::State& state, uint64_t bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes_per_iteration));
}

// --- open ---------------------------------------------------------------------------

void OpenRawEvp(benchmark::State& state, Suite suite, uint32_t chunk) {
  Fixture& f = Get(suite, chunk);
  SecretBytes out = Must(SecretBytes::Create(chunk), "out");
  Ctx ctx(EVP_CIPHER_CTX_new());
  if (EVP_DecryptInit_ex(ctx.get(), Cipher(suite), nullptr, f.raw_key.data(), nullptr) != 1) Die("EVP init");
  uint64_t i = 0;
  for (auto _ : state) {
    auto n = f.Nonce(i);
    const uint8_t* in = &f.raw[f.Offset(i)];
    uint8_t* o = out.ExposeSecretMutable().data();
    int len = 0, final_len = 0;
    bool ok = EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, nullptr, n.data()) == 1 &&
              EVP_DecryptUpdate(ctx.get(), nullptr, &len, f.aad.data(), 32) == 1 &&
              EVP_DecryptUpdate(ctx.get(), o, &len, in, static_cast<int>(chunk)) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_SET_TAG, 16, const_cast<uint8_t*>(in + chunk)) == 1 &&
              EVP_DecryptFinal_ex(ctx.get(), o + len, &final_len) == 1;
    if (!ok) {
      state.SkipWithError("raw EVP decrypt failed");
      break;
    }
    benchmark::ClobberMemory();
    if (++i == f.chunks()) i = 0;
  }
  Done(state, chunk);
}

void OpenSodium(benchmark::State& state, Suite suite, uint32_t chunk) {
  Fixture& f = Get(suite, chunk);
  SecretBytes out = Must(SecretBytes::Create(chunk), "out");
  uint64_t i = 0;
  for (auto _ : state) {
    auto n = f.Nonce(i);
    const uint8_t* in = &f.raw[f.Offset(i)];
    unsigned long long len = 0;
    int rc = suite == Suite::kAes256Gcm
                 ? crypto_aead_aes256gcm_decrypt(out.ExposeSecretMutable().data(), &len, nullptr, in, chunk + 16,
                                                 f.aad.data(), 32, n.data(), f.raw_key.data())
                 : crypto_aead_chacha20poly1305_ietf_decrypt(out.ExposeSecretMutable().data(), &len, nullptr, in,
                                                             chunk + 16, f.aad.data(), 32, n.data(), f.raw_key.data());
    if (rc != 0) {
      state.SkipWithError("libsodium decrypt failed");
      break;
    }
    benchmark::ClobberMemory();
    if (++i == f.chunks()) i = 0;
  }
  Done(state, chunk);
}

void OpenOurs(benchmark::State& state, Suite suite, uint32_t chunk) {
  Fixture& f = Get(suite, chunk);
  SecretBytes out = Must(SecretBytes::Create(chunk), "out");
  auto key = Must(enclave::crypto::SealedFileKey::Unlock(f.header, f.dek), "unlock");
  uint64_t i = 0;
  for (auto _ : state) {
    ByteSpan in(&f.sealed[f.Offset(i)], chunk + enclave::crypto::kAeadTagBytes);
    if (!key.OpenChunk(i, in, out.ExposeSecretMutable()).ok()) {
      state.SkipWithError("OpenChunk failed");
      break;
    }
    benchmark::ClobberMemory();
    if (++i == f.chunks()) i = 0;
  }
  Done(state, chunk);
}

// --- seal ---------------------------------------------------------------------------

void SealRawEvp(benchmark::State& state, Suite suite, uint32_t chunk) {
  Fixture& f = Get(suite, chunk);
  std::vector<uint8_t> out(chunk + 16);
  Ctx ctx(EVP_CIPHER_CTX_new());
  if (EVP_EncryptInit_ex(ctx.get(), Cipher(suite), nullptr, f.raw_key.data(), nullptr) != 1) Die("EVP init");
  uint64_t i = 0;
  for (auto _ : state) {
    auto n = f.Nonce(i);
    int len = 0, final_len = 0;
    bool ok = EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, nullptr, n.data()) == 1 &&
              EVP_EncryptUpdate(ctx.get(), nullptr, &len, f.aad.data(), 32) == 1 &&
              EVP_EncryptUpdate(ctx.get(), out.data(), &len, &f.plaintext[i * chunk], static_cast<int>(chunk)) == 1 &&
              EVP_EncryptFinal_ex(ctx.get(), out.data() + len, &final_len) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_GET_TAG, 16, out.data() + chunk) == 1;
    if (!ok) {
      state.SkipWithError("raw EVP encrypt failed");
      break;
    }
    benchmark::ClobberMemory();
    if (++i == f.chunks()) i = 0;
  }
  Done(state, chunk);
}

void SealOurs(benchmark::State& state, Suite suite, uint32_t chunk) {
  Fixture& f = Get(suite, chunk);
  const auto params = Params(suite, chunk);
  DiscardSink sink;
  for (auto _ : state) {
    auto w = enclave::crypto::SealedFileWriter::Create(params, f.dek, &sink);
    bool ok = w.ok();
    for (uint64_t off = 0; ok && off < kPayloadBytes; off += chunk) {
      ok = (*w)->Append(ByteSpan(&f.plaintext[off], chunk)).ok();
    }
    if (!ok || !(*w)->Finish().ok()) {
      state.SkipWithError("SealedFileWriter failed");
      break;
    }
  }
  Done(state, kPayloadBytes);
}

// --- whole file ---------------------------------------------------------------------

void FileReadOurs(benchmark::State& state, Suite suite, uint32_t chunk) {
  Fixture& f = Get(suite, chunk);
  SecretBytes out = Must(SecretBytes::Create(chunk), "out");
  for (auto _ : state) {
    auto r = enclave::crypto::SealedFileReader::Open(f.file);
    bool ok = r.ok() && (*r)->Unlock(f.dek).ok();
    for (uint64_t i = 0; ok && i < f.chunks(); ++i) {
      ok = (*r)->ReadChunk(i, out.ExposeSecretMutable().first(f.header.ChunkPlaintextSize(i))).ok();
    }
    if (!ok) {
      state.SkipWithError("SealedFileReader failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  Done(state, kPayloadBytes);
}

void FileReadPread(benchmark::State& state, Suite suite, uint32_t chunk) {
  Fixture& f = Get(suite, chunk);
  std::vector<uint8_t> buf(chunk + 16);
  for (auto _ : state) {
    auto r = enclave::FileReader::Open(f.file);
    bool ok = r.ok();
    for (uint64_t i = 0; ok && i < f.chunks(); ++i) {
      ok = r->ReadAt(f.Offset(i), buf.data(), f.header.ChunkPlaintextSize(i) + 16).ok();
    }
    if (!ok) {
      state.SkipWithError("pread failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  Done(state, kPayloadBytes);
}

void RegisterAll() {
  using Fn = void (*)(benchmark::State&, Suite, uint32_t);
  struct Entry {
    const char* name;
    Fn fn;
  };
  const bool sodium_aes = crypto_aead_aes256gcm_is_available() == 1;
  for (uint32_t chunk : {64u << 10, 1u << 20}) {
    const std::string size = chunk == (64u << 10) ? "64KiB" : "1MiB";
    for (Suite suite : {Suite::kAes256Gcm, Suite::kChaCha20Poly1305}) {
      const std::string suite_name(enclave::crypto::SuiteName(suite));
      std::vector<Entry> entries = {
          {"open/raw_evp", OpenRawEvp}, {"open/ours", OpenOurs},           {"open/sodium", OpenSodium},
          {"seal/raw_evp", SealRawEvp}, {"seal/ours", SealOurs},           {"file_read/ours", FileReadOurs},
          {"file_read/pread", FileReadPread},
      };
      for (const Entry& e : entries) {
        if (e.fn == OpenSodium && suite == Suite::kAes256Gcm && !sodium_aes) continue;
        // pread does not depend on the suite: once per chunk size.
        if (e.fn == FileReadPread && suite != Suite::kAes256Gcm) continue;
        std::string name = std::string(e.name) + "/" + suite_name + "/" + size;
        benchmark::RegisterBenchmark(name.c_str(), e.fn, suite, chunk);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Must(enclave::crypto::InitCrypto(), "init");
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("payload_bytes", std::to_string(kPayloadBytes));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
