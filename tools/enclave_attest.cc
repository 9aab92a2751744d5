// enclave-attest: TPM 2.0 attestation for hosts and automated checks. Thin: the work is
// in attest/. This build has the verifier-side verb `eventlog`; the host verbs (enroll,
// activate, quote, check) and `verify` come with the rest of issue 3.
#include <cstdio>
#include <string>

#include "cli.h"
#include "enclave/attest/event_log.h"
#include "enclave/attest/tpm_alg.h"
#include "enclave/common/bytes.h"
#include "enclave/common/files.h"

namespace enclave {
namespace {

using cli::Args;
using cli::FlagSpec;
using nlohmann::json;

const FlagSpec kJson{"json", "", "print the result as JSON"};

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

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  using enclave::cli::Verb;
  enclave::cli::Program program{
      "enclave-attest",
      "TPM 2.0 attestation: event-log replay (enrolment, quotes and verification: not built yet)",
      {
          Verb{"eventlog",
               "replay a binary TCG event log (crypto-agile or legacy SHA-1); print events and PCRs per bank",
               "FILE",
               1,
               {enclave::kJson},
               enclave::EventLogVerb},
      },
      false};
  return enclave::cli::Main(program, argc, argv);
}
