// AppraiseEvidence end to end on a synthetic measured boot (boot_fixture.h): every policy
// rule passes on the genuine evidence and fails, with its named finding, when one thing
// changes; the verdict JSON form; the qualifying data formula.
#include "enclave/attest/verifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "boot_fixture.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/measurements.h"

namespace enclave::attest {
namespace {

using namespace attest_test;
using json = nlohmann::json;

constexpr int64_t kIssued = 1700000000;

std::string TempDir(const std::string& tag) {
  std::string dir = ::testing::TempDir() + "verifier_" + tag + "_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

// Independent of verifier.cc: SHA-256(label || 0x00 || u8 len || nonce || bound or zeros).
Bytes ExpectedQualifyingData(const Bytes& nonce, const Bytes& bound) {
  Bytes in = StrBytes("enclave-attest quote v1");
  in.push_back(0);
  in.push_back(uint8_t(nonce.size()));
  in = Cat(in, nonce);
  in = Cat(in, bound.empty() ? Bytes(32, 0) : bound);
  return Sha256(in);
}

struct Host {
  Pkey key = MakeEcKey();
  std::vector<BootEvent> events = TypicalBoot();
  std::vector<ImaFile> ima = {{"/usr/bin/enclave-train", Sha256(StrBytes("trainer v1"))},
                              {"/usr/lib/modules/nvidia.ko", Sha256(StrBytes("driver 550"))},
                              {"/usr/bin/bash", Sha256(StrBytes("bash"))}};
  std::vector<uint32_t> quoted = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  Bytes nonce = Bytes(16, 0x42);
  std::optional<Bytes> extra;  // overrides the qualifying data in the quote
  bool send_event_log = true;
  bool send_ima_log = true;

  Bytes AkPublic() { return EncodeAkPublic(key.get()); }

  EvidenceParts Evidence() {
    EvidenceParts ev;
    auto boot = BootPcrs(events, 0x000B);
    Bytes concat;
    for (uint32_t i : quoted) {
      Bytes v = i == 10 ? ImaPcr10Sha256(ima) : boot.count(i) ? boot[i] : Bytes(32, 0);
      ev.quote.pcrs[alg::kSha256][i] = v;
      concat = Cat(concat, v);
    }
    AttestFields f;
    f.extra = extra ? *extra : ExpectedQualifyingData(nonce, {});
    f.sel = {{alg::kSha256, quoted}};
    f.pcr_digest = Sha256(concat);
    ev.quote.attest = EncodeAttest(f);
    ev.quote.signature = SignAttest(key.get(), ev.quote.attest);
    if (send_event_log) ev.event_log = EncodeBootLog(events);
    if (send_ima_log) ev.ima_log = ImaLogText(ima);
    return ev;
  }
};

class VerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    WriteFile(dir_ + "/roots/root.pem", SelfSignedPem("Test EK Root"));
    json pcrs = json::array();
    for (int i = 0; i <= 10; ++i) pcrs.push_back(i);
    policy_ = {
        {"version", 1},
        {"name", "verifier-test"},
        {"quote_pcrs", {{"sha256", pcrs}}},
        {"ek_roots", {{"files", {"roots/root.pem"}}}},
        {"max_evidence_age_s", 300},
        {"event_log", {{"required", true}, {"exempt_pcrs", {10}}}},
        {"secure_boot", true},
        {"boot_applications", {{"sha256", {Hex(Sha256(StrBytes("shim image"))), Hex(Sha256(StrBytes("grub image")))}}}},
        {"kernel_cmdlines", {"/vmlinuz-6.1 root=/dev/sda1 ro"}},
        {"ima",
         {{"required", true},
          {"files",
           {{"/usr/bin/enclave-train", {{"digests", {"sha256:" + Hex(Sha256(StrBytes("trainer v1")))}}}},
            {"/usr/lib/modules/nvidia.ko", {{"digests", {"sha256:" + Hex(Sha256(StrBytes("driver 550")))}}}}}}}},
    };
  }

  Policy LoadPolicy() {
    auto p = ParsePolicy(policy_.dump(), dir_);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : Policy{};
  }

  AppraisalContext Context() {
    AppraisalContext c;
    c.ak_public = host_.AkPublic();
    c.nonce = host_.nonce;
    c.nonce_issued_at = kIssued;
    c.now = kIssued + 30;
    return c;
  }

  Verdict Appraise() { return Appraise(Context()); }
  Verdict Appraise(const AppraisalContext& ctx) {
    Policy p = LoadPolicy();
    auto v = AppraiseEvidence(p, host_.Evidence(), ctx);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : Verdict{};
  }

  // Exactly the named check fails (possibly more than once), nothing else.
  void ExpectOnly(const Verdict& v, const std::string& check) {
    EXPECT_FALSE(v.passed());
    EXPECT_TRUE(v.appraisal.Failed(check)) << v.appraisal.Summary();
    for (const auto& f : v.appraisal.failures()) EXPECT_EQ(f.check, check) << v.appraisal.Summary();
  }

  // `check` fails, and every failure is one of `allowed` (consequences of the same change).
  void ExpectAmong(const Verdict& v, const std::string& check, std::set<std::string> allowed) {
    EXPECT_FALSE(v.passed());
    EXPECT_TRUE(v.appraisal.Failed(check)) << v.appraisal.Summary();
    allowed.insert(check);
    for (const auto& f : v.appraisal.failures()) EXPECT_TRUE(allowed.count(f.check)) << v.appraisal.Summary();
  }

  std::string dir_;
  json policy_;
  Host host_;
};

TEST_F(VerifierTest, GenuineEvidencePassesEveryRule) {
  Verdict v = Appraise();
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  const auto& p = v.appraisal.passed();
  for (const char* check : {"quote.signature", "quote.extra_data", "quote.pcr_digest", "evidence.age", "eventlog.pcrs",
                            "secureboot.enabled", "bootapp.digests", "cmdline", "ima.pcr", "ima.files",
                            "eventlog.events.readable"}) {
    EXPECT_NE(std::find(p.begin(), p.end(), check), p.end()) << check;
  }
  ASSERT_TRUE(v.clock.has_value());
  EXPECT_EQ(v.clock->clock, 1000u);
}

TEST_F(VerifierTest, QualifyingDataFormula) {
  Bytes nonce = {1, 2, 3};
  crypto::Digest256 bound{};
  bound.fill(0x5A);
  auto qd = QualifyingData(nonce, bound);
  ASSERT_TRUE(qd.ok());
  EXPECT_EQ(Bytes(qd->begin(), qd->end()), ExpectedQualifyingData(nonce, Bytes(32, 0x5A)));
  auto unbound = QualifyingData(nonce, std::nullopt);
  ASSERT_TRUE(unbound.ok());
  EXPECT_EQ(Bytes(unbound->begin(), unbound->end()), ExpectedQualifyingData(nonce, {}));
  // The vector in docs/formats/evidence.md.
  EXPECT_EQ(Hex(Bytes(unbound->begin(), unbound->end())),
            "053a712b568192e1506f6319dd9c1206abc53fad2c9a55bdb026bf53fb6c00d5");
  EXPECT_FALSE(QualifyingData(Bytes{}, std::nullopt).ok());
  EXPECT_FALSE(QualifyingData(Bytes(33, 1), std::nullopt).ok());
  EXPECT_TRUE(QualifyingData(Bytes(32, 1), std::nullopt).ok());
}

TEST_F(VerifierTest, BoundDigestMustMatch) {
  AppraisalContext ctx = Context();
  crypto::Digest256 bound{};
  bound.fill(7);
  ctx.bound_digest = bound;  // the host quoted with nothing bound
  ExpectOnly(Appraise(ctx), "quote.extra_data.mismatch");
  host_.extra = ExpectedQualifyingData(host_.nonce, Bytes(32, 7));
  EXPECT_TRUE(Appraise(ctx).passed());
}

TEST_F(VerifierTest, WrongNonceFails) {
  AppraisalContext ctx = Context();
  ctx.nonce = Bytes(16, 0x43);
  ExpectOnly(Appraise(ctx), "quote.extra_data.mismatch");
}

TEST_F(VerifierTest, EvidenceAge) {
  AppraisalContext ctx = Context();
  ctx.now = kIssued + 300;
  EXPECT_TRUE(Appraise(ctx).passed());
  ctx.now = kIssued + 301;
  ExpectOnly(Appraise(ctx), "evidence.age.expired");
  ctx.now = kIssued - 1;
  ExpectOnly(Appraise(ctx), "evidence.age.future");
}

TEST_F(VerifierTest, CouldNotEvaluateIsAnError) {
  Policy p = LoadPolicy();
  AppraisalContext ctx = Context();
  ctx.ak_public.clear();
  EXPECT_FALSE(AppraiseEvidence(p, host_.Evidence(), ctx).ok());
  ctx = Context();
  ctx.ak_public.resize(10);
  EXPECT_FALSE(AppraiseEvidence(p, host_.Evidence(), ctx).ok());
  ctx = Context();
  ctx.nonce.clear();
  EXPECT_FALSE(AppraiseEvidence(p, host_.Evidence(), ctx).ok());
  ctx = Context();
  ctx.now = 0;
  EXPECT_FALSE(AppraiseEvidence(p, host_.Evidence(), ctx).ok());
  EXPECT_FALSE(AppraiseEvidence(Policy{}, host_.Evidence(), Context()).ok());
}

TEST_F(VerifierTest, DifferentAkFails) {
  AppraisalContext ctx = Context();
  Pkey other = MakeEcKey();
  ctx.ak_public = EncodeAkPublic(other.get());
  ExpectOnly(Appraise(ctx), "quote.signature.invalid");
}

TEST_F(VerifierTest, ChangedEventFailsReplay) {
  host_.events = TypicalBoot();
  EvidenceParts ev = host_.Evidence();
  // The host reports PCRs of the genuine boot but a log with one event changed.
  auto changed = TypicalBoot();
  changed[1].data = StrBytes("platform firmware blob, patched");
  ev.event_log = EncodeBootLog(changed);
  Policy p = LoadPolicy();
  auto v = AppraiseEvidence(p, ev, Context());
  ASSERT_TRUE(v.ok());
  ExpectOnly(*v, "eventlog.pcr.mismatch");
}

TEST_F(VerifierTest, QuotedPcrTheLogNeverExtendsFailsUnlessExempt) {
  host_.quoted.push_back(11);  // PCR 11: zero, no event
  policy_["quote_pcrs"]["sha256"].push_back(11);
  ExpectOnly(Appraise(), "eventlog.pcr.not_extended");
  policy_["event_log"]["exempt_pcrs"].push_back(11);
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
}

TEST_F(VerifierTest, ALogNoQuotedPcrIsComparedWith) {
  host_.quoted = {10};
  policy_["quote_pcrs"] = {{"sha256", {10}}};
  for (const char* key : {"secure_boot", "boot_applications", "kernel_cmdlines"}) policy_.erase(key);
  policy_["event_log"]["required"] = false;
  Verdict v = Appraise();
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();  // the log is sent but binds nothing: not read
  policy_["event_log"]["required"] = true;
  ExpectOnly(Appraise(), "eventlog.pcrs.none_compared");
}

TEST_F(VerifierTest, EventLogRequired) {
  host_.send_event_log = false;
  ExpectOnly(Appraise(), "eventlog.missing");
}

TEST_F(VerifierTest, MalformedEventLogIsAFinding) {
  EvidenceParts ev = host_.Evidence();
  ev.event_log.resize(ev.event_log.size() - 3);
  Policy p = LoadPolicy();
  auto v = AppraiseEvidence(p, ev, Context());
  ASSERT_TRUE(v.ok());
  ExpectOnly(*v, "eventlog.malformed");
}

TEST_F(VerifierTest, PcrReferenceValues) {
  auto boot = BootPcrs(host_.events, 0x000B);
  policy_["pcr_values"] = {{"0", {{"sha256", {Hex(Bytes(32, 1)), Hex(boot[0])}}}}};
  EXPECT_TRUE(Appraise().passed());
  policy_["pcr_values"] = {{"0", {{"sha256", {Hex(Bytes(32, 1))}}}}};
  ExpectOnly(Appraise(), "pcr.value.not_allowed");
}

TEST_F(VerifierTest, PerEventReferenceDigests) {
  json allowed = json::array();
  for (const auto& e : host_.events) {
    if (e.pcr == 4) allowed.push_back(Hex(Sha256(e.measured ? *e.measured : e.data)));
  }
  policy_["event_digests"] = {{"4", {{"sha256", allowed}}}};
  EXPECT_TRUE(Appraise().passed());
  allowed.erase(allowed.begin() + 1);
  policy_["event_digests"] = {{"4", {{"sha256", allowed}}}};
  ExpectOnly(Appraise(), "event.digest.not_allowed");
}

TEST_F(VerifierTest, SecureBootOffFails) {
  host_.events[2] = SbVariable("SecureBoot", {0});
  ExpectOnly(Appraise(), "secureboot.disabled");
  policy_["secure_boot"] = false;
  EXPECT_TRUE(Appraise().passed());
}

TEST_F(VerifierTest, SecureBootVariableMissing) {
  host_.events.erase(host_.events.begin() + 6);  // dbx
  ExpectOnly(Appraise(), "secureboot.config.missing");
}

TEST_F(VerifierTest, SecureBootVariablesOutOfOrder) {
  std::swap(host_.events[3], host_.events[4]);  // KEK before PK
  ExpectOnly(Appraise(), "secureboot.config.order");
}

TEST_F(VerifierTest, SecureBootSeparatorError) {
  for (auto& e : host_.events) {
    if (e.pcr == 7 && e.type == 0x4) e = Separator(7, 0xFFFFFFFFu);
  }
  ExpectOnly(Appraise(), "secureboot.separator.error");
}

TEST_F(VerifierTest, SecureBootConfigAfterSeparator) {
  host_.events.push_back(SbVariable("db", StrBytes("late db")));
  ExpectOnly(Appraise(), "secureboot.config.after_separator");
}

TEST_F(VerifierTest, SecureBootDataThatTheDigestDoesNotCoverFails) {
  // The log claims SecureBoot=1 while the extended digest is that of SecureBoot=0.
  BootEvent& sb = host_.events[2];
  sb.measured = UefiVariableData(Guid(false), "SecureBoot", {0});
  // The event is not believed, so SecureBoot counts as not measured.
  ExpectAmong(Appraise(), "eventlog.variable.digest_mismatch", {"secureboot.config.missing"});
}

TEST_F(VerifierTest, BootApplicationNotAllowed) {
  host_.events[19].measured = StrBytes("other grub image");
  ExpectOnly(Appraise(), "bootapp.digest.not_allowed");
}

TEST_F(VerifierTest, KernelCommandLineNotAllowed) {
  host_.events[21] = GrubString("kernel_cmdline: ", "/vmlinuz-6.1 root=/dev/sda1 ro init=/bin/sh");
  ExpectOnly(Appraise(), "cmdline.not_allowed");
}

TEST_F(VerifierTest, KernelCommandLineTextNotCoveredByDigestFails) {
  // The event text shows the allowed command line; the digest is of another one.
  host_.events[21].measured = StrBytes("/vmlinuz-6.1 root=/dev/sda1 ro init=/bin/sh");
  ExpectAmong(Appraise(), "eventlog.cmdline.digest_mismatch", {"cmdline.missing"});
}

TEST_F(VerifierTest, KernelCommandLineMissing) {
  host_.events.erase(host_.events.begin() + 21);
  ExpectOnly(Appraise(), "cmdline.missing");
}

TEST_F(VerifierTest, UnknownEventTypeInJudgedPcrFails) {
  host_.events.push_back({4, 0x12345, StrBytes("mystery"), std::nullopt, true});
  // Its digest is not an allowed boot application either, but it is not one by type; the
  // type itself is the failure.
  ExpectOnly(Appraise(), "eventlog.event_type.unknown");
}

TEST_F(VerifierTest, UnknownEventTypeInUnjudgedPcrIsReplayedOnly) {
  host_.events.push_back({5, 0x12345, StrBytes("mystery"), std::nullopt, true});
  Verdict v = Appraise();
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
}

// The event type and the data outside the hashed part are not covered by the digest. In
// a PCR that a rule reads, relabelling an event (or editing its prefix) must not hide it
// from the rule: each case is first shown failing honestly, then relabelled.
TEST_F(VerifierTest, BootApplicationRelabelledStillFails) {
  host_.events.insert(host_.events.begin() + 20,
                      BootEvent{4, 0x80000003, StrBytes("evil.efi"), StrBytes("evil image"), true});
  ExpectOnly(Appraise(), "bootapp.digest.not_allowed");
  host_.events[20].type = 0x80000004;  // EV_EFI_BOOT_SERVICES_DRIVER, same digest
  ExpectOnly(Appraise(), "eventlog.event_type.unexpected");
  host_.events[20].type = 0x80000005;  // EV_EFI_RUNTIME_SERVICES_DRIVER
  ExpectOnly(Appraise(), "eventlog.event_type.unexpected");
  // EV_EFI_ACTION whose data is the hashed image: the digest verifies, the string is not one.
  host_.events[20] = BootEvent{4, 0x80000007, StrBytes("evil image"), std::nullopt, true};
  ExpectOnly(Appraise(), "eventlog.action.unexpected");
  // A known action string whose digest is not H(string).
  host_.events[20] = BootEvent{4, 0x80000007, StrBytes("Calling EFI Application from Boot Option"),
                               StrBytes("evil image"), true};
  ExpectOnly(Appraise(), "eventlog.action.digest_mismatch");
  // Honest PFP actions pass.
  host_.events[20] = BootEvent{4, 0x80000007, StrBytes("Returning from EFI Application from Boot Option"),
                               std::nullopt, true};
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
  // Without a boot_applications rule, PCR 4's event types are not restricted.
  host_.events[20] = BootEvent{4, 0x80000004, StrBytes("evil.efi"), StrBytes("evil image"), true};
  policy_.erase("boot_applications");
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
}

TEST_F(VerifierTest, KernelCommandLineRelabelledStillFails) {
  const std::string evil = "/vmlinuz-6.1 root=/dev/sda1 ro init=/bin/sh";
  host_.events.push_back(GrubString("kernel_cmdline: ", evil));
  ExpectOnly(Appraise(), "cmdline.not_allowed");
  host_.events.back().data[0] = 'K';  // "Kernel_cmdline: ": not a GRUB prefix
  ExpectOnly(Appraise(), "eventlog.grub_string.malformed");
  host_.events.back() = GrubString("kernel_cmdline: ", evil);
  host_.events.back().type = 0x6;  // EV_EVENT_TAG
  ExpectOnly(Appraise(), "eventlog.event_type.unexpected");
  host_.events.back().type = 0x80000007;  // EV_EFI_ACTION
  ExpectOnly(Appraise(), "eventlog.event_type.unexpected");
  // Another GRUB prefix over the same digest: a command line starts with the kernel's path.
  host_.events.back() = GrubString("kernel_cmdline: ", evil);
  host_.events.back().data = GrubString("grub_cmd: ", evil).data;
  ExpectOnly(Appraise(), "cmdline.not_allowed");
  host_.events.back().data = GrubString("module_cmdline: ", evil).data;
  ExpectOnly(Appraise(), "cmdline.loader.unsupported");
  // A 4-character string relabelled EV_SEPARATOR (digest = H(4 bytes of data)).
  host_.events.back() = {8, 0x4, StrBytes("/k x"), std::nullopt, true};
  ExpectOnly(Appraise(), "eventlog.event_type.unexpected");
  // A GRUB string whose digest is not of its text.
  host_.events.back() = GrubString("grub_cmd: ", "echo hello");
  host_.events.back().measured = StrBytes("echo bye");
  ExpectOnly(Appraise(), "eventlog.grub_string.digest_mismatch");
  // Without a kernel_cmdlines rule, PCR 8's events are not restricted.
  host_.events.back() = GrubString("kernel_cmdline: ", evil);
  host_.events.back().type = 0x6;
  policy_.erase("kernel_cmdlines");
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
}

TEST_F(VerifierTest, KernelLoadCommandIsJudgedWhateverItsPrefix) {
  // GRUB measures the `linux` command as well as the command line it builds.
  const std::string cmd = "linux /vmlinuz-6.1 root=/dev/sda1 ro init=/bin/sh";
  host_.events.push_back(GrubString("grub_cmd: ", cmd));
  ExpectOnly(Appraise(), "cmdline.not_allowed");
  host_.events.back().data = GrubString("kernel_cmdline: ", cmd).data;
  ExpectOnly(Appraise(), "cmdline.not_allowed");
  host_.events.back() = GrubString("grub_cmd: ", "linuxefi /vmlinuz-6.1 root=/dev/sda1 ro");
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
  // GRUB quotes an argument with a space in the command line, not in the command.
  policy_["kernel_cmdlines"].push_back("/vmlinuz-6.1 root=/dev/sda1 ro \"dyndbg=file x.c +p\"");
  host_.events.back() = GrubString("grub_cmd: ", "linux /vmlinuz-6.1 root=/dev/sda1 ro dyndbg=file x.c +p");
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
  host_.events.back() = GrubString("grub_cmd: ", "multiboot2 /xen.gz dom0_mem=4G");
  ExpectOnly(Appraise(), "cmdline.loader.unsupported");
}

TEST_F(VerifierTest, SecureBootConfigRelabelledStillFails) {
  host_.events.push_back(SbVariable("db", StrBytes("db-list + attacker cert")));
  ExpectOnly(Appraise(), "secureboot.config.after_separator");
  host_.events.back().type = 0x800000E0;  // EV_EFI_VARIABLE_AUTHORITY: still the db variable
  ExpectOnly(Appraise(), "secureboot.config.after_separator");
  host_.events.back() = SbVariable("KEK", StrBytes("kek-list + attacker key"));
  host_.events.back().type = 0x800000E0;
  ExpectOnly(Appraise(), "secureboot.config.after_separator");
  host_.events.back() = SbVariable("db", StrBytes("db-list + attacker cert"));
  host_.events.back().type = 0x80000007;  // EV_EFI_ACTION
  ExpectOnly(Appraise(), "eventlog.action.unexpected");
  host_.events.back().type = 0x8000000C;  // EV_EFI_VARIABLE_BOOT2
  ExpectOnly(Appraise(), "eventlog.event_type.unexpected");
  // Authorities are read as UEFI_VARIABLE_DATA whose digest is H(data).
  host_.events.back() = {7, 0x800000E0, StrBytes("db certificate used"), std::nullopt, true};
  ExpectOnly(Appraise(), "eventlog.authority.malformed");
  host_.events.back() = {7, 0x800000E0, DbAuthorityData("cert"), DbAuthorityData("other cert"), true};
  ExpectOnly(Appraise(), "eventlog.authority.digest_mismatch");
  // An honest authority (one EFI_SIGNATURE_DATA of db, or a shim certificate) passes.
  host_.events.back() = {7, 0x800000E0, DbAuthorityData("second cert"), std::nullopt, true};
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
  const Bytes shim_guid = {0x50, 0xAB, 0x5D, 0x60, 0x46, 0xE0, 0x00, 0x43,
                           0xAB, 0xB6, 0x3D, 0xD8, 0x10, 0xDD, 0x8B, 0x23};
  host_.events.back() = {7, 0x800000E0, UefiVariableData(shim_guid, "SbatLevel", StrBytes("sbat,1,2021030218\n")),
                         std::nullopt, true};
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
}

// Tolerated firmware quirks (docs/formats/evidence.md): each accepted in its exact form
// only, named in the verdict; anything near it still fails by name.
const Bytes kShimGuid = {0x50, 0xAB, 0x5D, 0x60, 0x46, 0xE0, 0x00, 0x43,
                         0xAB, 0xB6, 0x3D, 0xD8, 0x10, 0xDD, 0x8B, 0x23};

TEST_F(VerifierTest, ShimAuthorityWithOneExtraByteIsToleratedInItsExactFormOnly) {
  // shim before commit 8a27a48 (go-attestation issue 157): one byte after the
  // UEFI_VARIABLE_DATA, the digest over the data without it.
  const Bytes var = UefiVariableData(kShimGuid, "Shim", StrBytes("0\x82 vendor certificate"));
  const Bytes logged = Cat(var, Bytes{0x00});
  host_.events.push_back({7, 0x800000E0, logged, var, true});
  Verdict v = Appraise();
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  const auto& p = v.appraisal.passed();
  EXPECT_EQ(std::count(p.begin(), p.end(), "eventlog.quirk.shim_authority_extra_byte"), 1) << VerdictJson(v);
  // The PFP form of the same authority passes without naming the quirk.
  host_.events.back() = {7, 0x800000E0, var, std::nullopt, true};
  v = Appraise();
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  EXPECT_EQ(std::count(v.appraisal.passed().begin(), v.appraisal.passed().end(),
                       "eventlog.quirk.shim_authority_extra_byte"), 0);
  // A digest of neither form: over the whole data (extra byte included), or of other data.
  host_.events.back() = {7, 0x800000E0, logged, std::nullopt, true};
  ExpectOnly(Appraise(), "eventlog.authority.digest_mismatch");
  host_.events.back() = {7, 0x800000E0, logged, UefiVariableData(kShimGuid, "Shim", StrBytes("other")), true};
  ExpectOnly(Appraise(), "eventlog.authority.digest_mismatch");
  // Two extra bytes are no known form.
  host_.events.back() = {7, 0x800000E0, Cat(logged, Bytes{0x00}), var, true};
  ExpectOnly(Appraise(), "eventlog.authority.malformed");
  // Every bank must agree on the shim form: SHA-256 over the whole data, SHA-1 without the byte.
  host_.events.back() = {7, 0x800000E0, logged, var, true};
  EvidenceParts ev = host_.Evidence();
  const Bytes shim_sha256 = Sha256(var), whole_sha256 = Sha256(logged);
  auto at = std::search(ev.event_log.begin(), ev.event_log.end(), shim_sha256.begin(), shim_sha256.end());
  ASSERT_NE(at, ev.event_log.end());
  std::copy(whole_sha256.begin(), whole_sha256.end(), at);
  auto mixed = AppraiseEvidence(LoadPolicy(), ev, Context());
  ASSERT_TRUE(mixed.ok());
  ExpectAmong(*mixed, "eventlog.authority.digest_mismatch", {"eventlog.pcr.mismatch"});
  // The tolerance is for authorities only: a Secure Boot variable with an extra byte fails.
  host_.events.back() = {7, 0x800000E0, var, std::nullopt, true};
  const Bytes sb = UefiVariableData(Guid(false), "SecureBoot", {1});
  host_.events[2] = {7, 0x80000001, Cat(sb, Bytes{0x00}), sb, true};
  ExpectAmong(Appraise(), "eventlog.variable.malformed", {"secureboot.config.missing"});
}

TEST_F(VerifierTest, SeparatorErrorValuesAreNamedInHex) {
  // PFP 1.05: 00000001 on a firmware error; the TCG EFI Platform 1.22 value ffffffff.
  const std::vector<std::pair<uint32_t, std::string>> cases = {
      {1, "01000000 (firmware error)"}, {0xFFFFFFFFu, "ffffffff (firmware error)"}, {0x12345678u, "78563412"}};
  for (const auto& [value, got] : cases) {
    for (auto& e : host_.events) {
      if (e.pcr == 7 && e.type == 0x4) e = Separator(7, value);
    }
    Verdict v = Appraise();
    ExpectOnly(v, "secureboot.separator.error");
    ASSERT_FALSE(v.appraisal.failures().empty());
    EXPECT_EQ(v.appraisal.failures()[0].expected, "separator value 00000000");
    EXPECT_EQ(v.appraisal.failures()[0].got, got);
  }
}

TEST_F(VerifierTest, NoActionEventWithoutAPcrPasses) {
  // A Windows-style EV_NO_ACTION with pcrIndex 0xFFFFFFFF, in the middle of a judged boot.
  host_.events.insert(host_.events.begin() + 3, BootEvent{0xFFFFFFFFu, 0x3, StrBytes("no PCR"), std::nullopt, false});
  Verdict v = Appraise();
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  // Any other type with that index makes the log malformed.
  host_.events[3].type = 0x80000007;
  ExpectOnly(Appraise(), "eventlog.malformed");
}

// Issue 20 §1: third-party evidence. The qualifying-data form and the AK form are the
// verifier's choice, never read from the evidence; what a form cannot support is listed as
// not evaluated, never as passed.
TEST_F(VerifierTest, RawNonceQualifyingDataIsChosenByTheVerifier) {
  host_.extra = host_.nonce;  // as tpm2_quote -q NONCE and Keylime make it
  ExpectOnly(Appraise(), "quote.extra_data.mismatch");  // the default expects this project's formula
  AppraisalContext ctx = Context();
  ctx.qualifying_data = QualifyingDataForm::kRawNonce;
  Verdict v = Appraise(ctx);
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  EXPECT_TRUE(v.appraisal.not_evaluated().empty());
  host_.extra.reset();  // this project's formula is no raw nonce
  ExpectOnly(Appraise(ctx), "quote.extra_data.mismatch");
  host_.nonce = Bytes(64, 7);  // up to a TPM2B_DATA's 64 bytes
  host_.extra = host_.nonce;
  ctx.nonce = host_.nonce;
  EXPECT_TRUE(Appraise(ctx).passed());
  // Could not evaluate: a nonce over 64 bytes, or something to bind (a raw nonce binds nothing).
  Policy p = LoadPolicy();
  ctx.nonce = Bytes(65, 7);
  EXPECT_FALSE(AppraiseEvidence(p, host_.Evidence(), ctx).ok());
  ctx.nonce = host_.nonce;
  ctx.bound_digest = crypto::Digest256{};
  EXPECT_FALSE(AppraiseEvidence(p, host_.Evidence(), ctx).ok());
}

TEST_F(VerifierTest, AkAsABarePublicKeyLeavesItsAttributesNotEvaluated) {
  AppraisalContext ctx = Context();
  ctx.ak_form = AkForm::kPublicKey;
  ctx.ak_public.clear();
  ctx.ak_key = SpkiDer(host_.key.get());
  auto refused = AppraiseEvidence(LoadPolicy(), host_.Evidence(), ctx);  // not in the default ak_forms
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("does not accept an AK given as public_key"), std::string::npos);
  policy_["ak_forms"] = {"enrolment", "public_key"};
  Verdict v = Appraise(ctx);
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  std::set<std::string> not_evaluated;
  for (const auto& n : v.appraisal.not_evaluated()) not_evaluated.insert(n.check);
  const std::set<std::string> expected = {"ak.attributes", "ak.name_alg",    "ak.symmetric",
                                          "ak.scheme",     "ak.scheme.hash", "quote.signature.scheme"};
  EXPECT_EQ(not_evaluated, expected);
  const auto& passed = v.appraisal.passed();
  for (const auto& c : expected) EXPECT_EQ(std::count(passed.begin(), passed.end(), c), 0) << c;
  for (const char* c : {"ak.ecc.curve", "ak.public", "quote.signature", "quote.pcr_digest", "secureboot.enabled"})
    EXPECT_EQ(std::count(passed.begin(), passed.end(), c), 1) << c;
  json j = json::parse(VerdictJson(v));
  ASSERT_TRUE(j.contains("not_evaluated")) << VerdictJson(v);
  EXPECT_EQ(j["not_evaluated"].size(), expected.size());
  auto ordered = nlohmann::ordered_json::parse(VerdictJson(v));
  EXPECT_EQ(std::prev(ordered.end()).key(), "not_evaluated");  // after verdict, passed, failures
  // An enrolled host's verdict keeps its three members.
  EXPECT_EQ(json::parse(VerdictJson(Appraise())).size(), 3u);
  // Another key's quote, a key that is no SubjectPublicKeyInfo.
  Pkey other = MakeEcKey();
  ctx.ak_key = SpkiDer(other.get());
  ExpectOnly(Appraise(ctx), "quote.signature.invalid");
  ctx.ak_key.push_back(0);
  EXPECT_FALSE(AppraiseEvidence(LoadPolicy(), host_.Evidence(), ctx).ok());
}

TEST_F(VerifierTest, AkCertificateMustChainToTheConfiguredAkRoots) {
  Pkey ca_key = MakeEcKey(), other_key = MakeEcKey();
  const time_t now = kIssued + 30;
  TestCert ca = IssueCert(ca_key.get(), "Test AK CA", true, nullptr, ca_key.get(), now);
  TestCert other_ca = IssueCert(other_key.get(), "Other CA", true, nullptr, other_key.get(), now);
  WriteFile(dir_ + "/ak-roots/ca.pem", ca.pem);
  policy_["ak_forms"] = {"certificate"};
  policy_.erase("ek_roots");
  policy_["ak_roots"] = {{"files", {"ak-roots/ca.pem"}}};
  AppraisalContext ctx = Context();
  ctx.ak_form = AkForm::kCertificate;
  ctx.ak_public.clear();
  ctx.ak_key = IssueCert(host_.key.get(), "host AK", false, &ca, ca_key.get(), now).der;
  Verdict v = Appraise(ctx);
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  for (const char* c : {"ak.cert.der", "ak.cert.chain", "quote.signature"})
    EXPECT_EQ(std::count(v.appraisal.passed().begin(), v.appraisal.passed().end(), c), 1) << c;
  EXPECT_FALSE(v.appraisal.not_evaluated().empty());
  // Issued by a CA the policy does not name; expired at the appraisal time; trailing bytes.
  ctx.ak_key = IssueCert(host_.key.get(), "host AK", false, &other_ca, other_key.get(), now).der;
  ExpectOnly(Appraise(ctx), "ak.cert.chain.untrusted");
  ctx.ak_key = IssueCert(host_.key.get(), "host AK", false, &ca, ca_key.get(), now, -7200, -60).der;
  ExpectOnly(Appraise(ctx), "ak.cert.chain.expired");
  ctx.ak_key = Cat(IssueCert(host_.key.get(), "host AK", false, &ca, ca_key.get(), now).der, Bytes{0});
  ExpectOnly(Appraise(ctx), "ak.cert.der.trailing_bytes");
  // A genuine certificate for another key: the quote's signature fails.
  Pkey stranger = MakeEcKey();
  ctx.ak_key = IssueCert(stranger.get(), "other AK", false, &ca, ca_key.get(), now).der;
  ExpectOnly(Appraise(ctx), "quote.signature.invalid");
  // The policy accepts certificates only: an enrolled AK is refused (could not evaluate).
  EXPECT_FALSE(AppraiseEvidence(LoadPolicy(), host_.Evidence(), Context()).ok());
}

TEST(EvidenceAkName, TheBundlesAkNameMustBeTheGivenAks) {
  Pkey key = MakeEcKey(), other = MakeEcKey();
  auto ak = ParseTpmtPublic(EncodeAkPublic(key.get()));
  auto other_ak = ParseTpmtPublic(EncodeAkPublic(other.get()));
  ASSERT_TRUE(ak.ok() && other_ak.ok());
  EvidenceBundle b;
  b.ak_name = Cat(Bytes{0x00, 0x0B}, Sha256(ak->encoded));  // nameAlg || H(TPMT_PUBLIC), computed here
  Appraisal a = CheckEvidenceAkName(b, *ak);
  EXPECT_TRUE(a.ok()) << a.Summary();
  a = CheckEvidenceAkName(b, *other_ak);
  ASSERT_TRUE(a.Failed("evidence.ak_name.mismatch")) << a.Summary();
  EXPECT_EQ(a.failures()[0].got, Hex(b.ak_name));
}

TEST_F(VerifierTest, UefiDebugModeFailsSecureBoot) {
  host_.events.insert(host_.events.begin() + 2, BootEvent{7, 0x80000007, StrBytes("UEFI Debug Mode"), std::nullopt, true});
  ExpectOnly(Appraise(), "secureboot.debug_mode");
  // Any other action string in PCR 7 is not recognised.
  host_.events[2].data = StrBytes("DMA Protection Disabled");
  ExpectOnly(Appraise(), "eventlog.action.unexpected");
  host_.events[2].data = StrBytes("UEFI Debug Mode");
  policy_["secure_boot"] = false;
  EXPECT_TRUE(Appraise().passed()) << Appraise().appraisal.Summary();
}

TEST_F(VerifierTest, ImaViolationNeverSatisfiesAFileRule) {
  // The trainer was never measured; a violation (ToMToU on another file) happened.
  host_.ima.erase(host_.ima.begin());
  policy_["ima"]["allow_violations"] = true;
  auto with_violation = [&](const std::string& line) {
    EvidenceParts ev = host_.Evidence();
    // PCR 10 extended with ff.. for the violation; re-sign the quote over the new value.
    Bytes pcr10 = Sha256(Cat(ImaPcr10Sha256(host_.ima), Bytes(32, 0xFF)));
    auto boot = BootPcrs(host_.events, 0x000B);
    Bytes concat;
    for (uint32_t i : host_.quoted) {
      Bytes v = i == 10 ? pcr10 : boot.count(i) ? boot[i] : Bytes(32, 0);
      ev.quote.pcrs[alg::kSha256][i] = v;
      concat = Cat(concat, v);
    }
    AttestFields f;
    f.extra = ExpectedQualifyingData(host_.nonce, {});
    f.sel = {{alg::kSha256, host_.quoted}};
    f.pcr_digest = Sha256(concat);
    ev.quote.attest = EncodeAttest(f);
    ev.quote.signature = SignAttest(host_.key.get(), ev.quote.attest);
    std::string text = ImaLogText(host_.ima) + line;
    ev.ima_log.assign(text.begin(), text.end());
    Policy p = LoadPolicy();
    auto v = AppraiseEvidence(p, ev, Context());
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : Verdict{};
  };
  const std::string zeros(40, '0');
  ExpectOnly(with_violation("10 " + zeros + " ima-ng sha256:" + std::string(64, '0') + " /var/log/x\n"),
             "ima.file.missing");
  // The same violation line rewritten to name the trainer with its allowed digest.
  ExpectOnly(with_violation("10 " + zeros + " ima-ng sha256:" + Hex(Sha256(StrBytes("trainer v1"))) +
                            " /usr/bin/enclave-train\n"),
             "ima.file.missing");
  // Nor does a violation naming a file with another digest count against it.
  host_.ima.insert(host_.ima.begin(), ImaFile{"/usr/bin/enclave-train", Sha256(StrBytes("trainer v1"))});
  Verdict v = with_violation("10 " + zeros + " ima-ng sha256:" + Hex(Sha256(StrBytes("trainer v2"))) +
                             " /usr/bin/enclave-train\n");
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
}

TEST_F(VerifierTest, ImaFileDigestNotAllowed) {
  host_.ima[0].sha256 = Sha256(StrBytes("trainer v2"));
  ExpectOnly(Appraise(), "ima.file.digest_not_allowed");
}

TEST_F(VerifierTest, ImaRequiredFileMissing) {
  host_.ima.erase(host_.ima.begin() + 1);
  ExpectOnly(Appraise(), "ima.file.missing");
  policy_["ima"]["files"]["/usr/lib/modules/nvidia.ko"]["required"] = false;
  EXPECT_TRUE(Appraise().passed());
}

TEST_F(VerifierTest, ImaLogNotMatchingPcr10Fails) {
  EvidenceParts ev = host_.Evidence();
  ev.ima_log = ImaLogText({host_.ima[0], host_.ima[1]});  // one measurement left out
  Policy p = LoadPolicy();
  auto v = AppraiseEvidence(p, ev, Context());
  ASSERT_TRUE(v.ok());
  ExpectOnly(*v, "ima.pcr.mismatch");
}

TEST_F(VerifierTest, ImaLogRequired) {
  host_.send_ima_log = false;
  ExpectOnly(Appraise(), "ima.missing");
}

// Allowlist mode: every measurement must be listed with an allowed digest or excluded.
class ImaAllowlistTest : public VerifierTest {
 protected:
  void SetUp() override {
    VerifierTest::SetUp();
    policy_["ima"]["mode"] = "allowlist";
    policy_["ima"]["allowlist"] = {
        {"/usr/bin/enclave-train", {"sha256:" + Hex(Sha256(StrBytes("trainer v1")))}},
        {"/usr/lib/modules/nvidia.ko", {"sha256:" + Hex(Sha256(StrBytes("driver 550")))}},
        {"/usr/bin/bash", {"sha256:" + Hex(Sha256(StrBytes("bash")))}}};
    policy_["ima"]["exclude_path_prefixes"] = {"/var/log/"};
  }
};

TEST_F(ImaAllowlistTest, EveryMeasurementListedPasses) {
  Verdict v = Appraise();
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  const auto& p = v.appraisal.passed();
  EXPECT_NE(std::find(p.begin(), p.end(), "ima.allowlist"), p.end());
}

TEST_F(ImaAllowlistTest, AnUnlistedProgramFailsByName) {
  // What the files rules alone never saw: another program ran on the attested host.
  host_.ima.push_back({"/tmp/exfiltrate", Sha256(StrBytes("attacker"))});
  Verdict v = Appraise();
  ExpectOnly(v, "ima.allowlist.path_not_listed");
  EXPECT_EQ(v.appraisal.failures()[0].where, "line 4 /tmp/exfiltrate");
  EXPECT_EQ(v.appraisal.failures()[0].got, "sha256:" + Hex(Sha256(StrBytes("attacker"))));
  // The same measurement passes without allowlist mode: the files rules judge listed paths only.
  policy_["ima"].erase("mode");
  policy_["ima"].erase("allowlist");
  policy_["ima"].erase("exclude_path_prefixes");
  EXPECT_TRUE(Appraise().passed());
}

TEST_F(ImaAllowlistTest, ListedPathWithAnotherDigestFails) {
  host_.ima[2].sha256 = Sha256(StrBytes("bash with a backdoor"));
  ExpectOnly(Appraise(), "ima.allowlist.digest_not_allowed");
}

TEST_F(ImaAllowlistTest, ExcludedPrefixesOnlyCoverTheirDirectory) {
  host_.ima.push_back({"/var/log/syslog", Sha256(StrBytes("log"))});
  EXPECT_TRUE(Appraise().passed());
  host_.ima.push_back({"/var/logger", Sha256(StrBytes("not under /var/log/"))});
  ExpectOnly(Appraise(), "ima.allowlist.path_not_listed");
}

TEST_F(ImaAllowlistTest, ParserRefusesWeakAllowlists) {
  auto refused = [&](const std::string& expected) {
    auto p = ParsePolicy(policy_.dump(), dir_);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find(expected), std::string::npos) << p.status().message();
  };
  json saved = policy_;
  policy_["ima"]["exclude_path_prefixes"] = {"/"};
  refused("$.ima.exclude_path_prefixes[0]");
  policy_ = saved;
  policy_["ima"]["exclude_path_prefixes"] = {"/var/lo"};
  refused("ending in '/'");
  policy_ = saved;
  policy_["ima"]["allow_violations"] = true;
  refused("$.ima.allow_violations");
  policy_ = saved;
  policy_["ima"]["required"] = false;
  refused("$.ima.required");
  policy_ = saved;
  policy_["ima"]["allowlist"] = json::object();
  refused("lists no file");
  policy_ = saved;
  policy_["ima"]["mode"] = "strict";
  refused("$.ima.mode");
  policy_ = saved;
  policy_["ima"].erase("mode");
  refused("must be \"allowlist\" when an allowlist is given");
}

crypto::Digest256 Sha256Digest(const Bytes& b) {
  crypto::Digest256 d{};
  const Bytes h = Sha256(b);
  std::copy(h.begin(), h.end(), d.begin());
  return d;
}

TEST_F(VerifierTest, FindImaMeasurementNeedsTheQuotedLog) {
  const crypto::Digest256 trainer = Sha256Digest(StrBytes("trainer v1"));
  auto found = FindImaMeasurement(host_.Evidence(), trainer);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, "/usr/bin/enclave-train");
  // Not measured at all.
  auto absent = FindImaMeasurement(host_.Evidence(), Sha256Digest(StrBytes("trainer v2")));
  EXPECT_EQ(absent.status().code(), Code::kFailedPrecondition);
  // A log the quoted PCR 10 does not replay to proves nothing.
  EvidenceParts ev = host_.Evidence();
  ev.ima_log = ImaLogText({host_.ima[0]});
  EXPECT_EQ(FindImaMeasurement(ev, trainer).status().code(), Code::kFailedPrecondition);
  // PCR 10 not quoted: the log is not bound to the quote.
  host_.quoted = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(FindImaMeasurement(host_.Evidence(), trainer).status().code(), Code::kFailedPrecondition);
  host_.send_ima_log = false;
  EXPECT_EQ(FindImaMeasurement(host_.Evidence(), trainer).status().code(), Code::kFailedPrecondition);
}

TEST_F(VerifierTest, VerdictJsonGolden) {
  Verdict v;
  v.appraisal.Pass("quote.signature");
  v.appraisal.Pass("evidence.age");
  v.appraisal.Fail("cmdline.not_allowed", "event 19 PCR 8", "one of the policy's kernel_cmdlines", "quiet \"x\"");
  EXPECT_EQ(VerdictJson(v),
            R"({"verdict":"fail","passed":["quote.signature","evidence.age"],"failures":[{"check":"cmdline.not_allowed",)"
            R"("where":"event 19 PCR 8","expected":"one of the policy's kernel_cmdlines","got":"quiet \"x\""}]})");
  Verdict pass;
  pass.appraisal.Pass("quote.signature");
  EXPECT_EQ(VerdictJson(pass), R"({"verdict":"pass","passed":["quote.signature"],"failures":[]})");
  EXPECT_EQ(VerdictJson(Verdict{}), R"({"verdict":"fail","passed":[],"failures":[]})");
}

TEST_F(VerifierTest, VerdictJsonOfARealFailure) {
  AppraisalContext ctx = Context();
  ctx.now = kIssued + 1000;
  Verdict v = Appraise(ctx);
  auto j = json::parse(VerdictJson(v));
  EXPECT_EQ(j["verdict"], "fail");
  ASSERT_EQ(j["failures"].size(), 1u);
  EXPECT_EQ(j["failures"][0]["check"], "evidence.age.expired");
  EXPECT_EQ(j["failures"][0]["expected"], "<= 300 s");
  EXPECT_EQ(j["failures"][0]["got"], "1000 s");
}

// ExtendInPlace (the low-level digest calls of tpm_alg.cc) equals H(pcr || digest).
TEST(MeasurementsTest, Sha256ExtendMatchesTheDigest) {
  Bytes pcr(32, 0), d(32, 0);
  for (int round = 0; round < 64; ++round) {
    for (size_t i = 0; i < 32; ++i) d[i] = uint8_t(round * 31 + i * 7);
    Bytes want = Sha256(Cat(pcr, d));
    ASSERT_TRUE(ExtendInPlace(alg::kSha256, pcr, d).ok());
    ASSERT_EQ(pcr, want) << round;
  }
  Bytes sha1pcr(20, 0);
  Bytes want = Sha1(Cat(sha1pcr, Bytes(20, 9)));
  ASSERT_TRUE(ExtendInPlace(alg::kSha1, sha1pcr, Bytes(20, 9)).ok());
  EXPECT_EQ(sha1pcr, want);
}

TEST(MeasurementsTest, KnownTypesAreTheNamedOnes) {
  for (uint32_t t = 0; t < 0x40; ++t) {
    EXPECT_EQ(IsKnownEventType(t), EventTypeName(t).rfind("EV_UNKNOWN_", 0) != 0) << t;
    EXPECT_EQ(IsKnownEventType(0x80000000u + t), EventTypeName(0x80000000u + t).rfind("EV_UNKNOWN_", 0) != 0) << t;
  }
  for (uint32_t t = 0x800000C0u; t < 0x80000100u; ++t) {
    EXPECT_EQ(IsKnownEventType(t), EventTypeName(t).rfind("EV_UNKNOWN_", 0) != 0) << t;
  }
  EXPECT_FALSE(IsKnownEventType(0xFFFFFFFFu));
}

// The copy-free view and the copying EventLog read the same log the same way.
TEST(MeasurementsTest, ViewAndEventLogAgree) {
  Bytes bytes = EncodeBootLog(TypicalBoot());
  auto log = ParseEventLog(bytes);
  auto view = ParseEventLogView(bytes);
  ASSERT_TRUE(log.ok() && view.ok());
  ASSERT_EQ(log->events.size(), view->events.size());
  EXPECT_EQ(log->banks, view->banks);
  for (size_t i = 1; i < log->events.size(); ++i) {
    const Event& e = log->events[i];
    const EventView& v = view->events[i];
    EXPECT_EQ(e.pcr, v.pcr);
    EXPECT_EQ(e.type, v.type);
    EXPECT_EQ(e.offset, v.offset);
    EXPECT_EQ(e.data, Bytes(v.data.begin(), v.data.end()));
    for (size_t k = 0; k < view->banks.size(); ++k) {
      EXPECT_EQ(e.digests[k].alg, view->banks[k]);
      EXPECT_EQ(e.digests[k].digest, Bytes(v.digests[k].begin(), v.digests[k].end()));
    }
  }
  auto r1 = ReplayEventLog(*log);
  auto r2 = ReplayEventLog(*view);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1->pcrs, r2->pcrs);
  EXPECT_EQ(r1->pcrs.at(alg::kSha256), BootPcrs(TypicalBoot(), alg::kSha256));
  EXPECT_EQ(r1->pcrs.at(alg::kSha1), BootPcrs(TypicalBoot(), alg::kSha1));
  const uint16_t only[] = {alg::kSha256};
  auto r3 = ReplayEventLog(*view, only);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->pcrs.size(), 1u);
  EXPECT_EQ(r3->pcrs.at(alg::kSha256), r1->pcrs.at(alg::kSha256));
  Measurements a = ReadMeasurements(*log), b = ReadMeasurements(*view);
  EXPECT_EQ(a.kernel_cmdlines.size(), b.kernel_cmdlines.size());
  EXPECT_EQ(a.boot_applications.size(), 2u);
  EXPECT_EQ(b.boot_applications.size(), 2u);
  EXPECT_EQ(a.secure_boot.config.size(), 5u);
  EXPECT_EQ(b.secure_boot.config.size(), 5u);
  EXPECT_EQ(a.separators, b.separators);
  EXPECT_TRUE(CheckSecureBoot(a).ok());
  EXPECT_TRUE(CheckSecureBoot(b).ok());
}

TEST(MeasurementsTest, SecureBootVariableOrAuthority) {
  // EFI_SIGNATURE_LIST: SignatureType, ListSize, HeaderSize, SignatureSize, entries.
  auto esl = [](size_t entries, uint32_t sig_size) {
    Le w;
    w.raw(Bytes(16, 0xA1)).u32(uint32_t(28 + entries * sig_size)).u32(0).u32(sig_size);
    for (size_t i = 0; i < entries * sig_size; ++i) w.u8(uint8_t(i));
    return w.b;
  };
  EXPECT_TRUE(IsSignatureListSequence(esl(2, 48)));
  EXPECT_TRUE(IsSignatureListSequence(Cat(esl(1, 48), esl(3, 20))));
  EXPECT_TRUE(IsSignatureListSequence({}));
  Bytes cut = esl(2, 48);
  cut.pop_back();
  EXPECT_FALSE(IsSignatureListSequence(cut));
  EXPECT_FALSE(IsSignatureListSequence(esl(1, 15)));
  EXPECT_FALSE(IsSignatureListSequence(Cat(esl(1, 48), {0})));

  Bytes owner(16, 7);
  EXPECT_TRUE(IsSignatureDataEntry(Cat(owner, Bytes(32, 1))));                 // SHA-256 entry
  EXPECT_TRUE(IsSignatureDataEntry(Cat(owner, {0x30, 0x82, 0x00, 0x02, 5, 6})));  // DER, 2-byte length
  EXPECT_TRUE(IsSignatureDataEntry(Cat(owner, {0x30, 0x01, 9})));
  EXPECT_FALSE(IsSignatureDataEntry(Cat(owner, {0x30, 0x82, 0x00, 0x03, 5, 6})));
  EXPECT_FALSE(IsSignatureDataEntry(Cat(owner, StrBytes("not der"))));
  EXPECT_FALSE(IsSignatureDataEntry(owner));

  auto var = [](bool image_db, const std::string& name, const Bytes& data) {
    auto v = ParseUefiVariable(UefiVariableData(Guid(image_db), name, data));
    EXPECT_TRUE(v.ok());
    return *v;
  };
  EXPECT_TRUE(IsSecureBootPolicyVariable(var(false, "KEK", Cat(owner, Bytes(32, 1)))));
  EXPECT_TRUE(IsSecureBootPolicyVariable(var(true, "dbx", Cat(owner, Bytes(32, 1)))));
  EXPECT_TRUE(IsSecureBootPolicyVariable(var(true, "db", esl(1, 48))));
  EXPECT_TRUE(IsSecureBootPolicyVariable(var(true, "db", {})));
  EXPECT_TRUE(IsSecureBootPolicyVariable(var(true, "db", StrBytes("db-list"))));
  EXPECT_FALSE(IsSecureBootPolicyVariable(var(true, "db", Cat(owner, Bytes(32, 1)))));
  auto authority = ParseUefiVariable(DbAuthorityData("certificate"));
  ASSERT_TRUE(authority.ok());
  EXPECT_FALSE(IsSecureBootPolicyVariable(*authority));
}

TEST(MeasurementsTest, GrubUnquoteCmdline) {
  EXPECT_EQ(GrubUnquoteCmdline("/vmlinuz root=/dev/sda1 ro"), "/vmlinuz root=/dev/sda1 ro");
  EXPECT_EQ(GrubUnquoteCmdline("/vmlinuz \"dyndbg=file x.c +p\" a=\\\"q\\\""), "/vmlinuz dyndbg=file x.c +p a=\"q\"");
  EXPECT_EQ(GrubUnquoteCmdline("/vmlinuz a=\\x41 b=\\\\"), "/vmlinuz a=\\x41 b=\\");
}

TEST(MeasurementsTest, UefiVariableDataIsExact) {
  Bytes good = UefiVariableData(Guid(false), "SecureBoot", {1});
  auto v = ParseUefiVariable(good);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->name, "SecureBoot");
  EXPECT_EQ(v->data, Bytes{1});
  Bytes trailing = Cat(good, {0});
  EXPECT_FALSE(ParseUefiVariable(trailing).ok());
  good.resize(good.size() - 1);
  EXPECT_FALSE(ParseUefiVariable(good).ok());
  EXPECT_FALSE(ParseUefiVariable(Bytes(31, 0)).ok());
  // A name length that would overflow 2*n.
  Bytes huge = UefiVariableData(Guid(false), "X", {});
  for (int i = 0; i < 8; ++i) huge[16 + i] = 0xFF;
  EXPECT_FALSE(ParseUefiVariable(huge).ok());
}

}  // namespace
}  // namespace enclave::attest
