// Helpers for the attest/host tests: a tiny big-endian reader for the TPM structures the
// tests check independently of any project parser (so these tests do not depend on the
// verifier in attest/), OpenSSL signature checks, and running tpm2-tools.
#pragma once

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace enclave::testing {

using Bytes = std::vector<uint8_t>;

// Reads big-endian fields; any overrun sets failed() and returns zeros.
class Be {
 public:
  explicit Be(const Bytes& b) : b_(b) {}
  uint64_t N(int n) {
    if (pos_ + static_cast<size_t>(n) > b_.size()) {
      failed_ = true;
      pos_ = b_.size();
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | b_[pos_++];
    return v;
  }
  uint8_t U8() { return static_cast<uint8_t>(N(1)); }
  uint16_t U16() { return static_cast<uint16_t>(N(2)); }
  uint32_t U32() { return static_cast<uint32_t>(N(4)); }
  uint64_t U64() { return N(8); }
  Bytes Take(size_t n) {
    if (pos_ + n > b_.size()) {
      failed_ = true;
      pos_ = b_.size();
      return {};
    }
    Bytes out(b_.begin() + static_cast<long>(pos_), b_.begin() + static_cast<long>(pos_ + n));
    pos_ += n;
    return out;
  }
  Bytes Sized() { return Take(U16()); }
  bool failed() const { return failed_; }
  bool done() const { return !failed_ && pos_ == b_.size(); }

 private:
  const Bytes& b_;
  size_t pos_ = 0;
  bool failed_ = false;
};

struct ParsedPublic {
  uint16_t type = 0, name_alg = 0;
  uint32_t attributes = 0;
  Bytes tpmt;  // TPMT_PUBLIC bytes (name = nameAlg || H(tpmt))
};
inline ParsedPublic ParsePublicHeader(const Bytes& tpm2b_public) {
  Be r(tpm2b_public);
  ParsedPublic p;
  uint16_t size = r.U16();
  p.type = r.U16();
  p.name_alg = r.U16();
  p.attributes = r.U32();
  if (!r.failed() && size + 2u == tpm2b_public.size()) p.tpmt.assign(tpm2b_public.begin() + 2, tpm2b_public.end());
  return p;
}

struct ParsedQuote {
  uint32_t magic = 0;
  uint16_t type = 0;
  Bytes signer, extra;
  uint64_t clock = 0;
  uint32_t reset_count = 0, restart_count = 0;
  uint8_t safe = 0;
  std::vector<std::pair<uint16_t, Bytes>> selection;  // (hash, pcrSelect bitmap)
  Bytes pcr_digest;
};
// TPMS_ATTEST with TPMS_QUOTE_INFO; nullopt when it does not parse exactly.
inline std::optional<ParsedQuote> ParseQuote(const Bytes& attest) {
  Be r(attest);
  ParsedQuote q;
  q.magic = r.U32();
  q.type = r.U16();
  q.signer = r.Sized();
  q.extra = r.Sized();
  q.clock = r.U64();
  q.reset_count = r.U32();
  q.restart_count = r.U32();
  q.safe = r.U8();
  (void)r.U64();  // firmwareVersion
  uint32_t count = r.U32();
  for (uint32_t i = 0; i < count && !r.failed() && i < 16; ++i) {
    uint16_t hash = r.U16();
    uint8_t n = r.U8();
    q.selection.emplace_back(hash, r.Take(n));
  }
  q.pcr_digest = r.Sized();
  if (!r.done()) return std::nullopt;
  return q;
}

inline std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> PemToKey(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  return {bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr, EVP_PKEY_free};
}

// Verifies a TPMT_SIGNATURE (ECDSA or RSASSA, SHA-256) over `message` with `key`.
// Returns "" on success, else why not.
inline std::string VerifyTpmtSignature(EVP_PKEY* key, const Bytes& message, const Bytes& tpmt_signature) {
  Be r(tpmt_signature);
  uint16_t sig_alg = r.U16();
  uint16_t hash = r.U16();
  if (hash != 0x000B) return "signature hash is not SHA-256";
  Bytes der;
  if (sig_alg == 0x0018) {  // TPM_ALG_ECDSA
    Bytes rr = r.Sized(), ss = r.Sized();
    if (!r.done()) return "ECDSA TPMT_SIGNATURE does not parse";
    ECDSA_SIG* sig = ECDSA_SIG_new();
    ECDSA_SIG_set0(sig, BN_bin2bn(rr.data(), static_cast<int>(rr.size()), nullptr),
                   BN_bin2bn(ss.data(), static_cast<int>(ss.size()), nullptr));
    unsigned char* p = nullptr;
    int len = i2d_ECDSA_SIG(sig, &p);
    ECDSA_SIG_free(sig);
    if (len <= 0) return "i2d_ECDSA_SIG failed";
    der.assign(p, p + len);
    OPENSSL_free(p);
  } else if (sig_alg == 0x0014) {  // TPM_ALG_RSASSA
    der = r.Sized();
    if (!r.done()) return "RSASSA TPMT_SIGNATURE does not parse";
  } else {
    return "unexpected signature algorithm";
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1) return "EVP_DigestVerifyInit failed";
  if (EVP_DigestVerify(ctx.get(), der.data(), der.size(), message.data(), message.size()) != 1) {
    return "signature does not verify";
  }
  return "";
}

inline Bytes Sha(const EVP_MD* md, const Bytes& data) {
  Bytes out(static_cast<size_t>(EVP_MD_get_size(md)));
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, md, nullptr);
  return out;
}

inline Bytes ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}
inline void WriteFileBytes(const std::string& path, const Bytes& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

inline std::string Hex(const Bytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

struct ToolRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};
// Runs argv[0] (searched in PATH) with stdout+stderr captured through `log`.
inline ToolRun RunTool(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  ToolRun run;
  if (posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }
  posix_spawn_file_actions_destroy(&actions);
  Bytes out = ReadFileBytes(log);
  run.output.assign(out.begin(), out.end());
  return run;
}

inline bool InPath(const std::string& tool) {
  std::string cmd = "command -v " + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace enclave::testing
