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
  w->notifier_ = std::thread([p = w.get()] { p->Notify(); });
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
  if (notifier_.joinable()) notifier_.join();  // after calling every callback left
}

void Witnessing::Run() {
  std::unique_lock<std::mutex> lk(mu_);
  std::string last_complaint;
  WitnessClientOptions client = options_.client;
  if (!client.connections) client.connections = std::make_shared<WitnessConnections>();  // kept alive across rounds
  while (!stop_) {
    const uint64_t size = log_.LatestTreeHead().head.tree_size;
    if (size == 0 || (size <= latest_.tree_size && wanted_ <= latest_.tree_size)) {
      wake_.wait_for(lk, kIdlePoll);
      continue;
    }
    if (wake_.wait_until(lk, last_round_end_ + options_.interval, [this] { return stop_; })) break;
    const uint64_t hint = size_hint_;
    lk.unlock();
    // The newest published checkpoint (its tiles are written): a cosigned checkpoint can
    // then be checked from the tiles, as any other the log publishes.
    auto cp = log_.AwaitPublished(size, std::chrono::milliseconds(client.timeout_s * 1000));
    CosignResult r;
    if (cp.ok()) {
      r = CosignCheckpoint(
          policy_, cp->note, [this](uint64_t a, uint64_t b) { return log_.ConsistencyProof(a, b); }, hint, client);
    }
    lk.lock();
    stats_.rounds += 1;
    last_round_end_ = std::chrono::steady_clock::now();
    if (!cp.ok()) {
      last_outcomes_ = {{"log", cp.status(), std::nullopt, 0}};
    } else {
      last_outcomes_ = r.outcomes;
      for (const WitnessOutcome& o : r.outcomes) {
        if (o.cosignature) size_hint_ = std::max(size_hint_, cp->tree_size);
      }
    }
    if (r.quorum) {
      latest_ = {cp->tree_size, cp->root, r.cosigned_note};
      stats_.quorum_rounds += 1;
      stats_.cosigned_size = cp->tree_size;
    }
    // Each distinct failure once on the broker's log: a refusal (AuthFailed) means a witness
    // holds a checkpoint this log is not consistent with: a fork or a cut log.
    std::string complaint;
    for (const WitnessOutcome& o : last_outcomes_) {
      if (!o.status.ok()) complaint += "\n  " + o.status.ToString();
    }
    if (!complaint.empty() && complaint != last_complaint) {
      std::cerr << "enclave-audit witnessing: checkpoint of size " << (cp.ok() ? cp->tree_size : size)
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
  return NotCovered(index, wait);
}

Status Witnessing::NotCovered(uint64_t index, std::chrono::milliseconds wait) const {
  if (stop_) return Unavailable("witnessing stopped");
  return Unavailable("no checkpoint holding audit entry " + std::to_string(index) + " was cosigned by the witness quorum (" +
                     policy_.Describe() + ") within " + std::to_string(wait.count()) + " ms; last answers: " +
                     LastAnswers());
}

void Witnessing::OnCovering(uint64_t index, std::chrono::milliseconds wait, CoveringCallback done) {
  std::unique_lock<std::mutex> lk(mu_);
  if (stop_) {  // the notifier may be gone: answered here
    lk.unlock();
    return done(Unavailable("witnessing stopped"));
  }
  waiters_.push_back({index, wait, std::chrono::steady_clock::now() + wait, std::move(done)});
  if (latest_.tree_size <= index) {
    wanted_ = std::max(wanted_, index + 1);
    wake_.notify_all();
  }
  cosigned_.notify_all();  // the notifier: a new waiter, maybe an earlier deadline
}

void Witnessing::Notify() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    auto due = [&](const Waiter& w, std::chrono::steady_clock::time_point now) {
      return stop_ || latest_.tree_size > w.index || now >= w.deadline;
    };
    auto next = std::chrono::steady_clock::now() + std::chrono::hours(1);  // no waiter: a long sleep
    for (const Waiter& w : waiters_) next = std::min(next, w.deadline);
    cosigned_.wait_until(lk, next, [&] {
      const auto now = std::chrono::steady_clock::now();
      return std::any_of(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return due(w, now); }) ||
             (stop_ && waiters_.empty());
    });
    if (stop_ && waiters_.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<CoveringCallback, Result<CosignedCheckpoint>>> fired;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (!due(*it, now)) {
        ++it;
        continue;
      }
      if (latest_.tree_size > it->index) {
        fired.emplace_back(std::move(it->done), latest_);
      } else {
        fired.emplace_back(std::move(it->done), NotCovered(it->index, it->wait));
      }
      it = waiters_.erase(it);
    }
    lk.unlock();
    for (auto& [done, result] : fired) done(std::move(result));
    lk.lock();
  }
}

WitnessingStats Witnessing::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace enclave::audit
