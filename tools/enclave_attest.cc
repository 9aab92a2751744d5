// enclave-attest: TPM 2.0 attestation for hosts and automated checks. Thin: the work is
// in attest/ (verifier side: bundles, appraisal) and attest/host/ (TPM, logs, state).
//
// Host verbs (talk to a TPM): enroll, activate, quote, check.
// Verifier verbs (no TPM): challenge, confirm, verify, eventlog.
// The verifier verbs that end in a verdict exit 0 (pass), 12 (the policy says no) or 13
// (could not evaluate); docs/exit-codes.md.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>

#include "cli.h"
#include "enclave/attest/ak_key.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/credential.h"
#include "enclave/attest/ek_cert.h"
#include "enclave/attest/enrolment.h"
#include "enclave/attest/event_log.h"
#include "enclave/attest/golden_policy.h"
#include "enclave/attest/host/agent.h"
#include "enclave/attest/host/tpm.h"
#include "enclave/attest/policy.h"
#include "enclave/attest/quote.h"
#include "enclave/attest/tpm2_tools.h"
#include "enclave/attest/tpm_alg.h"
#include "enclave/attest/verifier.h"
#include "enclave/common/bytes.h"
#include "enclave/common/exit_codes.h"
#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"
#ifdef ENCLAVE_HAVE_BROKER_CLIENT
#include "enclave/broker/client.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/model_export.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/trainer/job.h"
#include "enclave/session/job_release.h"
#endif

namespace enclave {
namespace {

using attest::host::HostState;
using attest::host::Tpm;
using cli::Args;
using cli::FlagSpec;
using nlohmann::json;

constexpr char kDefaultStateDir[] = "/var/lib/enclave-attest";

const FlagSpec kJson{"json", "", "print the result as JSON"};
const FlagSpec kTcti{"tcti", "TCTI",
                     "TPM to use, a tpm2-tss TCTI string (\"device:/dev/tpmrm0\", \"swtpm:host=127.0.0.1,port=2321\"); "
                     "default: device:/dev/tpmrm0 when it exists, else the swtpm that scripts/swtpm-start started "
                     "(the TCTI in out/swtpm/tcti, relative to the working directory), else an error"};
const FlagSpec kState{"state", "DIR",
                      std::string("host state directory (the AK blob, the enrolment, the last accepted clock); default ") +
                          kDefaultStateDir};
const FlagSpec kEventLogFlag{"event-log", "PATH",
                             std::string("boot event log to send; default ") + attest::host::kDefaultEventLogPath +
                                 " (none when it does not exist); --event-log= sends none"};
const FlagSpec kImaLogFlag{"ima-log", "PATH",
                           std::string("IMA log to send; default ") + attest::host::kDefaultImaLogPath +
                               " (none when it does not exist); --ima-log= sends none"};

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// ---- small helpers ---------------------------------------------------------------------

Result<std::string> ReadText(const std::string& path, size_t limit = attest::kMaxBundleBytes) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> b, ReadWholeFile(path, limit));
  return std::string(b.begin(), b.end());
}

// Writes an output file whole or not at all; refuses to overwrite unless --force.
Status WriteOutput(const Args& args, const std::string& path, const std::string& text) {
  return attest::host::WriteFileAtomically(path, text, args.Has("force"));
}

Result<std::vector<uint8_t>> NonceFromArgs(const Args& args, size_t max_bytes = 32) {
  auto nonce = HexDecode(args.Get("nonce"));
  if (!nonce.ok() || nonce->empty() || nonce->size() > max_bytes) {
    return InvalidInput("--nonce must be 1 to " + std::to_string(max_bytes) + " bytes of hex, got '" +
                        args.Get("nonce") + "'");
  }
  return std::move(nonce).value();
}

// SHA-256 of a file, streamed (the bound data may be large).
Result<crypto::Digest256> FileSha256(const std::string& path) {
  ASSIGN_OR_RETURN(FileReader reader, FileReader::Open(path));
  crypto::Sha256Hasher h;
  std::vector<uint8_t> buf(1u << 16);
  uint64_t total = 0;
  for (;;) {
    size_t got = 0;
    RETURN_IF_ERROR(reader.Read(buf.data(), buf.size(), &got));
    if (got == 0) break;
    total += got;
    h.Update(std::span<const uint8_t>(buf.data(), got));
  }
  if (total != reader.size()) return IoError(path + ": size changed while hashing");
  return h.Final();
}

Result<std::optional<crypto::Digest256>> BoundDigestFromArgs(const Args& args) {
  if (!args.Has("bind")) return std::optional<crypto::Digest256>();
  auto d = FileSha256(args.Get("bind"));
  if (!d.ok()) return d.status().Annotate("--bind " + args.Get("bind"));
  return std::optional<crypto::Digest256>(*d);
}

Result<std::string> TctiFromArgs(const Args& args) {
  if (args.Has("tcti")) return args.Get("tcti");
  return attest::host::DefaultTcti();
}

Result<std::unique_ptr<Tpm>> OpenTpm(const Args& args) {
  ASSIGN_OR_RETURN(std::string tcti, TctiFromArgs(args));
  return Tpm::Open(tcti);
}

Result<HostState> StateFromArgs(const Args& args, bool create) {
  return HostState::Open(args.Get("state", kDefaultStateDir), create);
}

attest::host::LogSource LogsFromArgs(const Args& args) {
  attest::host::LogPaths paths;
  if (args.Has("event-log")) paths.event_log = args.Get("event-log");
  if (args.Has("ima-log")) paths.ima_log = args.Get("ima-log");
  return [paths] { return attest::host::ReadHostLogs(paths); };
}

Result<attest::Policy> PolicyFromArgs(const Args& args) {
  return attest::LoadPolicyFile(args.Get("policy"));  // its errors name the file once
}

// The AK of `verify --ak FILE`, in the form the file declares itself to be (--ak-format
// overrides): a JSON enrolment bundle, a PEM "PUBLIC KEY" or "CERTIFICATE", else a
// TPM2B_PUBLIC as tpm2_createak -u writes it. `tpmt` is set for the forms that have one.
struct GivenAk {
  attest::AkForm form = attest::AkForm::kEnrolment;
  std::vector<uint8_t> tpmt;  // kEnrolment, kTpmPublic
  std::vector<uint8_t> der;   // kPublicKey (SubjectPublicKeyInfo), kCertificate
};

Result<std::vector<uint8_t>> AkTpmtFromFile(const std::string& path);

Result<GivenAk> AkFromArgs(const Args& args) {
  const std::string path = args.Get("ak");
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, attest::kMaxBundleBytes));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  GivenAk ak;
  std::optional<attest::AkForm> form;
  if (args.Has("ak-format")) {
    form = attest::AkFormFromName(args.Get("ak-format"));
    if (!form) {
      return InvalidInput("--ak-format must be enrolment, tpm2b_public, public_key or certificate, got '" +
                          args.Get("ak-format") + "'");
    }
  } else if (text.find("-----BEGIN CERTIFICATE-----") != std::string_view::npos) {
    form = attest::AkForm::kCertificate;
  } else if (text.find("-----BEGIN PUBLIC KEY-----") != std::string_view::npos) {
    form = attest::AkForm::kPublicKey;
  }
  ak.form = form.value_or(attest::AkForm::kEnrolment);
  if (ak.form == attest::AkForm::kPublicKey || ak.form == attest::AkForm::kCertificate) {
    const bool cert = ak.form == attest::AkForm::kCertificate;
    auto der = attest::PemBlock(text, cert ? "CERTIFICATE" : "PUBLIC KEY");
    if (!der.ok()) return der.status().Annotate(path);
    ak.der = std::move(*der);
    return ak;
  }
  ASSIGN_OR_RETURN(ak.tpmt, AkTpmtFromFile(path));
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const attest::AkForm found = i < text.size() && text[i] == '{' ? attest::AkForm::kEnrolment : attest::AkForm::kTpmPublic;
  if (form && *form != found) {
    return InvalidInput(path + ": --ak-format " + attest::AkFormName(*form) + ", but the file is a " +
                        attest::AkFormName(found));
  }
  ak.form = found;
  return ak;
}

// The AK's TPMT_PUBLIC from --ak: an enrolment bundle (JSON) or a TPM2B_PUBLIC file as
// tpm2_createak -u writes it.
Result<std::vector<uint8_t>> AkTpmtFromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, attest::kMaxBundleBytes));
  size_t i = 0;
  while (i < bytes.size() && (bytes[i] == ' ' || bytes[i] == '\n' || bytes[i] == '\t' || bytes[i] == '\r')) ++i;
  std::vector<uint8_t> tpm2b;
  if (i < bytes.size() && bytes[i] == '{') {
    auto b = attest::ParseEnrolmentBundle(std::string(bytes.begin(), bytes.end()));
    if (!b.ok()) return b.status().Annotate(path);
    tpm2b = b->ak_public;
  } else {
    tpm2b = bytes;
  }
  auto pub = attest::ParseTpm2bPublic(tpm2b);
  if (!pub.ok()) return pub.status().Annotate(path + ": AK public");
  return pub->encoded;
}

// "Could not evaluate" and "the policy says no" are exit codes, not Status classes: the
// verdict verbs exit here, once every TPM object and file of the verb is released.
[[noreturn]] void ExitWith(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}

// Runs a verb that ends in a verdict: prints VerdictJson on stdout and exits 0 (pass) or
// 12 (fail); any error is "could not evaluate": one line on stderr (and the --json error
// object), exit 13.
Status RunVerdictVerb(const char* verb, const Args& args, const std::function<Result<attest::Verdict>()>& fn) {
  int code = kExitOk;
  {
    Result<attest::Verdict> v = fn();
    if (!v.ok()) {
      std::fprintf(stderr, "enclave-attest %s: could not evaluate: %s\n", verb, v.status().ToString().c_str());
      if (args.json()) {
        cli::PrintJsonLine({{"ok", false},
                            {"error", {{"code", "could not evaluate"}, {"class", CodeName(v.status().code())},
                                       {"message", v.status().message()}}}});
      }
      code = kExitNotEvaluated;
    } else {
      std::printf("%s\n", attest::VerdictJson(*v).c_str());
      code = v->passed() ? kExitOk : kExitPolicyDenied;
    }
  }
  if (code != kExitOk) ExitWith(code);
  return OkStatus();
}

// ---- verifier: the enrolment checks and the challenge ---------------------------------

Status ChallengeVerb(const Args& args) {
  return RunVerdictVerb("challenge", args, [&]() -> Result<attest::Verdict> {
    ASSIGN_OR_RETURN(attest::Policy policy, PolicyFromArgs(args));
    const std::string path = args.Get("enrolment");
    ASSIGN_OR_RETURN(std::string text, ReadText(path));
    auto e = attest::ParseEnrolmentBundle(text);
    if (!e.ok()) return e.status().Annotate(path);
    attest::Verdict v;
    ASSIGN_OR_RETURN(v.appraisal, attest::AppraiseEnrolment(policy, *e));
    if (!v.passed()) return v;  // no challenge for an enrolment the policy refuses
    ASSIGN_OR_RETURN(attest::MadeChallenge c, attest::MakeChallenge(*e, crypto::Sha256(AsBytes(text)), Now()));
    RETURN_IF_ERROR(WriteOutput(args, args.Get("out"), attest::EncodeChallengeBundle(c.bundle)));
    return v;
  });
}

Status ConfirmVerb(const Args& args) {
  return RunVerdictVerb("confirm", args, [&]() -> Result<attest::Verdict> {
    ASSIGN_OR_RETURN(std::string ctext, ReadText(args.Get("challenge")));
    auto challenge = attest::ParseChallengeBundle(ctext);
    if (!challenge.ok()) return challenge.status().Annotate(args.Get("challenge"));
    ASSIGN_OR_RETURN(std::string rtext, ReadText(args.Get("response")));
    auto response = attest::ParseActivationResponse(rtext);
    if (!response.ok()) return response.status().Annotate(args.Get("response"));
    ASSIGN_OR_RETURN(std::string etext, ReadText(args.Get("enrolment")));
    attest::Verdict v;
    crypto::Digest256 e_digest = crypto::Sha256(AsBytes(etext));
    if (e_digest == challenge->enrolment_sha256) {
      v.appraisal.Pass("activation.enrolment");
    } else {
      v.appraisal.Fail("activation.enrolment.mismatch", "enrolment_sha256", HexEncode(challenge->enrolment_sha256),
                       HexEncode(e_digest));
    }
    v.appraisal.Merge(attest::CheckActivation(*challenge, *response));
    return v;
  });
}

// ---- verifier: evidence ----------------------------------------------------------------

// Evidence as tpm2-tools writes it: --quote (tpm2_quote -m, TPMS_ATTEST), --signature (-s,
// TPMT_SIGNATURE), --pcrs (-o) in --pcrs-format values|serialized (-F), and the logs.
Result<attest::EvidenceParts> Tpm2ToolsEvidenceFromArgs(const Args& args) {
  for (const char* flag : {"quote", "signature", "pcrs", "pcrs-format"}) {
    if (!args.Has(flag)) {
      return InvalidInput(std::string("give --evidence BUNDLE, or --quote, --signature, --pcrs and --pcrs-format "
                                      "(tpm2_quote's -m, -s, -o and -F): --") + flag + " is missing");
    }
  }
  attest::EvidenceParts parts;
  ASSIGN_OR_RETURN(parts.quote.attest, ReadWholeFile(args.Get("quote"), 1u << 16));
  ASSIGN_OR_RETURN(parts.quote.signature, ReadWholeFile(args.Get("signature"), 1u << 16));
  ASSIGN_OR_RETURN(std::vector<uint8_t> pcrs, ReadWholeFile(args.Get("pcrs"), 1u << 20));
  const std::string format = args.Get("pcrs-format");
  if (format != "values" && format != "serialized")
    return InvalidInput("--pcrs-format must be values or serialized, got '" + format + "'");
  // "values" follow the quoted selection; a quote that does not parse has none to follow
  // (and fails as quote.attest.malformed).
  auto attest = attest::ParseTpmsAttest(parts.quote.attest);
  if (format == "serialized" || attest.ok()) {
    auto values = format == "serialized" ? attest::ParseTpm2ToolsPcrSerialized(pcrs)
                                         : attest::ParseTpm2ToolsPcrValues(pcrs, attest->quote_selection);
    if (!values.ok()) return values.status().Annotate(args.Get("pcrs"));
    parts.quote.pcrs = std::move(*values);
  }
  if (args.Has("event-log") && !args.Get("event-log").empty()) {
    ASSIGN_OR_RETURN(parts.event_log, ReadWholeFile(args.Get("event-log"), attest::kMaxEventLogBytes));
  }
  if (args.Has("ima-log") && !args.Get("ima-log").empty()) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> ima, ReadWholeFile(args.Get("ima-log"), attest::kMaxBundleBytes));
    parts.ima_log.assign(ima.begin(), ima.end());
  }
  return parts;
}

Status VerifyVerb(const Args& args) {
  return RunVerdictVerb("verify", args, [&]() -> Result<attest::Verdict> {
    ASSIGN_OR_RETURN(attest::Policy policy, PolicyFromArgs(args));
    attest::AppraisalContext ctx;
    const std::string qd = args.Get("qualifying-data", "enclave-v1");
    if (qd == "raw-nonce") {
      ctx.qualifying_data = attest::QualifyingDataForm::kRawNonce;
      if (args.Has("bind")) return InvalidInput("--bind: a raw-nonce quote binds nothing but the nonce");
    } else if (qd != "enclave-v1") {
      return InvalidInput("--qualifying-data must be enclave-v1 or raw-nonce, got '" + qd + "'");
    }
    ASSIGN_OR_RETURN(GivenAk ak, AkFromArgs(args));
    ctx.ak_form = ak.form;
    ctx.ak_public = ak.tpmt;
    ctx.ak_key = ak.der;
    ASSIGN_OR_RETURN(ctx.nonce, NonceFromArgs(args, ctx.qualifying_data == attest::QualifyingDataForm::kRawNonce ? 64 : 32));
    ASSIGN_OR_RETURN(ctx.bound_digest, BoundDigestFromArgs(args));
    attest::EvidenceParts parts;
    std::optional<attest::EvidenceBundle> bundle;
    if (args.Has("evidence")) {
      for (const char* flag : {"quote", "signature", "pcrs", "pcrs-format", "event-log", "ima-log"}) {
        if (args.Has(flag)) return InvalidInput(std::string("--evidence carries everything: no --") + flag);
      }
      ASSIGN_OR_RETURN(std::string text, ReadText(args.Get("evidence")));
      auto evidence = attest::ParseEvidenceBundle(text);
      if (!evidence.ok()) return evidence.status().Annotate(args.Get("evidence"));
      bundle = std::move(*evidence);
      parts = attest::ToEvidenceParts(*bundle);
    } else {
      ASSIGN_OR_RETURN(parts, Tpm2ToolsEvidenceFromArgs(args));
    }
    ctx.now = Now();
    ASSIGN_OR_RETURN(uint64_t issued, args.GetU64("issued-at", static_cast<uint64_t>(ctx.now)));
    if (issued == 0 || issued > static_cast<uint64_t>(INT64_MAX)) return InvalidInput("--issued-at out of range");
    ctx.nonce_issued_at = static_cast<int64_t>(issued);
    const std::string clock_path = args.Get("clock-state");
    if (!clock_path.empty() && ::access(clock_path.c_str(), F_OK) == 0) {
      ASSIGN_OR_RETURN(std::string ctext, ReadText(clock_path, 1u << 20));
      auto clock = attest::ParseClockState(ctext);
      if (!clock.ok()) return clock.status().Annotate(clock_path);
      ctx.last_clock = *clock;
    }
    ASSIGN_OR_RETURN(attest::Verdict v, attest::AppraiseEvidence(policy, parts, ctx));
    if (bundle) {
      // The bundle names the AK that signed; a name needs the TPMT_PUBLIC.
      if (ak.tpmt.empty()) {
        v.appraisal.NotEvaluated("evidence.ak_name", "the AK is known by its public key only (no TPMT_PUBLIC)");
      } else {
        ASSIGN_OR_RETURN(attest::TpmtPublic pub, attest::ParseTpmtPublic(ak.tpmt));
        v.appraisal.Merge(attest::CheckEvidenceAkName(*bundle, pub));
      }
    }
    if (v.passed() && !clock_path.empty() && v.clock) {
      RETURN_IF_ERROR(attest::host::WriteFileAtomically(clock_path, attest::EncodeClockState(*v.clock), true));
    }
    return v;
  });
}

// ---- verifier: a policy from a golden host ----------------------------------------------

// "a,b,c" -> {"a", "b", "c"} (the framework does not repeat flags); "" -> {}.
std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (!s.empty()) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The EK root directory as the policy names it: relative to the policy file's folder, where
// the parser resolves it (and where the broker archives it from).
std::string EkRootsAsWritten(const std::string& roots, const std::filesystem::path& policy_dir) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(roots, ec);
  if (ec) return roots;
  std::filesystem::path rel = std::filesystem::relative(abs, policy_dir, ec);
  if (ec || rel.empty()) return abs.lexically_normal().string();
  std::string s = rel.string();
  return s == "." ? "./" : s;
}

// Writes an attestation policy from a known-good host's evidence bundle, after checking that
// the evidence verifies against itself and that the policy accepts it.
Status PolicyCreateVerb(const Args& args) {
  const std::string path = args.Get("evidence");
  const bool to_file = args.Has("out");
  if (!to_file && args.json()) return InvalidInput("--json needs --out (without it the policy is what is printed)");
  const std::string out = args.Get("out");
  if (to_file && !args.Has("force") && ::access(out.c_str(), F_OK) == 0)
    return AlreadyExists(out + ": output file exists (refusing to overwrite; --force)");
  ASSIGN_OR_RETURN(std::string text, ReadText(path));
  auto evidence = attest::ParseEvidenceBundle(text);
  if (!evidence.ok()) return evidence.status().Annotate(path);
  ASSIGN_OR_RETURN(std::vector<uint8_t> ak, AkTpmtFromFile(args.Get("ak")));

  std::error_code ec;
  const std::filesystem::path policy_dir =
      to_file ? std::filesystem::absolute(out, ec).parent_path() : std::filesystem::current_path(ec);
  if (ec) return IoError("cannot resolve the policy's folder: " + ec.message());
  attest::GoldenPolicyOptions options;
  options.source = std::filesystem::path(path).filename().string() + " (SHA-256 " +
                   HexEncode(crypto::Sha256(AsBytes(text))) + ")";
  options.name = args.Get("name", "golden host " + std::filesystem::path(path).filename().string());
  options.ek_roots_dir = EkRootsAsWritten(args.Get("ek-roots"), policy_dir);
  ASSIGN_OR_RETURN(uint64_t age, args.GetU64("max-age", 300));
  if (age < 1 || age > 86400) return InvalidInput("--max-age must be 1..86400 seconds");
  options.max_evidence_age_s = static_cast<int64_t>(age);
  options.ima = args.Has("ima");
  if (args.Has("ima-exclude") && !options.ima) return InvalidInput("--ima-exclude needs --ima");
  options.ima_exclude_prefixes = SplitCommas(args.Get("ima-exclude"));

  auto made = attest::MakeGoldenPolicy(*evidence, ak, options);
  if (!made.ok()) return made.status().Annotate(path);
  // The EK roots must load from where the policy will be read.
  auto loaded = attest::ParsePolicy(made->text, policy_dir.string());
  if (!loaded.ok()) return loaded.status().Annotate("--ek-roots " + args.Get("ek-roots"));
  for (const std::string& n : made->notes) std::fprintf(stderr, "enclave-attest policy create: note: %s\n", n.c_str());
  const std::string digest = HexEncode(loaded->digest);
  if (!to_file) {
    std::fwrite(made->text.data(), 1, made->text.size(), stdout);
    std::fprintf(stderr, "enclave-attest policy create: policy SHA-256 %s\n", digest.c_str());
    return OkStatus();
  }
  RETURN_IF_ERROR(WriteOutput(args, out, made->text));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"out", out}, {"name", loaded->name}, {"sha256", digest}, {"notes", made->notes}});
  } else {
    std::printf("wrote %s: policy '%s', SHA-256 %s (review it, then pin this digest in the data-use policies)\n",
                out.c_str(), loaded->name.c_str(), digest.c_str());
  }
  return OkStatus();
}

// ---- host verbs ------------------------------------------------------------------------

Status EnrollVerb(const Args& args) {
  attest::host::EnrollOptions options;
  options.force = args.Has("force");
  if (args.Has("ek")) {
    const std::string ek = args.Get("ek");
    if (ek == "rsa") {
      options.ek_type = attest::host::EkType::kRsa2048;
    } else if (ek == "ecc") {
      options.ek_type = attest::host::EkType::kEccP256;
    } else {
      return InvalidInput("--ek must be rsa or ecc, got '" + ek + "'");
    }
  }
  const std::string ak = args.Get("ak-type", "ecc");
  if (ak == "ecc") {
    options.ak_type = attest::host::AkType::kEccP256;
  } else if (ak == "rsa") {
    options.ak_type = attest::host::AkType::kRsa2048;
  } else {
    return InvalidInput("--ak-type must be ecc or rsa, got '" + ak + "'");
  }
  const std::string out = args.Get("out");
  if (!args.Has("force") && ::access(out.c_str(), F_OK) == 0) {
    return AlreadyExists(out + ": output file exists (refusing to overwrite; --force)");
  }
  ASSIGN_OR_RETURN(HostState state, StateFromArgs(args, /*create=*/true));
  ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, OpenTpm(args));
  ASSIGN_OR_RETURN(attest::EnrolmentBundle bundle, attest::host::Enroll(*tpm, state, options, Now()));
  RETURN_IF_ERROR(WriteOutput(args, out, attest::EncodeEnrolmentBundle(bundle)));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"enrolment", out}, {"state", state.dir()}, {"ak_name", HexEncode(bundle.ak_name)}});
  } else {
    std::printf("enrolled: AK name %s; bundle %s\n", HexEncode(bundle.ak_name).c_str(), out.c_str());
  }
  return OkStatus();
}

Status ActivateVerb(const Args& args) {
  ASSIGN_OR_RETURN(std::string text, ReadText(args.Get("challenge")));
  auto challenge = attest::ParseChallengeBundle(text);
  if (!challenge.ok()) return challenge.status().Annotate(args.Get("challenge"));
  ASSIGN_OR_RETURN(HostState state, StateFromArgs(args, /*create=*/false));
  attest::ActivationResponse response;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, OpenTpm(args));
    ASSIGN_OR_RETURN(response, attest::host::Activate(*tpm, state, *challenge));
  }
  RETURN_IF_ERROR(WriteOutput(args, args.Get("out"), attest::EncodeActivationResponse(response)));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"response", args.Get("out")}});
  } else {
    std::printf("activated: response %s\n", args.Get("out").c_str());
  }
  return OkStatus();
}

Result<attest::PcrSelection> SelectionFromArgs(const Args& args) {
  if (args.Has("pcrs") && args.Has("policy")) return InvalidInput("give --pcrs or --policy, not both");
  if (args.Has("pcrs")) {
    auto sel = attest::PcrSelection::FromString(args.Get("pcrs"));
    if (!sel.ok()) return sel.status().Annotate("--pcrs");
    if (sel->banks.empty()) return InvalidInput("--pcrs selects nothing");
    return sel;
  }
  if (args.Has("policy")) {
    ASSIGN_OR_RETURN(attest::Policy policy, PolicyFromArgs(args));
    return policy.quote_selection;
  }
  return InvalidInput("give --pcrs LIST (e.g. sha256:0,1,2,3,4,5,6,7) or --policy FILE (its quote_pcrs)");
}

Status QuoteVerb(const Args& args) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> nonce, NonceFromArgs(args));
  ASSIGN_OR_RETURN(std::optional<crypto::Digest256> bound, BoundDigestFromArgs(args));
  ASSIGN_OR_RETURN(attest::PcrSelection selection, SelectionFromArgs(args));
  const std::string out = args.Get("out");
  if (!args.Has("force") && ::access(out.c_str(), F_OK) == 0) {
    return AlreadyExists(out + ": output file exists (refusing to overwrite; --force)");
  }
  ASSIGN_OR_RETURN(HostState state, StateFromArgs(args, /*create=*/false));
  attest::EvidenceBundle bundle;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, OpenTpm(args));
    ASSIGN_OR_RETURN(bundle, attest::host::MakeEvidence(*tpm, state, selection, nonce, bound, LogsFromArgs(args), Now()));
  }
  RETURN_IF_ERROR(WriteOutput(args, out, attest::EncodeEvidenceBundle(bundle)));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"evidence", out}, {"pcr_selection", bundle.pcr_selection.ToString()},
                    {"event_log_bytes", bundle.event_log.size()}, {"ima_log_bytes", bundle.ima_log.size()}});
  } else {
    std::printf("quoted %s; evidence %s\n", bundle.pcr_selection.ToString().c_str(), out.c_str());
  }
  return OkStatus();
}

// One-shot on this host: enrol if needed, check the enrolment against the policy,
// challenge and activate, quote a fresh nonce, appraise it; the last accepted clock info
// is kept in the state directory so a replayed or rolled-back quote fails next time.
Status CheckVerb(const Args& args) {
  return RunVerdictVerb("check", args, [&]() -> Result<attest::Verdict> {
    ASSIGN_OR_RETURN(attest::Policy policy, PolicyFromArgs(args));
    ASSIGN_OR_RETURN(HostState state, StateFromArgs(args, /*create=*/true));
    ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, OpenTpm(args));
    if (!state.HasAk()) {
      ASSIGN_OR_RETURN(attest::EnrolmentBundle enrolled, attest::host::Enroll(*tpm, state, {}, Now()));
      (void)enrolled;
    }
    ASSIGN_OR_RETURN(attest::EnrolmentBundle enrolment, state.LoadEnrolment());
    attest::Verdict v;
    ASSIGN_OR_RETURN(v.appraisal, attest::AppraiseEnrolment(policy, enrolment));
    if (!v.passed()) return v;

    ASSIGN_OR_RETURN(attest::MadeChallenge c,
                     attest::MakeChallenge(enrolment, crypto::Sha256(AsBytes(attest::EncodeEnrolmentBundle(enrolment))), Now()));
    auto response = attest::host::Activate(*tpm, state, c.bundle);
    if (!response.ok()) {
      if (response.status().code() != Code::kAuthFailed) return response.status();
      v.appraisal.Fail("activation.refused", "TPM2_ActivateCredential", "the TPM recovers the secret",
                       response.status().message());
      return v;
    }
    v.appraisal.Merge(attest::CheckActivation(c.bundle, *response));
    if (!v.passed()) return v;

    std::vector<uint8_t> nonce(32);
    crypto::RandomBytes(nonce);
    attest::AppraisalContext ctx;
    ctx.nonce_issued_at = Now();
    ASSIGN_OR_RETURN(attest::EvidenceBundle evidence,
                     attest::host::MakeEvidence(*tpm, state, policy.quote_selection, nonce, std::nullopt,
                                                LogsFromArgs(args), ctx.nonce_issued_at));
    tpm.reset();
    ASSIGN_OR_RETURN(attest::TpmtPublic ak, attest::ParseTpm2bPublic(enrolment.ak_public));
    ctx.ak_public = ak.encoded;
    ctx.nonce = nonce;
    ASSIGN_OR_RETURN(ctx.last_clock, state.LoadLastClock());
    ctx.now = Now();
    ASSIGN_OR_RETURN(attest::Verdict ev, attest::AppraiseEvidence(policy, attest::ToEvidenceParts(evidence), ctx));
    v.appraisal.Merge(ev.appraisal);
    v.clock = ev.clock;
    if (v.passed() && v.clock) RETURN_IF_ERROR(state.SaveLastClock(*v.clock));
    return v;
  });
}

// ---- eventlog --------------------------------------------------------------------------

// Display-only rendering of event data: printable text as a string, the rest as hex.
// (The event type is not covered by the digest: nothing here is trusted.)
json EventDataJson(const std::vector<uint8_t>& data) {
  bool printable = !data.empty();
  for (size_t i = 0; i < data.size(); ++i) {
    uint8_t b = data[i];
    bool trailing_nul = b == 0 && i + 1 == data.size();
    if (!trailing_nul && (b < 0x20 || b > 0x7e)) printable = false;
  }
  if (printable) {
    std::string s(data.begin(), data.end());
    if (!s.empty() && s.back() == '\0') s.pop_back();
    return {{"string", s}};
  }
  return {{"hex", HexEncode(data)}};
}

// Development on swtpm: measures files into PCR 10 and the IMA log as the kernel would,
// so that a workload can be attested on a TPM without a kernel behind it.
Status ImaSimulateVerb(const Args& args) {
  ASSIGN_OR_RETURN(std::string tcti, TctiFromArgs(args));
  // A real TPM's PCR 10 belongs to the kernel's IMA: a user-space line there would be a
  // measurement the kernel never made.
  if (!tcti.starts_with("swtpm") && !tcti.starts_with("mssim"))
    return PermissionDenied("ima-simulate runs only against a software TPM (swtpm: or mssim: TCTI), not '" + tcti +
                            "': on a real host the kernel's IMA measures files");
  ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, Tpm::Open(tcti));
  const std::string log = args.Get("log");
  for (const std::string& file : args.positional()) {
    std::error_code ec;
    const std::string logged = std::filesystem::canonical(file, ec).string();
    if (ec) return NotFound(file + ": " + ec.message());
    RETURN_IF_ERROR(attest::host::SimulateImaMeasurement(*tpm, file, logged, log));
    if (!args.Has("json")) std::cout << "measured " << logged << " into PCR 10 and " << log << "\n";
  }
  if (args.Has("json")) cli::PrintJson({{"measured", args.positional().size()}, {"log", log}});
  return OkStatus();
}

Status EventLogVerb(const Args& args) {
  const std::string path = args.positional()[0];
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, attest::kMaxEventLogBytes));
  auto log = attest::ParseEventLog(bytes);
  if (!log.ok()) return log.status().Annotate(path);
  auto replay = attest::ReplayEventLog(*log);
  if (!replay.ok()) return replay.status().Annotate(path);

  const bool agile = log->format == attest::LogFormat::kCryptoAgile;
  if (args.json()) {
    json events = json::array();
    for (const auto& e : log->events) {
      json digests = json::object();
      for (const auto& d : e.digests) digests[attest::AlgName(d.alg)] = HexEncode(d.digest);
      events.push_back({{"index", e.index},
                        {"offset", e.offset},
                        {"pcr", e.pcr},
                        {"type", e.type},
                        {"type_name", attest::EventTypeName(e.type)},
                        {"digests", digests},
                        {"size", e.data.size()},
                        {"data", EventDataJson(e.data)}});
    }
    json pcrs = json::object();
    for (const auto& [bank, values] : replay->pcrs) {
      json b = json::object();
      for (const auto& [idx, v] : values) b[std::to_string(idx)] = HexEncode(v);
      pcrs[attest::AlgName(bank)] = b;
    }
    json banks = json::array();
    for (uint16_t b : log->banks) banks.push_back(attest::AlgName(b));
    json doc = {{"ok", true},     {"file", path},     {"format", agile ? "crypto-agile" : "legacy-sha1"},
                {"banks", banks}, {"events", events}, {"pcrs", pcrs}};
    if (replay->startup_locality) doc["startup_locality"] = *replay->startup_locality;
    cli::PrintJson(doc);
    return OkStatus();
  }
  // Text: the layout of tpm2_eventlog (YAML), so the two can be read side by side.
  std::printf("---\nversion: %d\nevents:\n", agile ? 2 : 1);
  for (const auto& e : log->events) {
    std::printf("- EventNum: %zu\n  PCRIndex: %u\n  EventType: %s\n", e.index, e.pcr,
                attest::EventTypeName(e.type).c_str());
    std::printf("  DigestCount: %zu\n  Digests:\n", e.digests.size());
    for (const auto& d : e.digests) {
      std::printf("  - AlgorithmId: %s\n    Digest: \"%s\"\n", attest::AlgName(d.alg).c_str(),
                  HexEncode(d.digest).c_str());
    }
    std::printf("  EventSize: %zu\n  Event: \"%s\"\n", e.data.size(), HexEncode(e.data).c_str());
  }
  if (replay->startup_locality) std::printf("startup_locality: %u\n", *replay->startup_locality);
  std::printf("pcrs:\n");
  for (const auto& [bank, values] : replay->pcrs) {
    std::printf("  %s:\n", attest::AlgName(bank).c_str());
    for (const auto& [idx, v] : values) std::printf("    %-3u: 0x%s\n", idx, HexEncode(v).c_str());
  }
  return OkStatus();
}

// ---- with a broker (docs/protocol.md) ----------------------------------------------------
#ifdef ENCLAVE_HAVE_BROKER_CLIENT

const FlagSpec kBroker{"broker", "https://HOST:PORT", "the key broker (default: the job's [broker] url)"};
const FlagSpec kCa{"ca", "PEM", "certificate the broker's chain must end in (default: the job's [broker] ca)"};

Result<std::unique_ptr<broker::BrokerClient>> ClientFromArgs(const Args& args, const std::string& url,
                                                             const std::string& ca) {
  const std::string u = args.Get("broker", url), c = args.Get("ca", ca);
  if (u.empty()) return InvalidInput("no broker: give --broker URL (or a job with a [broker] table)");
  if (c.empty()) return InvalidInput("no broker certificate to pin: give --ca PEM");
  return broker::BrokerClient::Create(u, c);
}

// Evidence for the broker's nonce with the request's binding, from this host's TPM.
broker::BrokerClient::Quoter QuoterFor(const Args& args, Tpm& tpm, const HostState& state) {
  return [&args, &tpm, &state](const broker::NonceIssued& n,
                               const crypto::Digest256& bound) -> Result<attest::EvidenceBundle> {
    ASSIGN_OR_RETURN(attest::PcrSelection sel, attest::PcrSelection::FromString(n.pcr_selection));
    return attest::host::MakeEvidence(tpm, state, sel, n.nonce, bound, LogsFromArgs(args), Now());
  };
}

// Nonce requests signed with this host's AK (docs/protocol.md, "Signed nonce requests").
broker::BrokerClient::NonceSigner SignerFor(Tpm& tpm, const HostState& state) {
  return [&tpm, &state](const std::string& host_id) { return attest::host::SignNonceRequest(tpm, state, host_id); };
}

std::string HostIdOf(const attest::EnrolmentBundle& bundle) {
  const crypto::Digest256 d = crypto::Sha256(bundle.ek_public);
  return HexEncode(ByteSpan(d.data(), 16));
}

// Enrols this host with the broker: the stored enrolment (or a fresh one), the broker's
// credential challenge answered by this TPM.
Status RegisterVerb(const Args& args) {
  ASSIGN_OR_RETURN(std::unique_ptr<broker::BrokerClient> client, ClientFromArgs(args, "", ""));
  ASSIGN_OR_RETURN(HostState state, StateFromArgs(args, /*create=*/true));
  ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, OpenTpm(args));
  attest::EnrolmentBundle bundle;
  if (state.HasAk() && !args.Has("force")) {
    ASSIGN_OR_RETURN(bundle, state.LoadEnrolment());
  } else {
    attest::host::EnrollOptions o;
    o.force = args.Has("force");
    ASSIGN_OR_RETURN(bundle, attest::host::Enroll(*tpm, state, o, Now()));
  }
  ASSIGN_OR_RETURN(std::string host_id,
                   client->Enrol(bundle, [&](const attest::ChallengeBundle& c) {
                     return attest::host::Activate(*tpm, state, c);
                   }));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"host_id", host_id}, {"ak_name", HexEncode(bundle.ak_name)}});
  } else {
    std::printf("registered with the broker: host %s (AK name %s)\n", host_id.c_str(), HexEncode(bundle.ak_name).c_str());
  }
  return OkStatus();
}

// The lease file (no key material): what `renew` needs, and what the trainer reads.
json LeaseFileJson(const broker::Lease& lease, const std::string& url, const std::string& ca,
                   const broker::X25519Public& recipient) {
  return {{"format", "enclave-attest lease v1"},
          {"broker", url},
          {"ca", ca},
          {"lease", json::parse(broker::EncodeLease(lease))},
          {"recipient", HexEncode(recipient)}};
}

// Attests this host for a job and receives its data keys into a new passphrase-protected
// keystore (DIR/keys.keystore), the export public key (DIR/export.pub) and the lease
// (DIR/lease.json). The job communication key and the report key stay in this process and
// are wiped when it exits: only a trainer that attests itself can use them.
Status AttestVerb(const Args& args) {
  ASSIGN_OR_RETURN(trainer::JobSpec job, trainer::LoadJob(args.Get("job")));
  const std::string out = args.Get("out");
  std::error_code ec;
  if (std::filesystem::exists(out, ec)) return AlreadyExists(out + ": output folder exists (refusing to overwrite)");
  const std::string url = args.Get("broker", job.broker.url), ca = args.Get("ca", job.broker.ca);
  ASSIGN_OR_RETURN(std::unique_ptr<broker::BrokerClient> client, ClientFromArgs(args, job.broker.url, job.broker.ca));

  session::JobReleaseOptions ro;
  ro.policy_id = args.Get("usage-policy");
  ro.requester = args.Get("requester");
  ro.kind = args.Get("kind", "train");
  ASSIGN_OR_RETURN(uint64_t world, args.GetU64("world-size", 1));
  ASSIGN_OR_RETURN(uint64_t rank, args.GetU64("rank", 0));
  if (world > 1024) return InvalidInput("--world-size must be at most 1024");
  ro.world_size = static_cast<uint32_t>(world);
  ro.rank = static_cast<uint32_t>(std::min<uint64_t>(rank, 1024));
  ro.writes_keys = true;  // into OUT/keys.keystore: only a policy whose released_keys allow it releases
  ASSIGN_OR_RETURN(broker::ReleaseRequest request, session::ReleaseRequestForJob(job, ro));

  ASSIGN_OR_RETURN(HostState state, StateFromArgs(args, /*create=*/false));
  ASSIGN_OR_RETURN(attest::EnrolmentBundle enrolled, state.LoadEnrolment());
  ASSIGN_OR_RETURN(crypto::SecretBytes passphrase, cli::PassphraseFromArgs(args, "Passphrase for the new keystore", true));
  ASSIGN_OR_RETURN(broker::ReleaseKeys keys, broker::ReleaseKeys::Generate());
  broker::Release release;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, OpenTpm(args));
    client->SetNonceSigner(SignerFor(*tpm, state));
    auto released = client->RequestRelease(HostIdOf(enrolled), request, keys, QuoterFor(args, *tpm, state));
    client->SetNonceSigner(nullptr);  // it refers to this TPM
    ASSIGN_OR_RETURN(release, std::move(released));
  }

  // Written into a temporary folder and renamed: the output appears whole or not at all.
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  std::filesystem::remove_all(tmp, ec);
  if (!std::filesystem::create_directories(tmp, ec)) return IoError("cannot create " + tmp + ": " + ec.message());
  std::filesystem::permissions(tmp, std::filesystem::perms::owner_all, ec);
  auto write_all = [&]() -> Status {
    RETURN_IF_ERROR(crypto::Keystore::InitWithId(tmp + "/keys.keystore", passphrase, crypto::KdfParams{},
                                                 release.export_key.keystore_id));
    ASSIGN_OR_RETURN(crypto::Keystore ks, crypto::Keystore::Unlock(tmp + "/keys.keystore", passphrase));
    for (broker::ReleasedKey& k : release.keys) {
      crypto::PendingDataKey pending;
      pending.entry.dataset_id = k.dataset_id;
      pending.entry.key_id = k.key_id;
      pending.entry.suite = k.suite;
      pending.dek = std::move(k.dek);
      RETURN_IF_ERROR(ks.AddDataKey(pending));
    }
    RETURN_IF_ERROR(attest::host::WriteFileAtomically(tmp + "/export.pub", crypto::EncodeExportPublicKey(release.export_key), false));
    return attest::host::WriteFileAtomically(tmp + "/lease.json",
                                             LeaseFileJson(release.lease, url, ca, keys.recipient()).dump(2) + "\n", false);
  };
  if (Status st = write_all(); !st.ok()) {
    std::filesystem::remove_all(tmp, ec);
    return st;
  }
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove_all(tmp, ec);
    return IoError("cannot rename " + tmp + " to " + out);
  }
  const broker::Lease& l = release.lease;
  if (args.json()) {
    json ds = json::array();
    for (const auto& k : request.keys) ds.push_back(k.dataset_id);
    cli::PrintJson({{"ok", true}, {"out", out}, {"lease", json::parse(broker::EncodeLease(l))}, {"datasets", ds},
                    {"ranks_joined", release.ranks_joined}, {"audit_index", release.audit_index}});
  } else {
    std::printf("released %zu key(s) for job %s under policy %s: lease %s expires at %lld (renew before %lld); "
                "keystore %s/keys.keystore, export key %s/export.pub (audit entry %llu)\n",
                request.keys.size(), l.job_id.c_str(), l.policy_id.c_str(), l.lease_id.c_str(),
                static_cast<long long>(l.valid_until), static_cast<long long>(l.reattest_by), out.c_str(), out.c_str(),
                static_cast<unsigned long long>(release.audit_index));
  }
  return OkStatus();
}

// Renews the lease of DIR/lease.json by a fresh attestation and rewrites the file.
Status RenewVerb(const Args& args) {
  const std::string path = args.Get("lease");
  ASSIGN_OR_RETURN(std::string text, ReadText(path, 1u << 16));
  auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || j.value("format", "") != "enclave-attest lease v1" || !j.contains("lease") ||
      !j["recipient"].is_string() || !j["broker"].is_string() || !j["ca"].is_string())
    return InvalidInput(path + ": not an enclave-attest lease file");
  auto granted = broker::ParseRenewalGranted(json{{"lease", j["lease"]}, {"audit_index", 0}}.dump());
  if (!granted.ok()) return granted.status().Annotate(path);
  auto recipient_bytes = HexDecode(j["recipient"].get<std::string>());
  broker::X25519Public recipient{};
  if (!recipient_bytes.ok() || recipient_bytes->size() != recipient.size()) return InvalidInput(path + ": bad recipient");
  std::copy(recipient_bytes->begin(), recipient_bytes->end(), recipient.begin());
  const std::string url = j["broker"].get<std::string>(), ca = j["ca"].get<std::string>();
  ASSIGN_OR_RETURN(std::unique_ptr<broker::BrokerClient> client, ClientFromArgs(args, url, ca));
  ASSIGN_OR_RETURN(HostState state, StateFromArgs(args, /*create=*/false));
  broker::Lease renewed;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<Tpm> tpm, OpenTpm(args));
    client->SetNonceSigner(SignerFor(*tpm, state));
    auto renewal = client->Renew(granted->lease, recipient, QuoterFor(args, *tpm, state));
    client->SetNonceSigner(nullptr);  // it refers to this TPM
    ASSIGN_OR_RETURN(renewed, std::move(renewal));
  }
  RETURN_IF_ERROR(attest::host::WriteFileAtomically(path, LeaseFileJson(renewed, url, ca, recipient).dump(2) + "\n", true));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"lease", json::parse(broker::EncodeLease(renewed))}});
  } else {
    std::printf("renewed lease %s: renew again before %lld, ends at %lld\n", renewed.lease_id.c_str(),
                static_cast<long long>(renewed.reattest_by), static_cast<long long>(renewed.valid_until));
  }
  return OkStatus();
}

#endif  // ENCLAVE_HAVE_BROKER_CLIENT

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  // tpm2-tss logs to stderr by default (e.g. an ERROR for every absent EK certificate
  // index); every failure that matters reaches the user as one Status line instead.
  // TSS2_LOG set by the user (e.g. TSS2_LOG=esys+debug) still wins.
  setenv("TSS2_LOG", "all+NONE", /*overwrite=*/0);
  using enclave::FlagSpec;
  using enclave::cli::Verb;
  const FlagSpec force{"force", "", "overwrite the output file (enroll: also replace this host's AK)"};
  const FlagSpec policy{"policy", "FILE", "attestation policy (docs/formats/attestation-policy.md)", true};
  const FlagSpec enrolment{"enrolment", "FILE", "the host's enrolment bundle", true};
  const FlagSpec out_bundle{"out", "FILE", "where to write the result (whole or not at all)", true};
  enclave::cli::Program program{
      "enclave-attest",
      "TPM 2.0 attestation: enrolment, credential challenges, quotes, verification, event-log replay",
      {
          Verb{"enroll",
               "host: create the EK and a fresh AK, keep the AK in the state directory, write the enrolment bundle",
               "",
               0,
               {out_bundle, enclave::kTcti, enclave::kState,
                FlagSpec{"ek", "rsa|ecc", "EK type; default ecc when the TPM has an ECC P-256 EK certificate, else rsa"},
                FlagSpec{"ak-type", "ecc|rsa", "AK type: ECC P-256/ECDSA-SHA256 (default) or RSA-2048/RSASSA-SHA256"},
                force, enclave::kJson},
               enclave::EnrollVerb},
          Verb{"challenge",
               "verifier: check an enrolment (EK certificate chain and key, AK attributes) against the policy, then "
               "write a credential challenge for it; prints the verdict (exit 0, 12 refused, 13 could not evaluate)",
               "",
               0,
               {enrolment, policy, out_bundle, force, enclave::kJson},
               enclave::ChallengeVerb},
          Verb{"activate",
               "host: answer a credential challenge with TPM2_ActivateCredential (proves the AK and EK share a TPM)",
               "",
               0,
               {FlagSpec{"challenge", "FILE", "the verifier's credential challenge", true}, out_bundle,
                enclave::kTcti, enclave::kState, force, enclave::kJson},
               enclave::ActivateVerb},
          Verb{"confirm",
               "verifier: check the host's activation response against the challenge and the enrolment "
               "(exit 0, 12 refused, 13 could not evaluate)",
               "",
               0,
               {FlagSpec{"challenge", "FILE", "the verifier's own copy of the challenge", true},
                FlagSpec{"response", "FILE", "the host's activation response", true}, enrolment, enclave::kJson},
               enclave::ConfirmVerb},
          Verb{"quote",
               "host: quote the PCRs with qualifying data SHA-256(label, nonce, digest of --bind) and write the "
               "evidence bundle (quote, signature, PCR values, boot event log, IMA log)",
               "",
               0,
               {FlagSpec{"nonce", "HEX", "the verifier's nonce, 1 to 32 bytes", true},
                FlagSpec{"bind", "FILE", "bind the SHA-256 of this file into the quote"},
                FlagSpec{"pcrs", "LIST", "PCRs to quote, e.g. sha256:0,1,2,3,4,5,6,7+sha1:10"},
                FlagSpec{"policy", "FILE", "quote the PCRs this policy asks for (instead of --pcrs)"}, out_bundle,
                enclave::kEventLogFlag, enclave::kImaLogFlag, enclave::kTcti, enclave::kState, force, enclave::kJson},
               enclave::QuoteVerb},
          Verb{"verify",
               "verifier: appraise an evidence bundle against a policy; prints the JSON verdict with every check "
               "(exit 0 pass, 12 the policy says no, 13 could not evaluate)",
               "",
               0,
               {FlagSpec{"evidence", "FILE", "the host's evidence bundle (or --quote, --signature, --pcrs)"},
                FlagSpec{"quote", "FILE", "instead of --evidence: TPMS_ATTEST as tpm2_quote -m writes it"},
                FlagSpec{"signature", "FILE", "with --quote: TPMT_SIGNATURE (tpm2_quote -s, default tss format)"},
                FlagSpec{"pcrs", "FILE", "with --quote: the PCR values (tpm2_quote -o)"},
                FlagSpec{"pcrs-format", "values|serialized", "with --pcrs: tpm2_quote's -F (required)"},
                FlagSpec{"event-log", "FILE", "with --quote: the binary TCG event log"},
                FlagSpec{"ima-log", "FILE", "with --quote: the IMA ascii measurement list"}, policy,
                FlagSpec{"nonce", "HEX", "the nonce this verifier gave the host (raw-nonce: 1 to 64 bytes)", true},
                FlagSpec{"qualifying-data", "enclave-v1|raw-nonce",
                         "what the quote's extraData must be: this project's formula (default), or the nonce itself "
                         "(tpm2_quote -q, Keylime); never guessed"},
                FlagSpec{"ak", "FILE",
                         "the host's accepted AK: its enrolment bundle, a TPM2B_PUBLIC file, a PEM public key or a PEM "
                         "AK certificate (the policy's ak_forms must accept the form)",
                         true},
                FlagSpec{"ak-format", "FORM", "enrolment|tpm2b_public|public_key|certificate (default: as the file says)"},
                FlagSpec{"bind", "FILE", "the data the host was asked to bind (default: nothing bound)"},
                FlagSpec{"clock-state", "FILE",
                         "last accepted clock info of this host: read when it exists, replaced after a pass "
                         "(replayed quotes and counters going back then fail)"},
                FlagSpec{"issued-at", "UNIX", "when the nonce was issued, unix seconds (default: now)"},
                enclave::kJson},
               enclave::VerifyVerb},
          Verb{"policy create",
               "verifier: write an attestation policy from a known-good host's evidence bundle (PCR values, PCR 7 "
               "events and Secure Boot, boot applications, kernel command lines, and with --ima an IMA allowlist), "
               "each entry commented with the event it came from; refuses evidence that does not verify against "
               "itself (exit 4)",
               "",
               0,
               {FlagSpec{"evidence", "FILE", "the golden host's evidence bundle (enclave-attest quote)", true},
                FlagSpec{"ak", "FILE", "the golden host's AK: its enrolment bundle or a TPM2B_PUBLIC file", true},
                FlagSpec{"ek-roots", "DIR",
                         "trusted EK roots for the policy's ek_roots.dir (written relative to the policy's folder)",
                         true},
                FlagSpec{"ima", "", "derive an IMA allowlist (ima.mode allowlist) from the evidence's IMA log"},
                FlagSpec{"ima-exclude", "PREFIXES",
                         "with --ima: comma-separated directories (absolute, ending in /) neither listed nor judged"},
                FlagSpec{"name", "NAME", "the policy's name (default: golden host FILE)"},
                FlagSpec{"max-age", "S", "max_evidence_age_s, 1..86400 (default 300)"},
                FlagSpec{"out", "FILE", "where to write the policy (default: stdout)"}, force, enclave::kJson},
               enclave::PolicyCreateVerb},
#ifdef ENCLAVE_HAVE_BROKER_CLIENT
          Verb{"register",
               "host: enrol with the key broker (the stored enrolment, or a fresh one), answering its credential "
               "challenge with this TPM",
               "",
               0,
               {enclave::kBroker, enclave::kCa, enclave::kTcti, enclave::kState,
                FlagSpec{"force", "", "make a fresh AK even when one is stored"}, enclave::kJson},
               enclave::RegisterVerb},
          Verb{"attest",
               "host: attest to the key broker for a job and receive its dataset keys into a new keystore "
               "(OUT/keys.keystore), with the export key (OUT/export.pub) and the lease (OUT/lease.json)",
               "",
               0,
               {FlagSpec{"job", "job.toml", "the training job (its [broker] table, datasets, epochs, metrics)", true},
                FlagSpec{"out", "DIR", "a new folder for the keystore, export key and lease", true}, enclave::kBroker,
                enclave::kCa, FlagSpec{"usage-policy", "ID", "data-use policy id (default: the job's [broker] policy)"},
                FlagSpec{"requester", "NAME", "who runs the job (default: the job's [broker] requester)"},
                FlagSpec{"kind", "train|cv", "what the job will run (default train)"},
                FlagSpec{"rank", "R", "this process's rank (default 0)"},
                FlagSpec{"world-size", "N", "ranks in the job (default 1)"}, enclave::kEventLogFlag,
                enclave::kImaLogFlag, enclave::kTcti, enclave::kState, enclave::cli::PassphraseFdFlag(),
                enclave::kJson},
               enclave::AttestVerb},
          Verb{"renew",
               "host: renew a lease by a fresh attestation (rewrites the lease file)",
               "",
               0,
               {FlagSpec{"lease", "FILE", "the lease file `attest` wrote", true}, enclave::kBroker, enclave::kCa,
                enclave::kEventLogFlag, enclave::kImaLogFlag, enclave::kTcti, enclave::kState, enclave::kJson},
               enclave::RenewVerb},
#endif
          Verb{"check",
               "one-shot on this host: enrol if needed, check the enrolment, challenge, activate, quote, verify; "
               "prints the JSON verdict (exit 0, 12, 13); keeps the last accepted clock in the state directory",
               "",
               0,
               {policy, enclave::kEventLogFlag, enclave::kImaLogFlag, enclave::kTcti, enclave::kState,
                enclave::kJson},
               enclave::CheckVerb},
          Verb{"ima-simulate",
               "development on swtpm only: measure FILE into PCR 10 and append its ima-ng line to --log, "
               "as the kernel's IMA does when it runs a file (refuses a TPM device)",
               "FILE",
               1,
               {FlagSpec{"log", "FILE", "the IMA log to append to (created when missing)", true}, enclave::kTcti,
                enclave::kJson},
               enclave::ImaSimulateVerb},
          Verb{"eventlog",
               "replay a binary TCG event log (crypto-agile or legacy SHA-1); print events and PCRs per bank",
               "FILE",
               1,
               {enclave::kJson},
               enclave::EventLogVerb},
      },
      // `attest` holds released keys and `quote` the TPM session: no core dumps, no ptrace.
      true};
  return enclave::cli::Main(program, argc, argv);
}
