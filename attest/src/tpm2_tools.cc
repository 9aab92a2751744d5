#include "enclave/attest/tpm2_tools.h"

#include <algorithm>

#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {
namespace {

constexpr size_t kSelectionSlots = 16, kSelectionBytes = 4 + kSelectionSlots * 8;  // 132
constexpr size_t kDigestSlots = 8, kDigestBufferBytes = 64;
constexpr size_t kTpmlDigestBytes = 4 + kDigestSlots * (2 + kDigestBufferBytes);  // 532
constexpr uint32_t kMaxPcrIndex = 23;

uint32_t Le32(ByteSpan b, size_t at) {
  return static_cast<uint32_t>(b[at]) | static_cast<uint32_t>(b[at + 1]) << 8 | static_cast<uint32_t>(b[at + 2]) << 16 |
         static_cast<uint32_t>(b[at + 3]) << 24;
}
uint16_t Le16(ByteSpan b, size_t at) { return static_cast<uint16_t>(b[at] | b[at + 1] << 8); }

bool AllZero(ByteSpan b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0; });
}

Status At(size_t offset, const std::string& what) {
  return InvalidInput("tpm2-tools serialized PCR file at offset " + std::to_string(offset) + ": " + what);
}

}  // namespace

Result<PcrValues> ParseTpm2ToolsPcrValues(ByteSpan file, const PcrSelection& order) {
  PcrValues out;
  size_t off = 0;
  for (const PcrBankSelection& bank : order.banks) {
    const size_t size = HashSize(bank.hash);
    if (size == 0) return Unsupported("tpm2-tools PCR values file: bank " + AlgName(bank.hash));
    for (uint32_t i : PcrSelection::Indices(bank)) {
      if (file.size() - off < size) {
        return InvalidInput("tpm2-tools PCR values file is " + std::to_string(file.size()) + " bytes: " + AlgName(bank.hash) +
                            " PCR " + std::to_string(i) + " needs " + std::to_string(size) + " at offset " +
                            std::to_string(off) + " (values follow the quoted selection " + order.ToString() + ")");
      }
      out[bank.hash][i].assign(file.begin() + static_cast<long>(off), file.begin() + static_cast<long>(off + size));
      off += size;
    }
  }
  if (off != file.size()) {
    return InvalidInput("tpm2-tools PCR values file is " + std::to_string(file.size()) + " bytes, the quoted selection " +
                        order.ToString() + " needs " + std::to_string(off));
  }
  return out;
}

Result<PcrValues> ParseTpm2ToolsPcrSerialized(ByteSpan file) {
  if (file.size() < kSelectionBytes + 4 || (file.size() - kSelectionBytes - 4) % kTpmlDigestBytes != 0) {
    return InvalidInput("tpm2-tools serialized PCR file is " + std::to_string(file.size()) + " bytes, expected 136 + 532 n");
  }
  const uint32_t banks = Le32(file, 0);
  if (banks == 0 || banks > kSelectionSlots) return At(0, "TPML_PCR_SELECTION.count " + std::to_string(banks) + ", expected 1..16");
  // The selection, in file order.
  std::vector<std::pair<uint16_t, std::vector<uint32_t>>> sel;
  for (size_t s = 0; s < kSelectionSlots; ++s) {
    const size_t at = 4 + s * 8;
    ByteSpan slot = file.subspan(at, 8);
    if (s >= banks) {
      if (!AllZero(slot)) return At(at, "unused TPMS_PCR_SELECTION slot " + std::to_string(s) + " is not zero");
      continue;
    }
    const uint16_t hash = Le16(file, at);
    const uint8_t size_of_select = file[at + 2];
    if (HashSize(hash) == 0) return At(at, "bank " + AlgName(hash) + " (sha1, sha256, sha384, sha512)");
    for (const auto& [seen, unused] : sel) {
      if (seen == hash) return At(at, "bank " + AlgName(hash) + " selected twice");
    }
    if (size_of_select < 1 || size_of_select > 4) return At(at + 2, "sizeofSelect " + std::to_string(size_of_select) + ", expected 1..4");
    if (file[at + 7] != 0) return At(at + 7, "padding byte is not zero");
    std::vector<uint32_t> indices;
    for (uint32_t i = 0; i < 32; ++i) {
      if (!(file[at + 3 + i / 8] & (1u << (i % 8)))) continue;
      if (i / 8 >= size_of_select) return At(at + 3 + i / 8, "PCR " + std::to_string(i) + " selected past sizeofSelect");
      if (i > kMaxPcrIndex) return At(at + 3 + i / 8, "PCR " + std::to_string(i) + " is above 23");
      indices.push_back(i);
    }
    if (indices.empty()) return At(at, "bank " + AlgName(hash) + " selects no PCR");
    sel.emplace_back(hash, std::move(indices));
  }
  // The digests, in selection order.
  const size_t lists = Le32(file, kSelectionBytes);
  if (lists != (file.size() - kSelectionBytes - 4) / kTpmlDigestBytes) {
    return At(kSelectionBytes, "TPML_DIGEST count " + std::to_string(lists) + " does not match the file size");
  }
  std::vector<ByteSpan> digests;
  for (size_t l = 0; l < lists; ++l) {
    const size_t at = kSelectionBytes + 4 + l * kTpmlDigestBytes;
    const uint32_t count = Le32(file, at);
    if (count < 1 || count > kDigestSlots) return At(at, "TPML_DIGEST.count " + std::to_string(count) + ", expected 1..8");
    for (size_t d = 0; d < kDigestSlots; ++d) {
      const size_t slot = at + 4 + d * (2 + kDigestBufferBytes);
      const uint16_t size = Le16(file, slot);
      if (d >= count) {
        if (!AllZero(file.subspan(slot, 2 + kDigestBufferBytes)))
          return At(slot, "unused TPM2B_DIGEST slot " + std::to_string(d) + " is not zero");
        continue;
      }
      if (size == 0 || size > kDigestBufferBytes) return At(slot, "TPM2B_DIGEST.size " + std::to_string(size));
      if (!AllZero(file.subspan(slot + 2 + size, kDigestBufferBytes - size)))
        return At(slot + 2 + size, "bytes past the digest are not zero");
      digests.push_back(file.subspan(slot + 2, size));
    }
  }
  PcrValues out;
  size_t next = 0;
  for (const auto& [hash, indices] : sel) {
    for (uint32_t i : indices) {
      if (next == digests.size())
        return At(kSelectionBytes, std::to_string(digests.size()) + " digests for more selected PCRs");
      ByteSpan d = digests[next++];
      if (d.size() != HashSize(hash)) {
        return At(kSelectionBytes, AlgName(hash) + " PCR " + std::to_string(i) + " has a " + std::to_string(d.size()) +
                                       "-byte digest, expected " + std::to_string(HashSize(hash)));
      }
      out[hash][i].assign(d.begin(), d.end());
    }
  }
  if (next != digests.size()) {
    return At(kSelectionBytes, std::to_string(digests.size()) + " digests for " + std::to_string(next) + " selected PCRs");
  }
  return out;
}

}  // namespace enclave::attest
