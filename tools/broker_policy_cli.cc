#include "broker_policy_cli.h"

#include <sys/stat.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "enclave/broker/release.h"
#include "enclave/broker/usage_policy.h"
#include "enclave/common/bytes.h"
#include "enclave/common/files.h"

namespace enclave {
namespace {

using cli::Args;
using cli::FlagSpec;
using nlohmann::json;

const FlagSpec kJsonFlag{"json", "", "print the result as JSON"};

Result<std::string> ReadText(const std::string& path, size_t max) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, max));
  return std::string(bytes.begin(), bytes.end());
}

// "a.pub,b.pub" -> {"a.pub", "b.pub"}; empty items are a usage mistake.
Result<std::vector<std::string>> SplitList(const std::string& list, const std::string& flag) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) return InvalidInput("--" + flag + ": empty entry in '" + list + "'");
    out.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Status Keygen(const Args& args) {
  const std::string prefix = args.Get("out");
  if (prefix.empty()) return InvalidInput("--out needs a non-empty PREFIX");
  const std::string key_path = prefix + ".key", pub_path = prefix + ".pub";
  ASSIGN_OR_RETURN(broker::PolicySignerKey key, broker::PolicySignerKey::Generate());
  // Neither file is ever overwritten: the secret is created with O_EXCL, and if the public
  // file then cannot be created the new secret is removed again (it was never used).
  RETURN_IF_ERROR(key.Save(key_path));
  if (Status s = broker::SaveSignerPublicKey(pub_path, key.public_key()); !s.ok()) {
    ::remove(key_path.c_str());
    return s;
  }
  const std::string pk = HexEncode(key.public_key());
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"secret_key_file", key_path}, {"public_key_file", pub_path}, {"public_key", pk}});
  } else {
    std::printf("policy signing key %s (secret, mode 0600), public key %s: ed25519 %s\n", key_path.c_str(),
                pub_path.c_str(), pk.c_str());
  }
  return OkStatus();
}

Status Sign(const Args& args) {
  const std::string policy_path = args.Get("policy");
  const std::string out_path = args.Get("out", policy_path + ".sig");
  ASSIGN_OR_RETURN(std::string policy, ReadText(policy_path, broker::kMaxUsagePolicyBytes));
  if (auto parsed = broker::ParseUsagePolicy(policy); !parsed.ok()) {
    return parsed.status().Annotate(policy_path + " (not signed)");
  }
  auto key = broker::PolicySignerKey::Load(args.Get("key"));
  if (!key.ok()) return key.status();
  ASSIGN_OR_RETURN(std::string sig, broker::SignUsagePolicy(policy, *key));
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, /*allow_overwrite=*/false));
  RETURN_IF_ERROR(out.Write(sig.data(), sig.size()));
  RETURN_IF_ERROR(out.Commit());
  ::chmod(out_path.c_str(), 0644);
  const std::string digest = HexEncode(crypto::Sha256(AsBytes(policy)));
  if (args.json()) {
    cli::PrintJson({{"ok", true},
                    {"signature_file", out_path},
                    {"policy_sha256", digest},
                    {"signer", HexEncode(key->public_key())}});
  } else {
    std::printf("signed %s (sha256 %s) with %s: %s\n", policy_path.c_str(), digest.c_str(),
                HexEncode(key->public_key()).c_str(), out_path.c_str());
  }
  return OkStatus();
}

Status Verify(const Args& args) {
  const std::string policy_path = args.Get("policy");
  const std::string sig_path = args.Get("sig", policy_path + ".sig");
  ASSIGN_OR_RETURN(std::vector<std::string> signer_files, SplitList(args.Get("signer"), "signer"));
  std::vector<broker::SignerPublicKey> trusted;
  for (const std::string& f : signer_files) {
    ASSIGN_OR_RETURN(broker::SignerPublicKey k, broker::LoadSignerPublicKey(f));
    trusted.push_back(k);
  }
  ASSIGN_OR_RETURN(std::string policy, ReadText(policy_path, broker::kMaxUsagePolicyBytes));
  ASSIGN_OR_RETURN(std::string sig, ReadText(sig_path, 64 * 1024));
  auto verified = broker::VerifyUsagePolicy(policy, sig, trusted);
  if (!verified.ok()) return verified.status().Annotate(policy_path);
  const broker::UsagePolicy& p = verified->policy;
  const std::string digest = HexEncode(verified->digest), signer = HexEncode(verified->signer);
  if (args.json()) {
    json datasets = json::array();
    for (const auto& d : p.datasets) datasets.push_back(d.dataset_id);
    cli::PrintJson({{"ok", true},
                    {"policy_id", p.policy_id},
                    {"serial", p.serial},
                    {"policy_sha256", digest},
                    {"signer", signer},
                    {"attestation_policy_sha256", HexEncode(p.attestation_policy_sha256)},
                    {"datasets", datasets}});
  } else {
    std::printf("OK policy %s serial %llu sha256 %s signed by %s\n", p.policy_id.c_str(),
                static_cast<unsigned long long>(p.serial), digest.c_str(), signer.c_str());
  }
  return OkStatus();
}

// The workload digest a data-use policy approves an executable by (docs/protocol.md,
// "Workload"): what the officer writes into datasets[].workloads.
Status Workload(const Args& args) {
  const std::string exe = args.positional()[0];
  ASSIGN_OR_RETURN(broker::Workload w, broker::WorkloadOfExecutable(exe, exe));
  if (args.Has("code")) {
    // An interpreter's workload: its executable and the code files it runs (the Python package).
    std::vector<std::string> code;
    std::stringstream list(args.Get("code"));
    for (std::string item; std::getline(list, item, ',');) code.push_back(item);
    RETURN_IF_ERROR(broker::AddWorkloadCode(args.Has("code-dir") ? args.Get("code-dir") : ".", code, &w));
  } else if (args.Has("code-dir")) {
    return InvalidInput("--code-dir needs --code");
  }
  const std::string digest = HexEncode(broker::WorkloadDigest(w));
  if (args.json()) {
    cli::PrintJson({{"executable", exe}, {"executable_sha256", HexEncode(w.executable.sha256)}, {"workload", digest}});
  } else {
    std::printf("%s\n", digest.c_str());
  }
  return OkStatus();
}

}  // namespace

std::vector<cli::Verb> PolicyVerbs() {
  return {
      {"policy keygen", "make a compliance officer's policy signing key: PREFIX.key (0600) and PREFIX.pub", "", 0,
       {{"out", "PREFIX", "write PREFIX.key and PREFIX.pub (never overwrites)", true}, kJsonFlag}, Keygen},
      {"policy sign", "sign a data-use policy: a detached signature file (the policy is checked first)", "", 0,
       {{"policy", "FILE", "the data-use policy JSON", true},
        {"key", "PREFIX.key", "the policy signing key", true},
        {"out", "FILE.sig", "signature file to create (default: the policy path + .sig; never overwrites)"},
        kJsonFlag},
       Sign},
      {"policy verify", "check a data-use policy's signature against trusted signers, then the policy", "", 0,
       {{"policy", "FILE", "the data-use policy JSON", true},
        {"sig", "FILE.sig", "its signature file (default: the policy path + .sig)"},
        {"signer", "PUB[,PUB...]", "trusted signer public key file(s), comma-separated", true},
        kJsonFlag},
       Verify},
      {"policy workload",
       "print the workload digest of an executable (and of the code files an interpreter runs), for a data-use "
       "policy's datasets[].workloads",
       "FILE", 1,
       {{"code", "REL[,REL...]", "code files the executable runs, relative to --code-dir, in the order the job names them"},
        {"code-dir", "DIR", "the job's folder the code files are relative to (default: .)"},
        kJsonFlag},
       Workload},
  };
}

}  // namespace enclave
