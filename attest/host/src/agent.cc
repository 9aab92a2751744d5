// Host operations of enclave-attest (agent.h): logs, state directory, enrol, activate, quote.
#include "enclave/attest/host/agent.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "enclave/attest/event_log.h"
#include "enclave/attest/ima_log.h"
#include "enclave/attest/verifier.h"
#include "enclave/common/files.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::attest::host {
namespace {

using nlohmann::json;

constexpr char kAkFile[] = "ak.json";
constexpr char kEnrolmentFile[] = "enrolment.json";
constexpr char kClockFile[] = "last_clock.json";
constexpr char kAkFormat[] = "enclave-attest host ak v1";
constexpr size_t kMaxStateFile = 1u << 20;

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Reads to EOF with a limit; NotFound when the file does not exist.
Result<std::vector<uint8_t>> ReadToEof(const std::string& path, size_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return NotFound(path + ": no such file");
    return ErrnoStatus("opening " + path, err);
  }
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(1u << 16);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoStatus("reading " + path, err);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > limit) {
      ::close(fd);
      return InvalidInput(path + ": larger than the limit of " + std::to_string(limit) + " bytes");
    }
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  ::close(fd);
  return out;
}

Result<std::string> ReadText(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> b, ReadToEof(path, kMaxStateFile));
  return std::string(b.begin(), b.end());
}

Result<EkType> EkTypeFromName(std::string_view name) {
  if (name == EkTypeName(EkType::kRsa2048)) return EkType::kRsa2048;
  if (name == EkTypeName(EkType::kEccP256)) return EkType::kEccP256;
  return InvalidInput("unknown EK type '" + std::string(name) + "'");
}
Result<AkType> AkTypeFromName(std::string_view name) {
  if (name == AkTypeName(AkType::kEccP256)) return AkType::kEccP256;
  if (name == AkTypeName(AkType::kRsa2048)) return AkType::kRsa2048;
  return InvalidInput("unknown AK type '" + std::string(name) + "'");
}

Result<std::vector<uint8_t>> HexField(const json& doc, const char* key, const std::string& where) {
  if (!doc.contains(key) || !doc.at(key).is_string()) return InvalidInput(where + ": field '" + key + "' missing or not a string");
  auto b = HexDecode(doc.at(key).get<std::string>());
  if (!b.ok()) return InvalidInput(where + ": field '" + key + "': bad hex");
  return std::move(b).value();
}

// PCR values from ReadPcrs as a PcrValues map.
PcrValues ToPcrValues(const std::vector<PcrValue>& values) {
  PcrValues out;
  for (const PcrValue& v : values) out[v.hash][v.index] = v.digest;
  return out;
}

}  // namespace

Result<std::string> DefaultTcti(const std::string& tpm_device, const std::string& swtpm_tcti_file) {
  if (Exists(tpm_device)) return "device:" + tpm_device;
  if (Exists(swtpm_tcti_file)) {
    ASSIGN_OR_RETURN(std::string t, ReadText(swtpm_tcti_file));
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    if (t.empty() || t.find('\n') != std::string::npos) return InvalidInput(swtpm_tcti_file + ": not one TCTI string");
    return t;
  }
  return NotFound("no TPM: " + tpm_device + " does not exist and no swtpm was started (" + swtpm_tcti_file +
                  " does not exist; scripts/swtpm-start starts one); give --tcti");
}

Result<HostLogs> ReadHostLogs(const LogPaths& paths) {
  HostLogs logs;
  if (!paths.event_log.empty()) {
    auto ev = ReadToEof(paths.event_log, kMaxEventLogBytes);
    if (ev.ok()) {
      logs.event_log = std::move(ev).value();
    } else if (ev.status().code() != Code::kNotFound) {
      return ev.status().Annotate("boot event log: ");
    }
  }
  if (!paths.ima_log.empty()) {
    auto ima = ReadToEof(paths.ima_log, kMaxImaLogBytes);
    if (ima.ok()) {
      logs.ima_log.assign(ima->begin(), ima->end());
    } else if (ima.status().code() != Code::kNotFound) {
      return ima.status().Annotate("IMA log: ");
    }
  }
  return logs;
}

Status WriteFileAtomically(const std::string& path, std::string_view data, bool allow_overwrite) {
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, allow_overwrite));
  RETURN_IF_ERROR(out.Write(data.data(), data.size()));
  return out.Commit();
}

Status SimulateImaMeasurement(Tpm& tpm, const std::string& file, const std::string& logged_path,
                              const std::string& log_path) {
  if (logged_path.empty() || logged_path.size() > kMaxImaPathBytes ||
      std::any_of(logged_path.begin(), logged_path.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; }))
    return InvalidInput("IMA path '" + logged_path + "': 1..4096 bytes without spaces or control characters");
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(file, size_t{1} << 30));
  const crypto::Digest256 digest = crypto::Sha256(bytes);
  const std::vector<uint8_t> data = ImaNgTemplateData("sha256", digest, logged_path);
  const crypto::Digest256 template_hash = crypto::Sha256(data);
  std::string existing;
  if (std::filesystem::exists(log_path)) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> old, ReadWholeFile(log_path, kMaxImaLogBytes));
    existing.assign(old.begin(), old.end());
  }
  // The log first, then PCR 10: a failed extend leaves a line the PCR lacks, which the
  // verifier reports (ima.pcr.mismatch); never a PCR the log cannot explain.
  const std::string line =
      "10 " + HexEncode(template_hash) + " ima-ng sha256:" + HexEncode(digest) + " " + logged_path + "\n";
  RETURN_IF_ERROR(WriteFileAtomically(log_path, existing + line, /*allow_overwrite=*/true));
  return tpm.ExtendPcr(kImaPcr, alg::kSha256, template_hash);
}

// ---- state directory -------------------------------------------------------------------

Result<HostState> HostState::Open(const std::string& dir, bool create) {
  if (dir.empty()) return InvalidInput("state directory: empty path");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    int err = errno;
    if (err != ENOENT) return ErrnoStatus("state directory " + dir, err);
    if (!create) return NotFound("state directory " + dir + " does not exist (run `enclave-attest enroll` first)");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return IoError("creating state directory " + dir + ": " + ec.message());
    if (::chmod(dir.c_str(), 0700) != 0) return ErrnoStatus("chmod 0700 " + dir, errno);
  } else if (!S_ISDIR(st.st_mode)) {
    return InvalidInput("state directory " + dir + " is not a directory");
  }
  return HostState(dir);
}

bool HostState::HasAk() const { return Exists(Path(kAkFile)); }

Status HostState::SaveAk(const StoredAk& ak) const {
  json doc = {{"format", kAkFormat},
              {"ek_type", std::string(EkTypeName(ak.ek_type))},
              {"ak_type", std::string(AkTypeName(ak.ak_type))},
              {"ak_public", HexEncode(ak.blob.pub.public_area)},
              {"ak_name", HexEncode(ak.blob.pub.name)},
              {"ak_private", HexEncode(ak.blob.private_area)}};
  return WriteFileAtomically(Path(kAkFile), doc.dump(2) + "\n", /*allow_overwrite=*/true);
}

Result<StoredAk> HostState::LoadAk() const {
  const std::string path = Path(kAkFile);
  auto text = ReadText(path);
  if (!text.ok() && text.status().code() == Code::kNotFound) {
    return NotFound(path + ": this host has no AK yet (run `enclave-attest enroll`)");
  }
  if (!text.ok()) return text.status();
  json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidInput(path + ": not a JSON object");
  static const std::set<std::string> kKeys = {"format", "ek_type", "ak_type", "ak_public", "ak_name", "ak_private"};
  for (const auto& [k, v] : doc.items()) {
    if (!kKeys.count(k)) return InvalidInput(path + ": unknown key '" + k + "'");
  }
  for (const char* k : {"format", "ek_type", "ak_type"}) {
    if (!doc.contains(k) || !doc.at(k).is_string()) return InvalidInput(path + ": field '" + std::string(k) + "' missing or not a string");
  }
  if (doc.at("format").get<std::string>() != kAkFormat) return InvalidInput(path + ": field 'format' is not '" + std::string(kAkFormat) + "'");
  StoredAk ak;
  ASSIGN_OR_RETURN(ak.ek_type, EkTypeFromName(doc.at("ek_type").get<std::string>()));
  ASSIGN_OR_RETURN(ak.ak_type, AkTypeFromName(doc.at("ak_type").get<std::string>()));
  ASSIGN_OR_RETURN(ak.blob.pub.public_area, HexField(doc, "ak_public", path));
  ASSIGN_OR_RETURN(ak.blob.pub.name, HexField(doc, "ak_name", path));
  ASSIGN_OR_RETURN(ak.blob.private_area, HexField(doc, "ak_private", path));
  return ak;
}

Result<EnrolmentBundle> HostState::LoadEnrolment() const {
  ASSIGN_OR_RETURN(std::string text, ReadText(Path(kEnrolmentFile)));
  auto b = ParseEnrolmentBundle(text);
  if (!b.ok()) return b.status().Annotate(Path(kEnrolmentFile) + ": ");
  return b;
}

Status HostState::SaveEnrolment(const EnrolmentBundle& bundle) const {
  return WriteFileAtomically(Path(kEnrolmentFile), EncodeEnrolmentBundle(bundle), /*allow_overwrite=*/true);
}

Result<std::optional<ClockInfo>> HostState::LoadLastClock() const {
  auto text = ReadText(Path(kClockFile));
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return std::optional<ClockInfo>();
    return text.status();
  }
  auto c = ParseClockState(*text);
  if (!c.ok()) return c.status().Annotate(Path(kClockFile) + ": ");
  return std::optional<ClockInfo>(*c);
}

Status HostState::SaveLastClock(const ClockInfo& clock) const {
  return WriteFileAtomically(Path(kClockFile), EncodeClockState(clock), /*allow_overwrite=*/true);
}

// ---- operations ------------------------------------------------------------------------

host::PcrSelection ToHostSelection(const attest::PcrSelection& selection) {
  host::PcrSelection out;
  for (const auto& b : selection.banks) {
    PcrBank bank;
    bank.hash = b.hash;
    bank.pcrs = attest::PcrSelection::Indices(b);
    out.push_back(std::move(bank));
  }
  return out;
}

Result<EnrolmentBundle> Enroll(Tpm& tpm, const HostState& state, const EnrollOptions& options, int64_t now) {
  if (state.HasAk() && !options.force) {
    return AlreadyExists(state.Path(kAkFile) + ": this host is already enrolled (its bundle: " +
                         state.Path(kEnrolmentFile) + "; --force makes a new AK)");
  }
  EnrolmentBundle bundle;
  for (uint32_t index : {kEkCertNvRsa2048, kEkCertNvEccP256, kEkCertNvEccP384}) {
    auto cert = tpm.ReadNv(index);
    if (cert.ok()) {
      bundle.ek_certificates.push_back({index, std::move(cert).value()});
    } else if (cert.status().code() != Code::kNotFound) {
      return cert.status();
    }
  }
  auto has = [&](uint32_t index) {
    for (const auto& c : bundle.ek_certificates) {
      if (c.nv_index == index) return true;
    }
    return false;
  };
  EkType ek_type;
  if (options.ek_type) {
    ek_type = *options.ek_type;
  } else if (has(kEkCertNvEccP256)) {
    ek_type = EkType::kEccP256;  // preferred: every quote re-creates the EK, and ECC is ~8x faster
  } else if (has(kEkCertNvRsa2048)) {
    ek_type = EkType::kRsa2048;
  } else {
    return NotFound("this TPM has no EK certificate for a default-template EK (NV 0x01c00002 RSA-2048, "
                    "0x01c0000a ECC P-256): a verifier could not check it; give --ek to enrol anyway");
  }
  ASSIGN_OR_RETURN(LoadedKey ek, tpm.CreateEk(ek_type));
  ASSIGN_OR_RETURN(AkBlob blob, tpm.CreateAk(ek, options.ak_type));
  bundle.ek_public = ek.pub().public_area;
  bundle.ak_public = blob.pub.public_area;
  bundle.ak_name = blob.pub.name;
  bundle.created_at = now;
  RETURN_IF_ERROR(state.SaveAk(StoredAk{ek_type, options.ak_type, blob}));
  RETURN_IF_ERROR(state.SaveEnrolment(bundle));
  return bundle;
}

Result<ActivationResponse> Activate(Tpm& tpm, const HostState& state, const ChallengeBundle& challenge) {
  ASSIGN_OR_RETURN(StoredAk stored, state.LoadAk());
  if (challenge.ak_name != stored.blob.pub.name) {
    return InvalidInput("the challenge is for AK name " + HexEncode(challenge.ak_name) + ", this host's AK is " +
                        HexEncode(stored.blob.pub.name));
  }
  ASSIGN_OR_RETURN(LoadedKey ek, tpm.CreateEk(stored.ek_type));
  ASSIGN_OR_RETURN(LoadedKey ak, tpm.LoadAk(ek, stored.blob));
  ASSIGN_OR_RETURN(crypto::SecretBytes secret,
                   tpm.ActivateCredential(ak, ek, challenge.credential_blob, challenge.encrypted_secret));
  ActivationResponse r;
  r.ak_name = stored.blob.pub.name;
  // Revealed on purpose: the secret is a one-time proof of possession, not a key.
  auto s = secret.ExposeSecret();
  r.secret.assign(s.begin(), s.end());
  return r;
}

Result<EvidenceBundle> MakeEvidence(Tpm& tpm, const HostState& state, const attest::PcrSelection& selection,
                                    ByteSpan nonce, const std::optional<crypto::Digest256>& bound_digest,
                                    const LogSource& logs, int64_t now) {
  ASSIGN_OR_RETURN(crypto::Digest256 qualifying, QualifyingData(nonce, bound_digest));
  ASSIGN_OR_RETURN(StoredAk stored, state.LoadAk());
  const host::PcrSelection sel = ToHostSelection(selection);
  ASSIGN_OR_RETURN(LoadedKey ek, tpm.CreateEk(stored.ek_type));
  ASSIGN_OR_RETURN(LoadedKey ak, tpm.LoadAk(ek, stored.blob));
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSIGN_OR_RETURN(HostLogs before_logs, logs());
    ASSIGN_OR_RETURN(std::vector<PcrValue> before, tpm.ReadPcrs(sel));
    ASSIGN_OR_RETURN(Quote quote, tpm.QuotePcrs(ak, sel, qualifying));
    ASSIGN_OR_RETURN(std::vector<PcrValue> after, tpm.ReadPcrs(sel));
    ASSIGN_OR_RETURN(HostLogs after_logs, logs());
    auto same = [](const std::vector<PcrValue>& a, const std::vector<PcrValue>& b) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].hash != b[i].hash || a[i].index != b[i].index || a[i].digest != b[i].digest) return false;
      }
      return true;
    };
    if (!same(before, after) || !(before_logs == after_logs)) continue;
    EvidenceBundle b;
    b.nonce.assign(nonce.begin(), nonce.end());
    b.bound_digest = bound_digest;
    b.ak_name = stored.blob.pub.name;
    b.pcr_selection = selection;
    b.attest = std::move(quote.attest);
    b.signature = std::move(quote.signature);
    b.pcrs = ToPcrValues(after);
    b.event_log = std::move(after_logs.event_log);
    b.ima_log = std::move(after_logs.ima_log);
    b.created_at = now;
    return b;
  }
  return Unavailable("PCRs or logs changed during each of 5 quotes (measurements arriving too fast); try again");
}

Result<SignedNonceRequest> SignNonceRequest(Tpm& tpm, const HostState& state, std::string_view host_id) {
  SignedNonceRequest r;
  r.salt.resize(kNonceRequestSaltBytes);
  crypto::RandomBytes(r.salt);
  ASSIGN_OR_RETURN(crypto::Digest256 qualifying, NonceRequestQualifyingData(host_id, r.salt));
  ASSIGN_OR_RETURN(StoredAk stored, state.LoadAk());
  ASSIGN_OR_RETURN(LoadedKey ek, tpm.CreateEk(stored.ek_type));
  ASSIGN_OR_RETURN(LoadedKey ak, tpm.LoadAk(ek, stored.blob));
  // TPM2_Quote wants at least one PCR; which one does not matter to the broker.
  const host::PcrSelection one_pcr = {PcrBank{0x000B, {0}}};
  ASSIGN_OR_RETURN(Quote quote, tpm.QuotePcrs(ak, one_pcr, qualifying));
  r.attest = std::move(quote.attest);
  r.signature = std::move(quote.signature);
  return r;
}

}  // namespace enclave::attest::host
