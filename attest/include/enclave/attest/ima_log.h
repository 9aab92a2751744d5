// Linux IMA measurement list, ASCII form (securityfs ascii_runtime_measurements), for
// the ima-ng template only. One line per measurement:
//
//   <pcr> <template-hash hex> ima-ng <algo>:<file-digest hex> <path>
//
// Template data (what the template hash covers), fields in order, lengths u32
// little-endian (Linux security/integrity/ima/ima_template_lib.c; Keylime ima/ast.py):
//   d-ng: u32 len || algo || ':' || '\0' || file digest      (len = strlen(algo)+2+|digest|)
//   n-ng: u32 len || path || '\0'                            (len = strlen(path)+1)
// template hash = H_log(d-ng field || n-ng field). A violation (ToMToU, open-writers) is
// logged with an all-zero template hash and extended as all 0xFF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/attest/appraisal.h"
#include "enclave/attest/tpm_alg.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

inline constexpr uint32_t kImaPcr = 10;
inline constexpr size_t kMaxImaPathBytes = 4096;
inline constexpr size_t kMaxImaLogBytes = 256u << 20;

struct ImaEntry {
  size_t line = 0;  // 1-based
  uint32_t pcr = 0;
  std::vector<uint8_t> template_hash;  // as logged (hash alg of the log)
  std::string template_name;           // "ima-ng"
  uint16_t file_digest_alg = 0;
  std::string file_digest_alg_name;  // as logged ("sha256")
  std::vector<uint8_t> file_digest;
  std::string path;
  std::vector<uint8_t> template_data;  // d-ng || n-ng, as hashed
  bool violation = false;              // all-zero template hash
};

struct ImaLog {
  uint16_t template_hash_alg = 0;  // sha1 for ascii_runtime_measurements
  std::vector<ImaEntry> entries;
};

// `template_hash_alg`: the hash of the template-hash column (SHA-1 for
// ascii_runtime_measurements, SHA-256 for ascii_runtime_measurements_sha256). Every line
// is checked: PCR 10, template ima-ng, known file-digest algorithm with the right length,
// template hash = H(template data) unless the line is a violation. Errors name the line.
Result<ImaLog> ParseImaLog(std::string_view text, uint16_t template_hash_alg = alg::kSha1);

// The template-hash algorithm of an IMA list, from the width of its first line's
// template-hash column (40 hex digits SHA-1, 64 SHA-256, 96 SHA-384, 128 SHA-512; anything
// else SHA-1, whose parser then names the line). What the verifier passes to ParseImaLog.
uint16_t ImaTemplateHashAlgOf(std::string_view text);

// Template data of an ima-ng entry (d-ng || n-ng) from its parts.
std::vector<uint8_t> ImaNgTemplateData(std::string_view algo_name, ByteSpan file_digest, std::string_view path);

// PCR 10 of `bank` after replaying the log from zero: extend with H_bank(template data),
// or all 0xFF for a violation.
Result<std::vector<uint8_t>> ReplayImaLog(const ImaLog& log, uint16_t bank);

// Replays into each quoted bank's PCR 10 and compares ("ima.pcr.mismatch"); violations
// are reported as failures ("ima.violation") unless `allow_violations`.
Appraisal CompareImaWithQuote(const ImaLog& log, const PcrValues& quoted, bool allow_violations);

}  // namespace enclave::attest
