// The GPU data path: the split tag math (on the CPU here, so CI runs it), the AEAD
// primitives on the GPU against published vectors, and GpuChunkOpener / GpuSealedStream
// against the CPU path and the sealed-file writer (OpenSSL) on both suites. GPU tests
// skip without a GPU; scripts/gpu-check runs them on one.
#include "enclave/kernels/gpu_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "enclave/crypto/hash.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/kernels/chunk_open.h"
#include "enclave/kernels/gpu_tag_split.h"
#if ENCLAVE_HAVE_CUDA
#include <cuda_runtime.h>

#include "gpu_vectors.h"
#endif

namespace enclave::kernels {
namespace {

using crypto::SecretBytes;
using crypto::Suite;

#define SKIP_WITHOUT_GPU() \
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU (or built without CUDA): scripts/gpu-check runs this on one"

std::vector<uint8_t> RandomVector(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<uint8_t> Hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  }
  return out;
}

ChunkKeys KeysFor(Suite suite, const std::vector<uint8_t>& key) {
  ChunkKeys k{};
  k.aes = suite == Suite::kAes256Gcm;
  if (k.aes) {
    Aes256ExpandKey(key.data(), kAesTable.t0, &k.aes_keys);
    const uint8_t zero[16] = {0};
    uint8_t h[16];
    Aes256EncryptBlock(k.aes_keys, kAesTable.t0, zero, h);
    k.aes_h = Gf128Load(h);
  } else {
    std::copy(key.begin(), key.end(), k.chacha_key);
  }
  return k;
}

// The tag by segments (as the GPU computes it), on the CPU.
bool SplitTagValid(const ChunkKeys& k, const uint8_t aad[32], uint64_t index, bool last, const uint8_t* ct,
                   uint64_t len) {
  GhashPowers hp{};
  GhashTable ht{}, ht32{};
  if (k.aes) {
    GhashPowersOf(k.aes_h, &hp);
    GhashTableOf(k.aes_h, &ht);
    GhashTableOf(hp.p[5], &ht32);  // H^32
  }
  std::vector<TagPartial> parts(TagSegmentCount(len) + 3);  // extra empty segments must not matter
  for (uint64_t s = 0; s < parts.size(); ++s) ChunkTagSegment(k, ht, index, last, ct, len, s, &parts[s]);
  return ChunkTagFinishValid(k, kAesTable.t0, hp, ht32, aad, index, last, ct, len, parts.data(), parts.size());
}

// The 4-bit table multiplication against the bit-serial one (SP 800-38D algorithm 1).
TEST(GhashTable, MultiplicationMatchesBitSerial) {
  std::mt19937_64 rng(9);
  for (int i = 0; i < 2000; ++i) {
    const Gf128 h{rng(), rng()};
    Gf128 x{rng(), rng()};
    if (i == 0) x = Gf128{0, 0};
    if (i == 1) x = Gf128{0x8000000000000000ull, 0};  // the field's 1
    GhashTable t;
    GhashTableOf(h, &t);
    const Gf128 want = Gf128Mul(x, h), got = GhashMulTable(x, t);
    ASSERT_EQ(got.hi, want.hi) << i;
    ASSERT_EQ(got.lo, want.lo) << i;
  }
}

class SplitTag : public ::testing::TestWithParam<Suite> {};

// Seals chunks with OpenSSL (crypto::Aead) under the sealed nonce and AAD; the split tag
// accepts each and rejects it after any one-bit change of ciphertext or tag.
TEST_P(SplitTag, EqualsTheSerialTagAndOpenSsl) {
  std::mt19937 rng(GetParam() == Suite::kAes256Gcm ? 3 : 5);
  for (uint64_t len : {0, 1, 15, 16, 17, 511, 512, 513, 1000, 4096, 8191, 65536, 100003}) {
    auto key_bytes = RandomVector(rng, 32);
    auto aad = RandomVector(rng, 32);
    auto msg = RandomVector(rng, len);
    const uint64_t index = rng() % 1000;
    const bool last = (len % 2) == 1;
    auto key = *SecretBytes::CopyFrom(key_bytes);
    auto aead = std::move(crypto::Aead::Create(GetParam(), key)).value();
    std::vector<uint8_t> sealed(len + 16);
    auto nonce = crypto::ChunkNonce(index, last);
    ASSERT_TRUE(aead->Seal(nonce, aad, msg, sealed).ok());
    const ChunkKeys k = KeysFor(GetParam(), key_bytes);
    EXPECT_TRUE(ChunkTagValid(k, kAesTable.t0, aad.data(), index, last, sealed.data(), len)) << len;
    EXPECT_TRUE(SplitTagValid(k, aad.data(), index, last, sealed.data(), len)) << len;
    EXPECT_FALSE(SplitTagValid(k, aad.data(), index + 1, last, sealed.data(), len)) << len;
    EXPECT_FALSE(SplitTagValid(k, aad.data(), index, !last, sealed.data(), len)) << len;
    for (uint64_t pos : {uint64_t{0}, len / 2, len + 15}) {
      if (pos >= len + 16) continue;
      sealed[pos] ^= 0x04;
      EXPECT_FALSE(SplitTagValid(k, aad.data(), index, last, sealed.data(), len)) << len << " at " << pos;
      sealed[pos] ^= 0x04;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothSuites, SplitTag, ::testing::Values(Suite::kAes256Gcm, Suite::kChaCha20Poly1305),
                         [](const auto& suite_info) {
                           return std::string(suite_info.param == Suite::kAes256Gcm ? "Aes256Gcm" : "ChaCha20Poly1305");
                         });

// Published vectors: RFC 8439 section 2.8.2 (ChaCha20-Poly1305 AEAD) and the GCM
// specification's test case 16 (McGrew and Viega; AES-256, 60 bytes, 20 bytes of AAD).
struct Vector {
  bool aes;
  std::string key, nonce, aad, plain, ct, tag;
};

std::vector<Vector> PublishedVectors() {
  const std::string sunscreen =
      "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be "
      "it.";
  std::string sunscreen_hex;
  for (unsigned char c : sunscreen) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    sunscreen_hex += b;
  }
  return {
      {false, "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f", "070000004041424344454647",
       "50515253c0c1c2c3c4c5c6c7", sunscreen_hex,
       "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e06"
       "0b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d265"
       "86cec64b6116",
       "1ae10b594f09e26a7e902ecbd0600691"},
      {true, "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
       "feedfacedeadbeeffeedfacedeadbeefabaddad2",
       "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de"
       "657ba637b39",
       "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7"
       "a0abcc9f662",
       "76fc6ece0f4e1768cddf8853bb2d551b"},
  };
}

// The host build of the primitives: proves the vectors are transcribed right, so a GPU
// mismatch below is the GPU's.
TEST(PublishedVectors, HostBuildMatches) {
  for (const Vector& v : PublishedVectors()) {
    auto key = Hex(v.key), nonce = Hex(v.nonce), aad = Hex(v.aad), ct = Hex(v.ct), plain = Hex(v.plain);
    ASSERT_EQ(ct.size(), plain.size());
    uint8_t tag[16];
    std::vector<uint8_t> out(ct.size());
    if (v.aes) {
      const ChunkKeys k = KeysFor(Suite::kAes256Gcm, key);
      Aes256GcmTag(k.aes_keys, kAesTable.t0, k.aes_h, nonce.data(), aad.data(), aad.size(), ct.data(), ct.size(), tag);
      for (size_t b = 0; b * 16 < ct.size(); ++b) {
        Aes256GcmXorBlock(k.aes_keys, kAesTable.t0, nonce.data(), static_cast<uint32_t>(b), ct.data() + b * 16,
                          out.data() + b * 16, std::min<size_t>(16, ct.size() - b * 16));
      }
    } else {
      ChaCha20Poly1305Tag(key.data(), nonce.data(), aad.data(), aad.size(), ct.data(), ct.size(), tag);
      for (size_t b = 0; b * 64 < ct.size(); ++b) {
        ChaCha20XorBlock(key.data(), static_cast<uint32_t>(b + 1), nonce.data(), ct.data() + b * 64,
                         out.data() + b * 64, std::min<size_t>(64, ct.size() - b * 64));
      }
    }
    EXPECT_EQ(std::vector<uint8_t>(tag, tag + 16), Hex(v.tag)) << (v.aes ? "gcm" : "chacha");
    EXPECT_EQ(out, plain) << (v.aes ? "gcm" : "chacha");
  }
}

TEST(PublishedVectors, GpuBuildMatches) {
  SKIP_WITHOUT_GPU();
#if ENCLAVE_HAVE_CUDA
  for (const Vector& v : PublishedVectors()) {
    auto key = Hex(v.key), nonce = Hex(v.nonce), aad = Hex(v.aad), ct = Hex(v.ct);
    uint8_t tag[16];
    std::vector<uint8_t> out(ct.size());
    char error[256] = "";
    ASSERT_TRUE(testing::GpuAeadOpen(v.aes, key.data(), nonce.data(), aad.data(), aad.size(), ct.data(), ct.size(),
                                     tag, out.data(), error, sizeof error))
        << error;
    EXPECT_EQ(std::vector<uint8_t>(tag, tag + 16), Hex(v.tag)) << (v.aes ? "gcm" : "chacha");
    EXPECT_EQ(out, Hex(v.plain)) << (v.aes ? "gcm" : "chacha");
  }
#endif
}

// A sealed file written by the crypto library (OpenSSL / libsodium inside), on disk.
struct SealedFile {
  std::string path;
  SecretBytes dek;
  crypto::SealedHeader header;
  SecretBytes payload_key;
  std::vector<uint8_t> bytes, plaintext;

  static SealedFile Make(const std::string& name, uint64_t payload_length, uint32_t chunk_size, Suite suite) {
    SealedFile f;
    std::mt19937 rng(static_cast<unsigned>(payload_length + chunk_size));
    f.plaintext = RandomVector(rng, payload_length);
    f.dek = *SecretBytes::Random(32);
    crypto::SealParams p;
    p.suite = suite;
    p.object_id = "gpu-stream-test";
    p.chunk_size = chunk_size;
    p.payload_length = payload_length;
    crypto::MemorySink sink;
    auto writer = std::move(crypto::SealedFileWriter::Create(p, f.dek, &sink)).value();
    EXPECT_TRUE(writer->Append(f.plaintext).ok());
    EXPECT_TRUE(writer->Finish().ok());
    f.bytes = std::move(sink.data);
    f.header = *crypto::ParseSealedHeader(f.bytes);
    f.payload_key = *crypto::HkdfSha256(f.dek, f.header.salt, "enclave sealed-file v1 payload key", 32);
    f.path = ::testing::TempDir() + "/" + name + (suite == Suite::kAes256Gcm ? "-gcm" : "-chacha") + ".sealed";
    f.Write();
    return f;
  }

  void Write() const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
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
};

#if ENCLAVE_HAVE_CUDA
// Device memory for a test, freed at scope end.
struct DeviceBuffer {
  uint8_t* p = nullptr;
  size_t size = 0;
  explicit DeviceBuffer(size_t n) : size(n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> v(size);
    EXPECT_EQ(cudaMemcpy(v.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void Fill(uint8_t b) const { EXPECT_EQ(cudaMemset(p, b, size), cudaSuccess); }
};
#endif

class GpuPath : public ::testing::TestWithParam<Suite> {};

// Chunk sizes around the 512-byte tag segments and the 64-byte units, every chunk on
// the GPU against the CPU path.
TEST_P(GpuPath, OpenChunksMatchesCpuAcrossChunkSizes) {
  SKIP_WITHOUT_GPU();
#if ENCLAVE_HAVE_CUDA
  for (uint32_t chunk : {1u, 16u, 17u, 64u, 511u, 512u, 513u, 4096u, 65536u, 1u << 20}) {
    auto f = SealedFile::Make("sizes", 3 * static_cast<uint64_t>(chunk) + chunk / 2 + 1, chunk, GetParam());
    auto batch = f.Batch(0, f.header.chunk_count);
    std::vector<uint8_t> cpu(batch.OutputBytes());
    const uint8_t* in = f.bytes.data() + f.header.ChunkOffset(0);
    ASSERT_TRUE(OpenChunks(f.payload_key, batch, in, cpu.data()).ok());
    ASSERT_EQ(cpu, f.plaintext);
    DeviceBuffer d_in(batch.InputBytes()), d_out(batch.OutputBytes());
    ASSERT_EQ(cudaMemcpy(d_in.p, in, d_in.size, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(OpenChunksOnGpu(f.payload_key, batch, d_in.p, d_out.p).ok()) << chunk;
    EXPECT_EQ(d_out.Read(), cpu) << "chunk size " << chunk;
  }
#endif
}

// Two streams, batches interleaved; then one bad chunk stops every later decryption.
TEST_P(GpuPath, OpenerOnStreamsMatchesCpuAndStopsAfterABadChunk) {
  SKIP_WITHOUT_GPU();
#if ENCLAVE_HAVE_CUDA
  auto f = SealedFile::Make("opener", 5'000'003, 65536, GetParam());
  const uint64_t n = f.header.chunk_count;
  auto whole = f.Batch(0, n);
  DeviceBuffer d_in(whole.InputBytes()), d_out(whole.OutputBytes());
  ASSERT_EQ(cudaMemcpy(d_in.p, f.bytes.data() + f.header.ChunkOffset(0), d_in.size, cudaMemcpyHostToDevice),
            cudaSuccess);
  auto opener = std::move(GpuChunkOpener::Create(f.payload_key, GetParam())).value();
  cudaStream_t streams[2];
  for (auto& s : streams) ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto run = [&] {
    for (uint64_t first = 0, k = 0; first < n; first += 7, ++k) {
      auto b = f.Batch(first, std::min<uint64_t>(7, n - first));
      ASSERT_TRUE(opener->Enqueue(b, d_in.p + whole.InputOffset(first), d_out.p + whole.OutputOffset(first),
                                  streams[k % 2])
                      .ok());
    }
  };
  run();
  ASSERT_TRUE(opener->Check().ok());
  EXPECT_EQ(d_out.Read(), f.plaintext);

  const uint64_t bad = n / 2;
  const uint8_t flip = f.bytes[f.header.ChunkOffset(bad) + 100] ^ 0x10;
  ASSERT_EQ(cudaMemcpy(d_in.p + whole.InputOffset(bad) + 100, &flip, 1, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(opener->Reset().ok());
  d_out.Fill(0);
  run();
  Status s = opener->Check();
  EXPECT_EQ(s.code(), Code::kAuthFailed);
  EXPECT_NE(s.message().find("chunk " + std::to_string(bad)), std::string::npos) << s.message();
  // The bad batch decrypts nothing, nor does any later batch on its stream (the other
  // stream's batches may have run before the failure was recorded).
  auto out = d_out.Read();
  const uint64_t bad_k = bad / 7;
  for (uint64_t k = bad_k; k * 7 < n; k += 2) {
    const uint64_t first = k * 7, last = std::min<uint64_t>(first + 7, n) - 1;
    const uint64_t end = whole.OutputOffset(last) + f.header.ChunkPlaintextSize(last);
    EXPECT_TRUE(std::all_of(out.begin() + static_cast<ptrdiff_t>(whole.OutputOffset(first)),
                            out.begin() + static_cast<ptrdiff_t>(end), [](uint8_t b) { return b == 0; }))
        << "batch " << k;
  }
  for (auto& st : streams) cudaStreamDestroy(st);
#endif
}

TEST_P(GpuPath, SealedStreamReadsTheFileInBatches) {
  SKIP_WITHOUT_GPU();
#if ENCLAVE_HAVE_CUDA
  auto f = SealedFile::Make("stream", 9'000'017, 65536, GetParam());
  for (int depth : {1, 2, 3}) {
    GpuStreamOptions opt;
    opt.batch_bytes = 1 << 20;  // 15 chunks a batch: many batches
    opt.depth = depth;
    opt.read_threads = depth + 1;
    auto stream = std::move(GpuSealedStream::Open(f.path, f.dek, opt)).value();
    DeviceBuffer all(f.plaintext.size());
    ASSERT_TRUE(stream->ReadAll(all.p).ok());
    EXPECT_EQ(all.Read(), f.plaintext) << "depth " << depth;
    // A range from the middle, then one that ends with the file's short last chunk.
    DeviceBuffer mid(stream->OutputBytes(10, 40));
    ASSERT_TRUE(stream->ReadChunks(10, 40, mid.p).ok());
    EXPECT_TRUE(std::equal(f.plaintext.begin() + 10 * 65536, f.plaintext.begin() + 50 * 65536, mid.Read().begin()));
    const uint64_t n = f.header.chunk_count;
    DeviceBuffer tail(stream->OutputBytes(n - 20, 20));
    ASSERT_TRUE(stream->ReadChunks(n - 20, 20, tail.p).ok());
    EXPECT_TRUE(std::equal(f.plaintext.begin() + static_cast<ptrdiff_t>((n - 20) * 65536), f.plaintext.end(),
                           tail.Read().begin()));
    EXPECT_EQ(stream->ReadChunks(n - 1, 2, tail.p).code(), Code::kInvalidInput);
  }
#endif
}

TEST_P(GpuPath, SealedStreamWithATamperedChunkReleasesNothing) {
  SKIP_WITHOUT_GPU();
#if ENCLAVE_HAVE_CUDA
  auto f = SealedFile::Make("tamper", 9'000'017, 65536, GetParam());
  const uint64_t bad = f.header.chunk_count - 30;  // in a late batch: earlier batches were decrypted
  f.bytes[f.header.ChunkOffset(bad) + 9] ^= 0x01;
  f.Write();
  GpuStreamOptions opt;
  opt.batch_bytes = 1 << 20;
  auto stream = std::move(GpuSealedStream::Open(f.path, f.dek, opt)).value();
  DeviceBuffer all(f.plaintext.size());
  all.Fill(0xAA);
  Status s = stream->ReadAll(all.p);
  EXPECT_EQ(s.code(), Code::kAuthFailed);
  EXPECT_NE(s.message().find("chunk " + std::to_string(bad)), std::string::npos) << s.message();
  auto out = all.Read();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; })) << "plaintext released";
#endif
}

TEST_P(GpuPath, SealedStreamRejectsAWrongKeyBeforeTheGpu) {
  SKIP_WITHOUT_GPU();
  auto f = SealedFile::Make("wrongkey", 100'000, 4096, GetParam());
  auto other = *SecretBytes::Random(32);
  EXPECT_EQ(GpuSealedStream::Open(f.path, other).status().code(), Code::kAuthFailed);
}

INSTANTIATE_TEST_SUITE_P(BothSuites, GpuPath, ::testing::Values(Suite::kAes256Gcm, Suite::kChaCha20Poly1305),
                         [](const auto& suite_info) {
                           return std::string(suite_info.param == Suite::kAes256Gcm ? "Aes256Gcm" : "ChaCha20Poly1305");
                         });

TEST(GpuStream, WithoutAGpuOpenFailsCleanly) {
  if (GpuAvailable()) GTEST_SKIP() << "a GPU is present";
  auto f = SealedFile::Make("nogpu", 10'000, 4096, Suite::kAes256Gcm);
  auto r = GpuSealedStream::Open(f.path, f.dek);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == Code::kUnavailable || r.status().code() == Code::kUnsupported)
      << r.status().message();
}

}  // namespace
}  // namespace enclave::kernels
