// `enclave-attest` as the host: its enrolment, activation and evidence files, posted as
// they are, drive enrolment and attestation against the broker process, and the
// broker's challenge is what `enclave-attest activate` takes.
#include "enrol_fixture.h"

namespace enclave::broker {
namespace {

TEST_F(EnrolAttestTest, EnclaveAttestFilesDriveEnrolmentAndAttestation) {
  ASSERT_NO_FATAL_FAILURE(StartBroker());
  auto host = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--tcti", fixture_->tcti(), "--state", work_ + "/cli-state"});
    std::string out;
    int rc = BrokerProcess::RunProgram(ENCLAVE_ATTEST_BIN, args, "", &out);
    EXPECT_EQ(rc, 0) << args[0] << ": " << out;
    return rc;
  };
  const std::string p = work_ + "/";
  ASSERT_EQ(host({"enroll", "--out", p + "enrolment.json"}), 0);
  auto e = broker_->Post("/v1/enrolments", testing::ReadText(p + "enrolment.json"));
  ASSERT_EQ(e.status, 201) << e.body;
  testing::WriteText(p + "challenge.json", e.json()["challenge"].dump());
  ASSERT_EQ(host({"activate", "--challenge", p + "challenge.json", "--out", p + "activation.json"}), 0);
  auto a = broker_->Post("/v1/enrolments/" + e.json()["challenge_id"].get<std::string>() + "/activation",
                         testing::ReadText(p + "activation.json"));
  ASSERT_EQ(a.status, 201) << a.body;
  const std::string host_id = a.json()["host_id"];

  // The nonce request signed with the AK `enclave-attest enroll` stored in its state dir.
  HostState cli_state = State("cli-state");
  auto r = broker_->Post("/v1/nonces", EncodeNonceRequest(SignedNonceRequest(host_id, &cli_state)));
  ASSERT_EQ(r.status, 201) << r.body;
  auto issued = ParseNonceIssued(r.body);
  ASSERT_TRUE(issued.ok()) << issued.status().ToString();
  const NonceIssued& n = *issued;
  testing::WriteText(p + "job.toml", "[job]\nname = \"cli\"\n");
  ASSERT_EQ(host({"quote", "--nonce", HexEncode(n.nonce), "--bind", p + "job.toml", "--pcrs", n.pcr_selection,
                  "--event-log=", "--ima-log=", "--out", p + "evidence.json"}),
            0);
  auto v = broker_->Post("/v1/attestations", testing::ReadText(p + "evidence.json"));
  ASSERT_EQ(v.status, 200) << v.body << "\n" << broker_->log();
  const std::string job = testing::ReadText(p + "job.toml");
  EXPECT_EQ(v.json()["bound_digest"], HexEncode(crypto::Sha256(AsBytes(job))));
}

}  // namespace
}  // namespace enclave::broker
