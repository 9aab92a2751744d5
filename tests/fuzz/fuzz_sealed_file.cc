// Fuzz target: reading a whole sealed file from untrusted bytes, as the trainer and
// `enclave-data verify/open` do: SealedFileReader::Open (prefix, header, size checks),
// Unlock with the fixed fuzz DEK (commitment, header HMAC), then ReadChunk of every
// chunk (offsets, sizes, AEAD open) and the schema in the authenticated metadata.
//
// The seeds in tests/fuzz/corpus/sealed_file are sealed under that same DEK, so the
// fuzzer starts past the key checks and reaches chunk decryption.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/schema.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enclave;
  static const crypto::SecretBytes dek = fuzz::FixedDek();
  static fuzz::MemFile file;

  auto reader = crypto::SealedFileReader::Open(file.Fill(data, size));
  if (!reader.ok()) return 0;
  crypto::SealedFileReader& r = **reader;
  const crypto::SealedHeader& h = r.header();
  // Open checked the size: every chunk lies inside the input.
  if (h.FileSize() != size) __builtin_trap();
  if (!r.Unlock(dek).ok()) return 0;

  (void)dataset::DecodeSchema(h.params.metadata);
  uint64_t total = 0;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const uint64_t len = h.ChunkPlaintextSize(i);
    if (len > size) __builtin_trap();
    // Exactly sized, so ASan sees any write past the chunk.
    std::vector<uint8_t> out(static_cast<size_t>(len));
    if (!r.ReadChunk(i, out).ok()) return 0;
    total += len;
  }
  // Every chunk authenticated: the payload is exactly what the header announced.
  if (total != h.params.payload_length) __builtin_trap();
  // Out-of-range requests fail cleanly.
  std::vector<uint8_t> one(1);
  if (r.ReadChunk(h.chunk_count, one).ok()) __builtin_trap();
  return 0;
}
