// The shared chunk code of both suites against OpenSSL (through crypto::Aead), the
// published vectors and the sealed-file writer, sealing as well as opening, and the
// shared SHA-256 against FIPS 180 vectors and OpenSSL; on a GPU, the CUDA paths against
// the CPU.
#include "enclave/kernels/chunk_open.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "enclave/crypto/aead.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/kernels/aes256_gcm.h"
#include "enclave/kernels/chacha20_poly1305.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/model_export.h"
#include "enclave/kernels/device_seal.h"
#include "enclave/kernels/sha256.h"
#if ENCLAVE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace enclave::kernels {
namespace {

using crypto::SecretBytes;

std::vector<uint8_t> RandomVector(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// RFC 8439 section 2.3.2: the ChaCha20 block function test vector.
TEST(ChaCha20, BlockFunctionMatchesRfc8439) {
  uint8_t key[32], nonce[12] = {0, 0, 0, 0x09, 0, 0, 0, 0x4a, 0, 0, 0, 0}, out[64];
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i);
  ChaCha20Block(key, 1, nonce, out);
  const uint8_t expected_start[16] = {0x10, 0xf1, 0xe7, 0xe4, 0xd1, 0x3b, 0x59, 0x15,
                                      0x50, 0x0f, 0xdd, 0x1f, 0xa3, 0x20, 0x71, 0xc4};
  EXPECT_EQ(0, memcmp(out, expected_start, 16));
  EXPECT_EQ(out[63], 0x4e);
}

// RFC 8439 section 2.5.2: the Poly1305 test vector.
TEST(Poly1305, MatchesRfc8439) {
  const uint8_t key[32] = {0x85, 0xd6, 0xbe, 0x78, 0x57, 0x55, 0x6d, 0x33, 0x7f, 0x44, 0x52,
                           0xfe, 0x42, 0xd5, 0x06, 0xa8, 0x01, 0x03, 0x80, 0x8a, 0xfb, 0x0d,
                           0xb2, 0xfd, 0x4a, 0xbf, 0xf6, 0xaf, 0x41, 0x49, 0xf5, 0x1b};
  const char* msg = "Cryptographic Forum Research Group";  // 34 bytes: two full blocks and a 2-byte tail
  Poly1305 mac;
  mac.Init(key);
  mac.Block(reinterpret_cast<const uint8_t*>(msg), 1u << 24);
  mac.Block(reinterpret_cast<const uint8_t*>(msg) + 16, 1u << 24);
  uint8_t tail[16] = {'u', 'p', 1};  // the raw MAC pads a short block with 0x01, then no high bit
  mac.Block(tail, 0);
  uint8_t tag[16];
  mac.Final(tag);
  const uint8_t expected[16] = {0xa8, 0x06, 0x1d, 0xc1, 0x30, 0x51, 0x36, 0xc6,
                                0xc2, 0x2b, 0x8b, 0xaf, 0x0c, 0x01, 0x27, 0xa9};
  EXPECT_EQ(0, memcmp(tag, expected, 16));
}

// Our tag and keystream for one suite, from the raw key and nonce.
using OursFn = std::function<void(const std::vector<uint8_t>& key, const std::vector<uint8_t>& nonce,
                                  const std::vector<uint8_t>& aad, const uint8_t* ct, size_t len, uint8_t tag[16],
                                  uint8_t* plain)>;

// Seals random messages with OpenSSL (crypto::Aead) and requires our code to compute the
// same tag and to decrypt to the same plaintext, across block-boundary sizes.
void ExpectMatchesOpenSsl(crypto::Suite suite, unsigned seed, const OursFn& ours) {
  std::mt19937 rng(seed);
  for (size_t len : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096, 4099}) {
    for (size_t aad_len : {0, 1, 16, 32, 33}) {
      auto key_bytes = RandomVector(rng, 32);
      auto nonce = RandomVector(rng, 12);
      auto aad = RandomVector(rng, aad_len);
      auto msg = RandomVector(rng, len);
      auto key = *SecretBytes::CopyFrom(key_bytes);
      auto aead = std::move(crypto::Aead::Create(suite, key)).value();
      std::vector<uint8_t> sealed(len + 16);
      ASSERT_TRUE(aead->Seal(nonce, aad, msg, sealed).ok());
      uint8_t tag[16];
      std::vector<uint8_t> plain(len);
      ours(key_bytes, nonce, aad, sealed.data(), len, tag, plain.data());
      EXPECT_EQ(0, memcmp(tag, sealed.data() + len, 16)) << "len " << len << " aad " << aad_len;
      EXPECT_EQ(plain, msg) << "len " << len;
    }
  }
}

TEST(ChaCha20Poly1305, TagAndKeystreamMatchOpenSslForManySizes) {
  ExpectMatchesOpenSsl(crypto::Suite::kChaCha20Poly1305, 7,
                       [](const auto& key, const auto& nonce, const auto& aad, const uint8_t* ct, size_t len,
                          uint8_t tag[16], uint8_t* plain) {
                         ChaCha20Poly1305Tag(key.data(), nonce.data(), aad.data(), aad.size(), ct, len, tag);
                         for (size_t b = 0; b * 64 < len; ++b) {
                           ChaCha20XorBlock(key.data(), static_cast<uint32_t>(b + 1), nonce.data(), ct + b * 64,
                                            plain + b * 64, std::min<size_t>(64, len - b * 64));
                         }
                       });
}

// FIPS 197 appendix C.3: AES-256 on 00112233...ff with key 000102...1f.
TEST(Aes256, EncryptBlockMatchesFips197) {
  uint8_t key[32], in[16];
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 16; ++i) in[i] = static_cast<uint8_t>(0x11 * i);
  Aes256RoundKeys rk;
  Aes256ExpandKey(key, kAesTable.t0, &rk);
  uint8_t out[16];
  Aes256EncryptBlock(rk, kAesTable.t0, in, out);
  const uint8_t expected[16] = {0x8e, 0xa2, 0xb7, 0xca, 0x51, 0x67, 0x45, 0xbf,
                                0xea, 0xfc, 0x49, 0x90, 0x4b, 0x49, 0x60, 0x89};
  EXPECT_EQ(0, memcmp(out, expected, 16));
  // The last round key (FIPS 197 appendix A.3, w[56..59]).
  const uint8_t last[16] = {0xfe, 0x48, 0x90, 0xd1, 0xe6, 0x18, 0x8d, 0x0b,
                            0x04, 0x6d, 0xf3, 0x44, 0x70, 0x6c, 0x63, 0x1e};
  uint8_t fips_key[32] = {0x60, 0x3d, 0xeb, 0x10, 0x15, 0xca, 0x71, 0xbe, 0x2b, 0x73, 0xae,
                          0xf0, 0x85, 0x7d, 0x77, 0x81, 0x1f, 0x35, 0x2c, 0x07, 0x3b, 0x61,
                          0x08, 0xd7, 0x2d, 0x98, 0x10, 0xa3, 0x09, 0x14, 0xdf, 0xf4};
  Aes256ExpandKey(fips_key, kAesTable.t0, &rk);
  uint8_t got[16];
  for (int i = 0; i < 4; ++i) Store32Le(got + 4 * i, rk.w[56 + i]);
  EXPECT_EQ(0, memcmp(got, last, 16));
}

TEST(Aes256Gcm, TagAndKeystreamMatchOpenSslForManySizes) {
  ExpectMatchesOpenSsl(crypto::Suite::kAes256Gcm, 11,
                       [](const auto& key, const auto& nonce, const auto& aad, const uint8_t* ct, size_t len,
                          uint8_t tag[16], uint8_t* plain) {
                         Aes256RoundKeys rk;
                         Aes256ExpandKey(key.data(), kAesTable.t0, &rk);
                         const uint8_t zero[16] = {0};
                         uint8_t h[16];
                         Aes256EncryptBlock(rk, kAesTable.t0, zero, h);
                         Aes256GcmTag(rk, kAesTable.t0, Gf128Load(h), nonce.data(), aad.data(), aad.size(), ct, len, tag);
                         for (size_t b = 0; b * 16 < len; ++b) {
                           Aes256GcmXorBlock(rk, kAesTable.t0, nonce.data(), static_cast<uint32_t>(b), ct + b * 16,
                                             plain + b * 16, std::min<size_t>(16, len - b * 16));
                         }
                       });
}

// A sealed file made by the crypto library, opened in bulk by the kernel code.
struct SealedFixture {
  std::vector<uint8_t> file;
  crypto::SealedHeader header;
  SecretBytes payload_key;
  std::vector<uint8_t> plaintext;

  static SealedFixture Make(uint64_t payload_length, uint32_t chunk_size, crypto::Suite suite) {
    SealedFixture f;
    std::mt19937 rng(static_cast<unsigned>(payload_length));
    f.plaintext = RandomVector(rng, payload_length);
    auto dek = *SecretBytes::Random(32);
    crypto::SealParams p;
    p.suite = suite;
    p.object_id = "kernel-test";
    p.chunk_size = chunk_size;
    p.payload_length = payload_length;
    crypto::MemorySink sink;
    auto writer = std::move(crypto::SealedFileWriter::Create(p, dek, &sink)).value();
    EXPECT_TRUE(writer->Append(f.plaintext).ok());
    EXPECT_TRUE(writer->Finish().ok());
    f.file = std::move(sink.data);
    f.header = *crypto::ParseSealedHeader(f.file);
    f.payload_key = *crypto::HkdfSha256(dek, f.header.salt, "enclave sealed-file v1 payload key", 32);
    return f;
  }

  ChunkBatch Batch(uint64_t first, uint64_t count) const {
    ChunkBatch b;
    b.suite = header.params.suite;
    b.first_index = first;
    b.count = count;
    b.file_chunk_count = header.chunk_count;
    b.chunk_size = header.params.chunk_size;
    b.payload_length = header.params.payload_length;
    std::copy(header.header_digest.begin(), header.header_digest.end(), b.header_digest.begin());
    return b;
  }

  const uint8_t* ChunkData(uint64_t index) const { return file.data() + header.ChunkOffset(index); }
};

class ChunkOpen : public ::testing::TestWithParam<crypto::Suite> {};

TEST_P(ChunkOpen, CpuPathOpensWhatTheSealedWriterWrote) {
  for (uint64_t len : {0ull, 1ull, 1000ull, 4096ull, 10000ull, 100003ull}) {
    auto f = SealedFixture::Make(len, 4096, GetParam());
    auto batch = f.Batch(0, f.header.chunk_count);
    std::vector<uint8_t> out(batch.OutputBytes(), 0xAA);
    ASSERT_TRUE(OpenChunks(f.payload_key, batch, f.ChunkData(0), out.data()).ok()) << len;
    EXPECT_EQ(out, f.plaintext) << len;
    if (f.header.chunk_count >= 3) {  // a batch from the middle, not including the last chunk
      auto mid = f.Batch(1, 1);
      std::vector<uint8_t> part(mid.OutputBytes());
      ASSERT_TRUE(OpenChunks(f.payload_key, mid, f.ChunkData(1), part.data()).ok());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), f.plaintext.begin() + 4096));
    }
  }
}

TEST_P(ChunkOpen, OneBadChunkReleasesNothing) {
  auto f = SealedFixture::Make(20000, 4096, GetParam());
  auto batch = f.Batch(0, f.header.chunk_count);
  f.file[f.header.ChunkOffset(3) + 7] ^= 0x01;
  std::vector<uint8_t> out(batch.OutputBytes(), 0xAA);
  Status s = OpenChunks(f.payload_key, batch, f.ChunkData(0), out.data());
  EXPECT_EQ(s.code(), Code::kAuthFailed);
  EXPECT_NE(s.message().find("chunk 3"), std::string::npos) << s.message();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0xAA; })) << "plaintext released";
}

TEST_P(ChunkOpen, ChunkPresentedAtAnotherIndexOrAsLastFails) {
  auto f = SealedFixture::Make(20000, 4096, GetParam());  // 5 chunks
  std::vector<uint8_t> out(4096);
  // Chunk 1's bytes claimed as chunk 2.
  EXPECT_EQ(OpenChunks(f.payload_key, f.Batch(2, 1), f.ChunkData(1), out.data()).code(),
            Code::kAuthFailed);
  // The file cut after chunk 2: chunk 2 cannot pose as the last one.
  auto cut = f.Batch(2, 1);
  cut.file_chunk_count = 3;
  cut.payload_length = 3 * 4096;
  EXPECT_EQ(OpenChunks(f.payload_key, cut, f.ChunkData(2), out.data()).code(), Code::kAuthFailed);
}

TEST_P(ChunkOpen, GpuPathMatchesCpuPath) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU (or built without CUDA): the GPU path is checked by scripts/gpu-check";
#if ENCLAVE_HAVE_CUDA
  auto f = SealedFixture::Make(3'000'001, 65536, GetParam());
  auto batch = f.Batch(0, f.header.chunk_count);
  uint8_t *d_in = nullptr, *d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, batch.InputBytes()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, batch.OutputBytes()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, f.ChunkData(0), batch.InputBytes(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(OpenChunksOnGpu(f.payload_key, batch, d_in, d_out).ok());
  std::vector<uint8_t> out(batch.OutputBytes());
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, f.plaintext);
  // A flipped byte: authentication fails and the output buffer is not written.
  ASSERT_EQ(cudaMemset(d_out, 0, batch.OutputBytes()), cudaSuccess);
  uint8_t flip = f.ChunkData(17)[5] ^ 0x80;
  ASSERT_EQ(cudaMemcpy(d_in + batch.InputOffset(17) + 5, &flip, 1, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(OpenChunksOnGpu(f.payload_key, batch, d_in, d_out).code(), Code::kAuthFailed);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
  cudaFree(d_in);
  cudaFree(d_out);
#endif
}

TEST_P(ChunkOpen, CpuSealWritesTheSealedWritersChunks) {
  for (uint64_t len : {0ull, 1ull, 1000ull, 4096ull, 10000ull, 100003ull}) {
    auto f = SealedFixture::Make(len, 4096, GetParam());
    auto batch = f.Batch(0, f.header.chunk_count);
    std::vector<uint8_t> sealed(batch.InputBytes(), 0xAA);
    ASSERT_TRUE(SealChunks(f.payload_key, batch, f.plaintext.data(), sealed.data()).ok()) << len;
    EXPECT_TRUE(std::equal(sealed.begin(), sealed.end(), f.ChunkData(0))) << len;
    if (f.header.chunk_count >= 3) {  // a batch from the middle: chunk 1 alone
      auto mid = f.Batch(1, 1);
      std::vector<uint8_t> part(mid.InputBytes());
      ASSERT_TRUE(SealChunks(f.payload_key, mid, f.plaintext.data() + 4096, part.data()).ok());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), f.ChunkData(1)));
    }
  }
}

TEST_P(ChunkOpen, GpuSealMatchesCpuSeal) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU (or built without CUDA): the GPU path is checked by scripts/gpu-check";
#if ENCLAVE_HAVE_CUDA
  for (uint64_t len : {0ull, 100003ull, 3'000'001ull}) {
    auto f = SealedFixture::Make(len, 65536, GetParam());
    auto batch = f.Batch(0, f.header.chunk_count);
    uint8_t *d_in = nullptr, *d_out = nullptr;
    ASSERT_EQ(cudaMalloc(&d_in, batch.OutputBytes() + 1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, batch.InputBytes()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_in, f.plaintext.data(), batch.OutputBytes(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(SealChunksOnGpu(f.payload_key, batch, d_in, d_out).ok()) << len;
    std::vector<uint8_t> sealed(batch.InputBytes());
    ASSERT_EQ(cudaMemcpy(sealed.data(), d_out, sealed.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(std::equal(sealed.begin(), sealed.end(), f.ChunkData(0))) << len;
    cudaFree(d_in);
    cudaFree(d_out);
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(BothSuites, ChunkOpen,
                         ::testing::Values(crypto::Suite::kAes256Gcm, crypto::Suite::kChaCha20Poly1305),
                         [](const auto& suite_info) {
                           return std::string(suite_info.param == crypto::Suite::kAes256Gcm ? "Aes256Gcm"
                                                                                             : "ChaCha20Poly1305");
                         });

std::string Hex(const uint8_t* d, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

std::string KernelSha256(const uint8_t* data, size_t len, size_t piece) {
  Sha256State s;
  Sha256Init(&s);
  for (size_t at = 0; at < len; at += piece) Sha256Update(&s, kSha256, data + at, std::min(piece, len - at));
  uint8_t out[32];
  Sha256Final(&s, kSha256, out);
  return Hex(out, 32);
}

TEST(Sha256, MatchesFips180Vectors) {
  const std::string abc = "abc";
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(KernelSha256(nullptr, 0, 1), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(KernelSha256(reinterpret_cast<const uint8_t*>(abc.data()), abc.size(), 64),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(KernelSha256(reinterpret_cast<const uint8_t*>(two_blocks.data()), two_blocks.size(), 64),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::vector<uint8_t> million_a(1000000, 'a');
  EXPECT_EQ(KernelSha256(million_a.data(), million_a.size(), 1000000),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, MatchesOpenSslAtEveryLengthAndSplit) {
  std::mt19937 rng(7);
  const std::vector<uint8_t> data = RandomVector(rng, 300);
  for (size_t len = 0; len <= data.size(); ++len) {
    const crypto::Digest256 want = crypto::Sha256({data.data(), len});
    for (size_t piece : {size_t{1}, size_t{7}, size_t{55}, size_t{64}, size_t{65}, size_t{300}}) {
      ASSERT_EQ(KernelSha256(data.data(), len, piece), Hex(want.data(), 32)) << len << " in pieces of " << piece;
    }
  }
}

TEST(Sha256, GpuMatchesOpenSsl) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU (or built without CUDA): the GPU path is checked by scripts/gpu-check";
#if ENCLAVE_HAVE_CUDA
  std::mt19937 rng(11);
  const std::vector<uint8_t> data = RandomVector(rng, 1 << 20);
  uint8_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, data.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, data.data(), data.size(), cudaMemcpyHostToDevice), cudaSuccess);
  for (size_t len : {size_t{0}, size_t{55}, size_t{56}, size_t{64}, size_t{1000}, data.size()}) {
    auto got = Sha256OnGpu(d, len);
    ASSERT_TRUE(got.ok()) << got.status().message();
    const crypto::Digest256 want = crypto::Sha256({data.data(), len});
    EXPECT_EQ(Hex(got->data(), 32), Hex(want.data(), 32)) << len;
  }
  cudaFree(d);
#endif
}

// A tenant keystore with an export key, in a fresh directory.
class DeviceSeal : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/enclave-device-seal-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string ks_path = dir_ + "/tenant.keystore";
    const std::string pass = "device seal test passphrase";
    passphrase_ = *SecretBytes::CopyFrom({reinterpret_cast<const uint8_t*>(pass.data()), pass.size()});
    ASSERT_TRUE(crypto::Keystore::Init(ks_path, passphrase_, crypto::KdfParams{2, 19ull << 20}).ok());
    auto ks = crypto::Keystore::Unlock(ks_path, passphrase_);
    ASSERT_TRUE(ks.ok());
    ks_ = std::make_unique<crypto::Keystore>(std::move(ks).value());
    ASSERT_TRUE(ks_->CreateExportKey("tenant-export").ok());
    pub_ = *crypto::ExportPublicKeyOf(*ks_, "");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  crypto::ModelSealOptions Options(crypto::Suite suite, uint32_t chunk) const {
    crypto::ModelSealOptions o;
    o.suite = suite;
    o.chunk_size = chunk;
    o.info.format_id = "device-seal-test/1";
    return o;
  }

  // The model the file opens to with the tenant keystore.
  std::vector<uint8_t> Open(const std::string& path) const {
    auto mem = crypto::OpenModelToMemory(path, *ks_, 64u << 20);
    EXPECT_TRUE(mem.ok()) << mem.status().message();
    if (!mem.ok()) return {};
    return {mem->ExposeSecret().begin(), mem->ExposeSecret().end()};
  }

  std::string dir_;
  SecretBytes passphrase_;
  std::unique_ptr<crypto::Keystore> ks_;
  crypto::ExportPublicKey pub_;
};

// The host side of SealDeviceModelToFile with the CPU sealer in place of the GPU's.
TEST_F(DeviceSeal, BatchedChunksOpenWithTheTenantKeystore) {
  for (crypto::Suite suite : {crypto::Suite::kAes256Gcm, crypto::Suite::kChaCha20Poly1305}) {
    for (uint64_t len : {0ull, 1ull, 4096ull, 100003ull}) {
      std::mt19937 rng(static_cast<unsigned>(len) + 5);
      const std::vector<uint8_t> model = RandomVector(rng, len);
      const std::string path = dir_ + "/batched.sealed";
      int batches = 0;
      auto info = crypto::SealModelWithChunkSealer(
          pub_, len, Options(suite, 4096), path, /*overwrite=*/true, [&](crypto::ModelExportWriter& w) {
            return SealModelInBatches(w, 3 * (4096 + 16), [&](const ChunkBatch& batch, uint8_t* out) {
              ++batches;
              return SealChunks(w.payload_key(), batch, model.data() + batch.first_index * 4096, out);
            });
          });
      ASSERT_TRUE(info.ok()) << info.status().message();
      EXPECT_EQ(batches, static_cast<int>((info->header.chunk_count + 2) / 3)) << len;
      EXPECT_EQ(Open(path), model) << len;
    }
  }
}

TEST_F(DeviceSeal, GpuSealedModelOpensToTheSameBytes) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU (or built without CUDA): the GPU path is checked by scripts/gpu-check";
#if ENCLAVE_HAVE_CUDA
  for (crypto::Suite suite : {crypto::Suite::kAes256Gcm, crypto::Suite::kChaCha20Poly1305}) {
    for (uint64_t len : {0ull, 3'000'001ull}) {
      std::mt19937 rng(static_cast<unsigned>(len) + 9);
      const std::vector<uint8_t> model = RandomVector(rng, len);
      uint8_t* d = nullptr;
      ASSERT_EQ(cudaMalloc(&d, len + 1), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d, model.data(), len, cudaMemcpyHostToDevice), cudaSuccess);
      const std::string path = dir_ + "/gpu.sealed";
      auto info = SealDeviceModelToFile(pub_, d, len, Options(suite, 65536), path, /*overwrite=*/true);
      ASSERT_TRUE(info.ok()) << info.status().message();
      EXPECT_EQ(Open(path), model) << len;
      auto digest = Sha256OnGpu(d, len);
      ASSERT_TRUE(digest.ok()) << digest.status().message();
      const crypto::Digest256 want = crypto::Sha256(model);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), digest->begin())) << len;
      cudaFree(d);
    }
  }
#endif
}

TEST(DeviceSealWithoutGpu, RefusesCleanly) {
  if (GpuAvailable()) GTEST_SKIP() << "a GPU is present";
  crypto::ExportPublicKey pub;
  EXPECT_NE(Sha256OnGpu(nullptr, 0).status().code(), Code::kOk);
  EXPECT_NE(SealDeviceModelToFile(pub, nullptr, 0, crypto::ModelSealOptions{}, "/tmp/never-written", false)
                .status()
                .code(),
            Code::kOk);
  EXPECT_FALSE(std::filesystem::exists("/tmp/never-written"));
}

}  // namespace
}  // namespace enclave::kernels
