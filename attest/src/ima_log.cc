#include "enclave/attest/ima_log.h"

#include <algorithm>
#include <charconv>

#include "enclave/attest/tpm_alg.h"

namespace enclave::attest {
namespace {

Status LineError(size_t line, const std::string& what) {
  return InvalidInput("IMA log line " + std::to_string(line) + ": " + what);
}

void PutU32Le(std::vector<uint8_t>* out, size_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Splits off the next space-separated token.
bool NextToken(std::string_view* rest, std::string_view* token) {
  size_t sp = rest->find(' ');
  if (sp == std::string_view::npos) return false;
  *token = rest->substr(0, sp);
  *rest = rest->substr(sp + 1);
  return !token->empty();
}

}  // namespace

std::vector<uint8_t> ImaNgTemplateData(std::string_view algo_name, ByteSpan file_digest, std::string_view path) {
  std::vector<uint8_t> out;
  // d-ng: "<algo>:\0" then the digest, length-prefixed.
  PutU32Le(&out, algo_name.size() + 2 + file_digest.size());
  out.insert(out.end(), algo_name.begin(), algo_name.end());
  out.push_back(':');
  out.push_back('\0');
  out.insert(out.end(), file_digest.begin(), file_digest.end());
  // n-ng: the path with its terminating NUL, length-prefixed.
  PutU32Le(&out, path.size() + 1);
  out.insert(out.end(), path.begin(), path.end());
  out.push_back('\0');
  return out;
}

uint16_t ImaTemplateHashAlgOf(std::string_view text) {
  size_t sp1 = text.find(' ');
  if (sp1 == std::string_view::npos) return alg::kSha1;
  size_t sp2 = text.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return alg::kSha1;
  switch (sp2 - sp1 - 1) {
    case 64:
      return alg::kSha256;
    case 96:
      return alg::kSha384;
    case 128:
      return alg::kSha512;
    default:
      return alg::kSha1;  // 40 hex digits, or malformed: the parser says which
  }
}

Result<ImaLog> ParseImaLog(std::string_view text, uint16_t template_hash_alg) {
  if (!IsSupportedHash(template_hash_alg)) return Unsupported("IMA template hash " + AlgName(template_hash_alg));
  if (text.size() > kMaxImaLogBytes)
    return InvalidInput("IMA log larger than " + std::to_string(kMaxImaLogBytes) + " bytes");
  ImaLog log;
  log.template_hash_alg = template_hash_alg;
  const size_t th_size = HashSize(template_hash_alg);
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return LineError(line_no, "no newline at the end of the line");
    std::string_view line = text.substr(0, nl);
    text = text.substr(nl + 1);
    if (line.empty()) return LineError(line_no, "empty line");
    for (char c : line) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return LineError(line_no, "control character in the line");
    }
    ImaEntry e;
    e.line = line_no;
    std::string_view rest = line, pcr, th, name, digest;
    if (!NextToken(&rest, &pcr) || !NextToken(&rest, &th) || !NextToken(&rest, &name)) {
      return LineError(line_no, "expected '<pcr> <template-hash> <template> ...'");
    }
    auto [p, ec] = std::from_chars(pcr.data(), pcr.data() + pcr.size(), e.pcr);
    if (ec != std::errc() || p != pcr.data() + pcr.size())
      return LineError(line_no, "PCR '" + std::string(pcr) + "' is not a number");
    if (e.pcr != kImaPcr)
      return LineError(line_no, "PCR " + std::to_string(e.pcr) + ", expected " + std::to_string(kImaPcr));
    auto th_bytes = HexDecode(th);
    if (!th_bytes.ok() || th_bytes->size() != th_size) {
      return LineError(line_no, "template hash is not " + std::to_string(th_size) + " bytes of hex (" +
                                    AlgName(template_hash_alg) + ")");
    }
    e.template_hash = std::move(*th_bytes);
    e.template_name = std::string(name);
    if (e.template_name != "ima-ng") {
      return Status(Code::kUnsupported, "IMA log line " + std::to_string(line_no) + ": template '" + e.template_name +
                                            "' (only ima-ng is supported)");
    }
    if (!NextToken(&rest, &digest)) return LineError(line_no, "expected '<algo>:<file-digest> <path>' after ima-ng");
    size_t colon = digest.find(':');
    if (colon == std::string_view::npos)
      return LineError(line_no, "file digest '" + std::string(digest) + "' has no '<algo>:'");
    e.file_digest_alg_name = std::string(digest.substr(0, colon));
    e.file_digest_alg = HashAlgFromName(e.file_digest_alg_name);
    if (e.file_digest_alg == 0) {
      return Status(Code::kUnsupported, "IMA log line " + std::to_string(line_no) + ": file digest algorithm '" +
                                            e.file_digest_alg_name + "' (sha1, sha256, sha384, sha512 only)");
    }
    auto fd = HexDecode(digest.substr(colon + 1));
    if (!fd.ok() || fd->size() != HashSize(e.file_digest_alg)) {
      return LineError(line_no, "file digest is not " + std::to_string(HashSize(e.file_digest_alg)) + " bytes of hex");
    }
    e.file_digest = std::move(*fd);
    if (rest.empty()) return LineError(line_no, "empty path");
    if (rest.size() > kMaxImaPathBytes)
      return LineError(line_no, "path longer than " + std::to_string(kMaxImaPathBytes) + " bytes");
    e.path = std::string(rest);
    e.template_data = ImaNgTemplateData(e.file_digest_alg_name, e.file_digest, e.path);
    e.violation = std::all_of(e.template_hash.begin(), e.template_hash.end(), [](uint8_t b) { return b == 0; });
    if (!e.violation) {
      ASSIGN_OR_RETURN(std::vector<uint8_t> h, Hash(template_hash_alg, {e.template_data}));
      if (h != e.template_hash) {
        return LineError(line_no, "template hash " + HexEncode(e.template_hash) +
                                      " does not match the ima-ng template data (" + HexEncode(h) +
                                      "): the file digest or path was changed");
      }
    }
    log.entries.push_back(std::move(e));
  }
  if (log.entries.empty()) return InvalidInput("IMA log has no entries");
  return log;
}

Result<std::vector<uint8_t>> ReplayImaLog(const ImaLog& log, uint16_t bank) {
  if (!IsSupportedHash(bank)) return Unsupported("PCR bank " + AlgName(bank));
  std::vector<uint8_t> pcr(HashSize(bank), 0);
  const std::vector<uint8_t> ff(HashSize(bank), 0xFF);
  for (const ImaEntry& e : log.entries) {
    std::vector<uint8_t> measurement;
    if (e.violation) {
      measurement = ff;
    } else if (bank == log.template_hash_alg) {
      measurement = e.template_hash;
    } else {
      ASSIGN_OR_RETURN(measurement, Hash(bank, {e.template_data}));
    }
    ASSIGN_OR_RETURN(pcr, Hash(bank, {pcr, measurement}));
  }
  return pcr;
}

Appraisal CompareImaWithQuote(const ImaLog& log, const PcrValues& quoted, bool allow_violations) {
  Appraisal a;
  size_t compared = 0;
  for (const auto& [bank, values] : quoted) {
    auto it = values.find(kImaPcr);
    if (it == values.end()) continue;
    ++compared;
    std::string where = AlgName(bank) + " PCR " + std::to_string(kImaPcr);
    auto replayed = ReplayImaLog(log, bank);
    if (!replayed.ok()) {
      a.Fail("ima.pcr.uncomputable", where, "a replayable bank", replayed.status().message());
    } else if (*replayed != it->second) {
      a.Fail("ima.pcr.mismatch", where, HexEncode(*replayed), HexEncode(it->second));
    }
  }
  if (compared == 0) a.Fail("ima.pcr.not_quoted", "PCR 10", "PCR 10 in the quote", "not quoted");
  if (!allow_violations) {
    for (const ImaEntry& e : log.entries) {
      if (e.violation) a.Fail("ima.violation", "line " + std::to_string(e.line), "no measurement violation", e.path);
    }
  }
  if (a.failures().empty()) a.Pass("ima.pcr");
  return a;
}

}  // namespace enclave::attest
