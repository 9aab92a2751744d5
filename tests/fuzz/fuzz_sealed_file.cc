// Fuzz target: reading a whole sealed file from untrusted bytes, as the trainer and
// `enclave-data verify/open` do: SealedFileReader::Open (prefix, header, size checks),
// Unlock with the fixed fuzz DEK (commitment, header HMAC), then ReadChunk of every
// chunk (offsets, sizes, AEAD open), the schema in the authenticated metadata, and every
// record against it (dataset::CheckRecord) when the chunks hold whole records.
//
// The seeds in tests/fuzz/corpus/sealed_file are sealed under that same DEK, so the
// fuzzer starts past the key checks and reaches chunk decryption.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/schema.h"
#include "fuzz_util.h"

namespace {

// dataset::CheckRecord over every record of a chunk: it reads authenticated but untrusted
// floats (NaN payloads, category indexes), and must refuse or accept each without fault.
void CheckRecords(const enclave::dataset::DatasetSchema& schema, const std::vector<uint8_t>& chunk, uint64_t* row) {
  const size_t width = schema.columns.size();
  std::vector<float> rec(width);
  for (size_t at = 0; at + width * 4 <= chunk.size(); at += width * 4) {
    std::memcpy(rec.data(), chunk.data() + at, width * 4);
    (void)enclave::dataset::CheckRecord(schema, rec.data(), (*row)++);
  }
}

}  // namespace

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

  auto schema = dataset::DecodeSchema(h.params.metadata);
  // Records are checked when they fill chunks exactly, as the dataset readers require.
  const bool records = schema.ok() && h.params.chunk_size % schema->record_bytes() == 0 &&
                       h.params.payload_length % schema->record_bytes() == 0;
  uint64_t total = 0, row = 0;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    const uint64_t len = h.ChunkPlaintextSize(i);
    if (len > size) __builtin_trap();
    // Exactly sized, so ASan sees any write past the chunk.
    std::vector<uint8_t> out(static_cast<size_t>(len));
    if (!r.ReadChunk(i, out).ok()) return 0;
    total += len;
    if (records) CheckRecords(*schema, out, &row);
  }
  // Every chunk authenticated: the payload is exactly what the header announced.
  if (total != h.params.payload_length) __builtin_trap();
  // Out-of-range requests fail cleanly.
  std::vector<uint8_t> one(1);
  if (r.ReadChunk(h.chunk_count, one).ok()) __builtin_trap();
  return 0;
}
