#include "enclave/audit/witnessing.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "enclave/audit/checkpoint.h"

namespace enclave::audit {
namespace {

// Without a waiter the thread still looks this often whether the log grew, so that every
// entry (renewals, attestations) gets witnessed, not only releases.
constexpr std::chrono::milliseconds kIdlePoll{1000};

}  // namespace

Result<std::unique_ptr<Witnessing>> Witnessing::Start(LogWriter& log, WitnessPolicy policy, WitnessingOptions options) {
  const LogPublicKey& key = log.public_key();
  const bool named = std::any_of(policy.logs().begin(), policy.logs().end(), [&](const PolicyLog& l) {
    return l.key == key.key && l.origin == CheckpointOrigin(key.log_id);
  });
  if (!named) {
    return InvalidInput("the witness policy has no `log` line for this log (" + NoteVerifierKey(key) +
                        "): its witnesses would be checked against another log's key");
  }
  if (policy.quorum_none()) return InvalidInput("the witness policy's quorum is `none`: nothing would be witnessed");
  std::set<std::string> reachable;
  for (const PolicyWitness& w : policy.witnesses()) {
    if (!w.url.empty()) reachable.insert(w.name);
  }
  if (!policy.Satisfied(reachable)) {
    return InvalidInput("the witnesses with a URL in the witness policy cannot make its quorum (" + policy.Describe() +
                        ")");
  }
  std::unique_ptr<Witnessing> w(new Witnessing(log, std::move(policy), options));
  w->thread_ = std::thread([p = w.get()] { p->Run(); });
  return w;
}

Witnessing::~Witnessing() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  cosigned_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Witnessing::Run() {
  std::unique_lock<std::mutex> lk(mu_);
  std::string last_complaint;
  while (!stop_) {
    const SignedTreeHead sth = log_.LatestTreeHead();
    const uint64_t size = sth.head.tree_size;
    if (size == 0 || (size <= latest_.tree_size && wanted_ <= latest_.tree_size)) {
      wake_.wait_for(lk, kIdlePoll);
      continue;
    }
    const uint64_t hint = size_hint_;
    lk.unlock();
    auto note = FormatCheckpointNote(log_.public_key(), sth);
    CosignResult r;
    if (note.ok()) {
      r = CosignCheckpoint(
          policy_, *note, [this](uint64_t a, uint64_t b) { return log_.ConsistencyProof(a, b); }, hint,
          options_.client);
    }
    lk.lock();
    stats_.rounds += 1;
    if (!note.ok()) {
      last_outcomes_ = {{"log", note.status(), std::nullopt, 0}};
    } else {
      last_outcomes_ = r.outcomes;
      for (const WitnessOutcome& o : r.outcomes) {
        if (o.cosignature) size_hint_ = std::max(size_hint_, size);
      }
    }
    if (r.quorum) {
      latest_ = {size, sth.head.root, r.cosigned_note};
      stats_.quorum_rounds += 1;
      stats_.cosigned_size = size;
    }
    // Each distinct failure once on the broker's log: a refusal (AuthFailed) means a witness
    // holds a checkpoint this log is not consistent with: a fork or a cut log.
    std::string complaint;
    for (const WitnessOutcome& o : last_outcomes_) {
      if (!o.status.ok()) complaint += "\n  " + o.status.ToString();
    }
    if (!complaint.empty() && complaint != last_complaint) {
      std::cerr << "enclave-audit witnessing: checkpoint of size " << size
                << (r.quorum ? " cosigned by a quorum, but:" : " NOT cosigned by a quorum:") << complaint << "\n";
    }
    last_complaint = complaint;
    cosigned_.notify_all();
    if (!r.quorum) wake_.wait_for(lk, options_.retry, [this] { return stop_; });
  }
}

std::string Witnessing::LastAnswers() const {
  if (last_outcomes_.empty()) return "no round has ended yet";
  std::string out;
  for (const WitnessOutcome& o : last_outcomes_) {
    if (!out.empty()) out += "; ";
    out += o.name + ": " + (o.status.ok() ? std::string("cosigned") : o.status.message());
  }
  return out;
}

Result<CosignedCheckpoint> Witnessing::AwaitCovering(uint64_t index, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock<std::mutex> lk(mu_);
  if (latest_.tree_size <= index) {
    wanted_ = std::max(wanted_, index + 1);
    wake_.notify_all();
    cosigned_.wait_until(lk, deadline, [&] { return stop_ || latest_.tree_size > index; });
  }
  if (latest_.tree_size > index) return latest_;
  if (stop_) return Unavailable("witnessing stopped");
  return Unavailable("no checkpoint holding audit entry " + std::to_string(index) + " was cosigned by the witness quorum (" +
                     policy_.Describe() + ") within " + std::to_string(wait.count()) + " ms; last answers: " +
                     LastAnswers());
}

WitnessingStats Witnessing::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace enclave::audit
