// Witnesses in the test process: keys, a tlog-policy naming them, and a log's checkpoint
// cosigned by some of them, written where `verify` and `report` look for it. For tests of
// what an auditor does with a cosigned checkpoint; the witness protocol itself is tested
// with real witness processes (witness_fixture.h).
#pragma once

#include <gtest/gtest.h>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/cosignature.h"
#include "enclave/audit/witness_policy.h"

namespace enclave::audit::testing {

class LocalWitnesses {
 public:
  // Witnesses named w1..wN in the policy, witness.test/w1.. as cosigners.
  explicit LocalWitnesses(int n) {
    for (int i = 1; i <= n; ++i) {
      auto k = WitnessSigningKey::Generate("witness.test/w" + std::to_string(i));
      EXPECT_TRUE(k.ok()) << k.status().ToString();
      keys_.push_back(std::move(*k));
    }
  }

  // The policy file's text: the log, every witness, then `quorum_lines`
  // (e.g. "group both 2 w1 w2\nquorum both\n").
  std::string PolicyText(const TestLog& log, const std::string& quorum_lines) const {
    std::string text = "log " + NoteVerifierKey(log.pub) + "\n";
    for (size_t i = 0; i < keys_.size(); ++i) {
      text += "witness w" + std::to_string(i + 1) + " " + keys_[i].public_key().VerifierKey() + "\n";
    }
    return text + quorum_lines;
  }

  // The log's latest checkpoint with the cosignatures of witnesses `by` (0-based), written
  // to `path` (default: the log's cosigned-checkpoint).
  void Cosign(const TestLog& log, const std::vector<size_t>& by, std::string path = "") const {
    auto v = VerifyLog(log.dir.string(), log.pub);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    auto note = FormatCheckpointNote(log.pub, v->latest);
    ASSERT_TRUE(note.ok()) << note.status().ToString();
    const std::string text = note->substr(0, note->find("\n\n") + 1);  // the signed text
    std::string cosigned = *note;
    for (size_t i : by) {
      auto line = keys_[i].Cosign(text, 1714600000 + i);
      ASSERT_TRUE(line.ok()) << line.status().ToString();
      cosigned += *line;
    }
    if (path.empty()) path = (log.dir / "cosigned-checkpoint").string();
    WriteBytes(path, std::vector<uint8_t>(cosigned.begin(), cosigned.end()));
  }

 private:
  std::vector<WitnessSigningKey> keys_;
};

}  // namespace enclave::audit::testing
