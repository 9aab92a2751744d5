// A log witnessed as it grows (docs/formats/witness.md, "The broker's witnessing"): one
// thread submits the log's latest checkpoint to the policy's witnesses whenever the log
// has grown past the last checkpoint a quorum cosigned, one round at a time, so every entry
// appended during a round is covered by the next round's checkpoint (batching). Callers wait,
// bounded, for a quorum-cosigned checkpoint that covers their entry; a witness that is down
// or refuses makes them wait and then fail, never pass.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "enclave/audit/log_writer.h"
#include "enclave/audit/merkle.h"
#include "enclave/audit/witness_client.h"
#include "enclave/audit/witness_policy.h"
#include "enclave/common/status.h"

namespace enclave::audit {

struct WitnessingOptions {
  WitnessClientOptions client;
  std::chrono::milliseconds retry{250};  // pause after a round without a quorum
  // A round starts at least this long after the previous one ended, so that under load
  // each round covers many releases (the witnesses' work is per round, not per entry).
  std::chrono::milliseconds interval{10};
};

struct CosignedCheckpoint {
  uint64_t tree_size = 0;
  Hash root{};
  std::string note;  // the log's checkpoint note, then the cosignature lines obtained
};

struct WitnessingStats {
  uint64_t rounds = 0;           // submissions of a checkpoint to the witnesses
  uint64_t quorum_rounds = 0;    // rounds that ended with a quorum
  uint64_t cosigned_size = 0;    // size of the newest quorum-cosigned checkpoint
};

class Witnessing {
 public:
  // The policy must name this log (its key) and give a URL for each witness it asks.
  static Result<std::unique_ptr<Witnessing>> Start(LogWriter& log, WitnessPolicy policy, WitnessingOptions options = {});
  ~Witnessing();  // stops the thread (a round in flight finishes first)
  Witnessing(const Witnessing&) = delete;
  Witnessing& operator=(const Witnessing&) = delete;

  // The newest quorum-cosigned checkpoint whose tree holds entry `index` (tree size > index),
  // waiting at most `wait` for one. Unavailable after the wait, naming what each witness
  // last answered.
  Result<CosignedCheckpoint> AwaitCovering(uint64_t index, std::chrono::milliseconds wait);
  // The same without holding a thread: `done` is called once, from the witnessing's
  // notifier thread (keep it short: hand real work to another thread), with what
  // AwaitCovering would have returned; also when the witnessing stops first.
  using CoveringCallback = std::function<void(Result<CosignedCheckpoint>)>;
  void OnCovering(uint64_t index, std::chrono::milliseconds wait, CoveringCallback done);
  WitnessingStats stats() const;
  const WitnessPolicy& policy() const { return policy_; }

 private:
  Witnessing(LogWriter& log, WitnessPolicy policy, WitnessingOptions options)
      : log_(log), policy_(std::move(policy)), options_(options) {}
  void Run();
  void Notify();  // the notifier thread: calls OnCovering's callbacks
  std::string LastAnswers() const;  // under mu_
  Status NotCovered(uint64_t index, std::chrono::milliseconds wait) const;  // under mu_

  LogWriter& log_;
  const WitnessPolicy policy_;
  const WitnessingOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // the thread: someone waits for a newer checkpoint
  std::condition_variable cosigned_;  // the waiters: a round ended
  bool stop_ = false;
  uint64_t wanted_ = 0;  // the largest tree size a waiter needs
  CosignedCheckpoint latest_;
  std::vector<WitnessOutcome> last_outcomes_;
  uint64_t size_hint_ = 0;  // the size the witnesses last cosigned (or said they had)
  std::chrono::steady_clock::time_point last_round_end_{};
  WitnessingStats stats_;
  struct Waiter {
    uint64_t index;
    std::chrono::milliseconds wait;
    std::chrono::steady_clock::time_point deadline;
    CoveringCallback done;
  };
  std::vector<Waiter> waiters_;  // OnCovering's
  std::thread thread_, notifier_;
};

}  // namespace enclave::audit
