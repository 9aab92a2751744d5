// MakeGoldenPolicy (issue 20 §3) on a synthetic measured boot (boot_fixture.h): the policy
// made from one host's evidence accepts that host's next quote and refuses a host whose boot
// differs in one event, by name; its IMA allowlist accepts the same IMA log and refuses one
// extra file; evidence that does not verify against itself is refused, naming the check.
#include "enclave/attest/golden_policy.h"

#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "boot_fixture.h"
#include "enclave/attest/policy.h"

namespace enclave::attest {
namespace {

using namespace attest_test;
using json = nlohmann::json;

PcrSelection Selection(const std::vector<uint32_t>& pcrs) {
  PcrSelection s;
  uint32_t bits = 0;
  for (uint32_t i : pcrs) bits |= 1u << i;
  s.banks = {{alg::kSha1, 3, bits}, {alg::kSha256, 3, bits}};
  return s;
}

Bytes ImaPcr10Sha1(const std::vector<ImaFile>& files) {
  Bytes pcr(20, 0);
  for (const auto& f : files) pcr = Sha1(Cat(pcr, Sha1(ImaTemplateData(f))));
  return pcr;
}

// One host: an AK, a boot, an IMA log, and quotes over them (SHA-1 and SHA-256, PCRs 0-10).
struct Host {
  Pkey key = MakeEcKey();
  std::vector<BootEvent> events = TypicalBoot();
  std::vector<ImaFile> ima = {{"boot_aggregate", Sha256(StrBytes("pcrs 0-7"))},
                              {"/usr/bin/enclave-train", Sha256(StrBytes("trainer v1"))},
                              {"/usr/lib/modules/nvidia.ko", Sha256(StrBytes("driver 550"))},
                              {"/var/log/enclave/run.log", Sha256(StrBytes("log 1"))}};
  std::vector<uint32_t> quoted = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  bool violation = false;  // append an IMA violation line (all-zero template hash, extended as ff)
  uint64_t clock = 1000;

  std::string ImaText() {
    std::string text = ImaLogText(ima);
    if (violation) text += "10 " + std::string(40, '0') + " ima-ng sha256:" + std::string(64, '0') + " /tmp/y\n";
    return text;
  }
  Bytes Pcr10(uint16_t bank) {
    Bytes pcr = bank == alg::kSha1 ? ImaPcr10Sha1(ima) : ImaPcr10Sha256(ima);
    if (violation) pcr = bank == alg::kSha1 ? Sha1(Cat(pcr, Bytes(20, 0xFF))) : Sha256(Cat(pcr, Bytes(32, 0xFF)));
    return pcr;
  }

  Bytes AkPublic() { return EncodeAkPublic(key.get()); }
  Bytes AkName() { return Cat({0x00, 0x0B}, Sha256(AkPublic())); }

  EvidenceBundle Quote(const Bytes& nonce) {
    EvidenceBundle b;
    b.nonce = nonce;
    b.ak_name = AkName();
    b.pcr_selection = Selection(quoted);
    Bytes concat;
    for (uint16_t bank : {alg::kSha1, alg::kSha256}) {
      auto boot = BootPcrs(events, bank);
      const size_t size = bank == alg::kSha1 ? 20 : 32;
      for (uint32_t i : quoted) {
        Bytes v = i == 10 ? Pcr10(bank) : boot.count(i) ? boot[i] : Bytes(size, 0);
        b.pcrs[bank][i] = v;
        concat = Cat(concat, v);
      }
    }
    AttestFields f;
    Bytes qd = Cat(Cat(StrBytes(std::string("enclave-attest quote v1", 24)), {uint8_t(nonce.size())}), nonce);
    f.extra = Sha256(Cat(qd, Bytes(32, 0)));
    f.sel = {{alg::kSha1, quoted}, {alg::kSha256, quoted}};
    f.pcr_digest = Sha256(concat);
    f.clock = clock++;
    b.attest = EncodeAttest(f);
    b.signature = SignAttest(key.get(), b.attest);
    b.event_log = EncodeBootLog(events);
    b.ima_log = ImaText();
    return b;
  }
};

BootEvent& EventMeasuring(std::vector<BootEvent>& events, const std::string& measured) {
  for (auto& e : events)
    if (e.measured && *e.measured == StrBytes(measured)) return e;
  throw std::runtime_error("no event measures " + measured);
}

class GoldenPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "golden_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(getpid());
    WriteFile(dir_ + "/roots/root.pem", SelfSignedPem("Test EK Root"));
    options_.name = "golden test";
    options_.source = "evidence.json";
    options_.ek_roots_dir = "roots";
  }

  Result<GoldenPolicy> Make(Host& host, const Bytes& nonce = Bytes(16, 0x42)) {
    return MakeGoldenPolicy(host.Quote(nonce), host.AkPublic(), options_);
  }
  GoldenPolicy MakeOk(Host& host) {
    auto g = Make(host);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return g.ok() ? *g : GoldenPolicy{};
  }
  // The policy file as a verifier loads it (EK roots read from its folder).
  Policy Load(const GoldenPolicy& g) {
    auto p = ParsePolicy(g.text, dir_);
    EXPECT_TRUE(p.ok()) << p.status().ToString() << "\n" << g.text;
    return p.ok() ? *p : Policy{};
  }
  Verdict Verify(const Policy& p, Host& host, const Bytes& nonce) {
    AppraisalContext ctx;
    ctx.ak_public = host.AkPublic();
    ctx.nonce = nonce;
    ctx.nonce_issued_at = 1700000000;
    ctx.now = ctx.nonce_issued_at + 5;
    auto v = AppraiseEvidence(p, ToEvidenceParts(host.Quote(nonce)), ctx);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : Verdict{};
  }
  // Every failure is one of `allowed`, and each of `required` is among them.
  static void ExpectFailures(const Verdict& v, const std::set<std::string>& required, std::set<std::string> allowed) {
    EXPECT_FALSE(v.passed());
    for (const auto& c : required) EXPECT_TRUE(v.appraisal.Failed(c)) << c << ": " << v.appraisal.Summary();
    allowed.insert(required.begin(), required.end());
    for (const auto& f : v.appraisal.failures()) EXPECT_TRUE(allowed.count(f.check)) << v.appraisal.Summary();
  }
  static bool Passed(const Verdict& v, const std::string& check) {
    const auto& p = v.appraisal.passed();
    return std::find(p.begin(), p.end(), check) != p.end();
  }
  static void ExpectRefused(const Result<GoldenPolicy>& g, Code code, const std::string& named) {
    ASSERT_FALSE(g.ok()) << g->text;
    EXPECT_EQ(g.status().code(), code) << g.status().ToString();
    EXPECT_NE(g.status().message().find(named), std::string::npos) << g.status().ToString();
  }

  std::string dir_;
  GoldenPolicyOptions options_;
};

const Bytes kNextNonce(20, 0x77);

TEST_F(GoldenPolicyTest, AcceptsTheHostsNextQuoteAndEveryRuleIsDerived) {
  Host host;
  GoldenPolicy g = MakeOk(host);
  EXPECT_TRUE(g.self_check.passed()) << g.self_check.appraisal.Summary();
  EXPECT_TRUE(g.notes.empty()) << g.notes.front();
  Policy p = Load(g);
  EXPECT_TRUE(p.require_secure_boot);
  EXPECT_EQ(p.log_exempt_pcrs, std::set<uint32_t>{10});
  EXPECT_EQ(p.kernel_cmdlines, std::vector<std::string>{"/vmlinuz-6.1 root=/dev/sda1 ro"});
  EXPECT_EQ(p.boot_applications.at(alg::kSha256),
            (std::set<Bytes>{Sha256(StrBytes("shim image")), Sha256(StrBytes("grub image"))}));
  EXPECT_EQ(p.pcr_values.size(), 10u);  // 0-9; PCR 10 grows with IMA
  EXPECT_FALSE(p.pcr_values.count(10));
  EXPECT_EQ(p.pcr_values.at(7).at(alg::kSha1).size(), 1u);
  EXPECT_TRUE(p.event_digests.count(7));

  Verdict v = Verify(p, host, kNextNonce);
  EXPECT_TRUE(v.passed()) << v.appraisal.Summary();
  for (const char* c :
       {"pcr.values", "eventlog.pcrs", "event.digests", "secureboot.enabled", "bootapp.digests", "cmdline", "ima.pcr"})
    EXPECT_TRUE(Passed(v, c)) << c << " not passed: " << v.appraisal.Summary();
}

TEST_F(GoldenPolicyTest, EachEntryNamesTheEventItCameFrom) {
  Host host;
  GoldenPolicy g = MakeOk(host);
  json j = json::parse(g.text);
  // TypicalBoot: the shim is event 19 and grub event 20 (the Spec ID header is event 0).
  const json& apps = j["boot_applications"]["sha256"];
  ASSERT_EQ(apps.size(), 2u);
  EXPECT_EQ(apps[0]["value"], Hex(Sha256(StrBytes("shim image"))));
  EXPECT_EQ(apps[0]["comment"], "event 19 EV_EFI_BOOT_SERVICES_APPLICATION \"shimx64.efi device path\"");
  EXPECT_EQ(apps[1]["comment"], "event 20 EV_EFI_BOOT_SERVICES_APPLICATION \"grubx64.efi device path\"");
  // The kernel command line: both GRUB events that carry it.
  ASSERT_EQ(j["kernel_cmdlines"].size(), 1u);
  EXPECT_EQ(j["kernel_cmdlines"][0]["comment"], "event 22 kernel command line; event 21 GRUB command linux");
  // db and dbx among PCR 7's events, by name and GUID.
  std::string pcr7;
  for (const auto& e : j["event_digests"]["7"]["sha256"]) pcr7 += e["comment"].get<std::string>() + "\n";
  EXPECT_NE(pcr7.find("event 6 EV_EFI_VARIABLE_DRIVER_CONFIG db {D719B2CB-3D3A-4596-A3BC-DAD00E67656F}, 7 bytes"),
            std::string::npos)
      << pcr7;
  EXPECT_NE(pcr7.find("event 7 EV_EFI_VARIABLE_DRIVER_CONFIG dbx {D719B2CB-3D3A-4596-A3BC-DAD00E67656F}, 8 bytes"),
            std::string::npos)
      << pcr7;
  EXPECT_NE(pcr7.find("event 3 EV_EFI_VARIABLE_DRIVER_CONFIG SecureBoot {8BE4DF61-93CA-11D2-AA0D-00E098032B8C}"),
            std::string::npos)
      << pcr7;
  EXPECT_NE(j["event_digests"]["7"]["comment"].get<std::string>().find(
                "Secure Boot on: SecureBoot (event 3), PK (event 4), KEK (event 5), db (event 6), dbx (event 7)"),
            std::string::npos)
      << j["event_digests"]["7"];
  EXPECT_EQ(j["pcr_values"]["4"]["sha256"][0]["comment"],
            "quoted sha256 PCR 4; replay of the boot log's events 9, 14, 19, 20");
  EXPECT_EQ(j["ek_roots"]["dir"], "roots");
  EXPECT_EQ(j["ak_forms"], json::array({"enrolment"}));
}

TEST_F(GoldenPolicyTest, RefusesAHostWhoseBootDiffersInOneEvent) {
  Host golden;
  Policy p = Load(MakeOk(golden));
  // Another host, identical but for the grub image.
  Host other;
  EventMeasuring(other.events, "grub image").measured = StrBytes("grub image, patched");
  ExpectFailures(Verify(p, other, kNextNonce), {"bootapp.digest.not_allowed", "pcr.value.not_allowed"}, {});
  Verdict v = Verify(p, other, kNextNonce);
  for (const auto& f : v.appraisal.failures()) {
    if (f.check == "pcr.value.not_allowed") {
      EXPECT_NE(f.where.find("PCR 4"), std::string::npos) << f.where;
    }
    if (f.check == "bootapp.digest.not_allowed") {
      EXPECT_EQ(f.where.rfind("event 20 ", 0), 0u) << f.where;
    }
  }
  // Another dbx: the PCR 7 event digests name it.
  Host dbx;
  for (auto& e : dbx.events)
    if (e.pcr == 7 && e.data == SbVariable("dbx", StrBytes("dbx-list")).data)
      e = SbVariable("dbx", StrBytes("dbx-old"));
  ExpectFailures(Verify(p, dbx, kNextNonce), {"event.digest.not_allowed", "pcr.value.not_allowed"}, {});
  // Another kernel command line (both GRUB events carry it).
  Host cmdline;
  for (auto& e : cmdline.events) {
    if (e.pcr != 8) continue;
    std::string text(e.measured->begin(), e.measured->end());
    e = GrubString(text.starts_with("linux") ? "grub_cmd: " : "kernel_cmdline: ", text + " init=/bin/sh");
  }
  ExpectFailures(Verify(p, cmdline, kNextNonce), {"cmdline.not_allowed", "pcr.value.not_allowed"}, {});
}

TEST_F(GoldenPolicyTest, ImaAllowlistAcceptsTheSameLogAndRefusesOneExtraFile) {
  Host host;
  options_.ima = true;
  options_.ima_exclude_prefixes = {"/var/log/"};
  GoldenPolicy g = MakeOk(host);
  Policy p = Load(g);
  ASSERT_TRUE(p.ima_allowlist_mode);
  EXPECT_EQ(p.ima_allowlist.size(), 3u);  // boot_aggregate and two files; /var/log/ excluded
  EXPECT_FALSE(p.ima_allowlist.count("/var/log/enclave/run.log"));
  EXPECT_EQ(json::parse(g.text)["ima"]["allowlist"]["/usr/bin/enclave-train"][0]["comment"], "IMA line 2");
  EXPECT_TRUE(Passed(Verify(p, host, kNextNonce), "ima.allowlist"));

  Host extra;
  extra.ima.push_back({"/tmp/x", Sha256(StrBytes("an unknown program"))});
  Verdict v = Verify(p, extra, kNextNonce);
  ExpectFailures(v, {"ima.allowlist.path_not_listed"}, {});
  EXPECT_EQ(v.appraisal.failures().front().where, "line 5 /tmp/x");
  // A listed file with another digest.
  Host changed;
  changed.ima[1].sha256 = Sha256(StrBytes("trainer v2"));
  ExpectFailures(Verify(p, changed, kNextNonce), {"ima.allowlist.digest_not_allowed"}, {});
  // Under the excluded prefix, a new file is not judged.
  Host logs;
  logs.ima.push_back({"/var/log/enclave/run2.log", Sha256(StrBytes("log 2"))});
  EXPECT_TRUE(Verify(p, logs, kNextNonce).passed());
}

TEST_F(GoldenPolicyTest, RefusesEvidenceThatDoesNotVerifyAgainstItself) {
  Host host;
  auto make = [&](const std::function<void(EvidenceBundle&)>& change, const Bytes& ak) {
    EvidenceBundle b = host.Quote(Bytes(16, 0x42));
    change(b);
    return MakeGoldenPolicy(b, ak, options_);
  };
  const Bytes ak = host.AkPublic();
  // Refused before anything is derived from it (not only by the policy made from it).
  auto refused = [](const Result<GoldenPolicy>& g, const std::string& check) {
    ExpectRefused(g, Code::kAuthFailed, check);
    if (g.ok()) return;
    EXPECT_EQ(g.status().message().find("the evidence does not verify against itself"), 0u) << g.status().ToString();
  };
  refused(make([](EvidenceBundle& b) { b.signature[b.signature.size() - 3] ^= 1; }, ak), "quote.signature.invalid");
  refused(make([](EvidenceBundle& b) { b.nonce[0] ^= 1; }, ak), "quote.extra_data.mismatch");
  refused(make([](EvidenceBundle& b) { b.pcrs[alg::kSha256][4][0] ^= 1; }, ak), "quote.pcr_digest.mismatch");
  Host other;
  refused(make([](EvidenceBundle&) {}, other.AkPublic()), "evidence.ak_name.mismatch");
  // A boot log that is not the one quoted: grub's event changed.
  auto events = host.events;
  EventMeasuring(events, "grub image").measured = StrBytes("evil grub");
  refused(make([&](EvidenceBundle& b) { b.event_log = EncodeBootLog(events); }, ak), "eventlog.pcr.mismatch");
  // An IMA log that does not replay to PCR 10.
  options_.ima = true;
  auto files = host.ima;
  files[1].sha256[0] ^= 1;
  refused(make([&](EvidenceBundle& b) { b.ima_log = ImaLogText(files); }, ak), "ima.pcr.mismatch");
}

TEST_F(GoldenPolicyTest, RefusesEvidenceAPolicyCannotBeMadeFrom) {
  Host host;
  const Bytes ak = host.AkPublic();
  EvidenceBundle b = host.Quote(Bytes(16, 0x42));
  EvidenceBundle no_log = b;
  no_log.event_log.clear();
  ExpectRefused(MakeGoldenPolicy(no_log, ak, options_), Code::kInvalidInput, "no boot event log");
  options_.ima = true;
  EvidenceBundle no_ima = b;
  no_ima.ima_log.clear();
  ExpectRefused(MakeGoldenPolicy(no_ima, ak, options_), Code::kInvalidInput, "no IMA log");
  options_.ima_exclude_prefixes = {"/"};
  ExpectRefused(MakeGoldenPolicy(b, ak, options_), Code::kInvalidInput, "ima exclusion '/'");
  options_.ima_exclude_prefixes = {};
  // A violation (all-zero template hash, extended as ff): no allowlist can name its file.
  Host violated;
  violated.violation = true;
  ExpectRefused(MakeGoldenPolicy(violated.Quote(Bytes(16, 0x42)), violated.AkPublic(), options_),
                Code::kFailedPrecondition, "1 violation(s) (line 5)");
}

TEST_F(GoldenPolicyTest, RulesThatDoNotHoldOnTheGoldenHostAreLeftOutAndSaidSo) {
  Host host;
  // Secure Boot off: the policy does not require it (and says why), and still accepts the host.
  for (auto& e : host.events)
    if (e.data == SbVariable("SecureBoot", {1}).data) e = SbVariable("SecureBoot", {0});
  GoldenPolicy g = MakeOk(host);
  Policy p = Load(g);
  EXPECT_FALSE(p.require_secure_boot);
  ASSERT_FALSE(g.notes.empty());
  EXPECT_NE(g.notes.front().find("secureboot.disabled"), std::string::npos) << g.notes.front();
  EXPECT_NE(json::parse(g.text)["comment"].get<std::string>().find("secureboot.disabled"), std::string::npos);
  EXPECT_TRUE(Verify(p, host, kNextNonce).passed());
  // A PCR the log never extends is exempt from the log and pinned at its initial value.
  Host wide;
  wide.quoted = {0, 4, 7, 8, 10, 11};
  Policy pw = Load(MakeOk(wide));
  EXPECT_EQ(pw.log_exempt_pcrs, (std::set<uint32_t>{10, 11}));
  EXPECT_EQ(*pw.pcr_values.at(11).at(alg::kSha256).begin(), Bytes(32, 0));
  EXPECT_TRUE(Verify(pw, wide, kNextNonce).passed());
}

TEST_F(GoldenPolicyTest, AnEventTheVerifierCannotReadInAJudgedPcrIsRefused) {
  // The policy made from it would refuse its own host: the event type is not the PFP's.
  Host host;
  host.events.push_back({5, 0x00012345, StrBytes("vendor event"), std::nullopt, true});
  ExpectRefused(Make(host), Code::kAuthFailed, "eventlog.event_type.unknown");
}

}  // namespace
}  // namespace enclave::attest
