#include "enclave/audit/witness_client.h"

#include <cctype>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <httplib.h>

#include "enclave/audit/witness.h"

namespace enclave::audit {
namespace {

struct Url {
  bool tls = false;
  std::string host;
  int port = 0;
  std::string prefix;  // "" or "/..." without a trailing slash
};

Result<Url> ParseUrl(const std::string& url, const std::string& who) {
  Url u;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
    u.tls = true;
  } else {
    return InvalidInput(who + ": the URL must start with http:// or https://: " + url);
  }
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  u.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  if (hostport.empty() || hostport[0] == '[') {
    return InvalidInput(who + ": the URL must be http[s]://HOST[:PORT][/PREFIX] (an IPv4 address or a name): " + url);
  }
  const size_t colon = hostport.rfind(':');
  u.host = hostport.substr(0, colon);
  u.port = u.tls ? 443 : 80;
  if (colon != std::string::npos) {
    auto port = ParseCanonicalDecimal(hostport.substr(colon + 1));
    if (!port.ok() || *port == 0 || *port > 65535) return InvalidInput(who + ": bad port in " + url);
    u.port = static_cast<int>(*port);
  }
  if (u.host.empty()) return InvalidInput(who + ": no host in " + url);
  for (char c : u.host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') {
      return InvalidInput(who + ": the host of " + url + " is not a name or an IPv4 address");
    }
  }
  for (char c : u.prefix) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == '?' || c == '#') return InvalidInput(who + ": bad path in " + url);
  }
  return u;
}

struct Answer {
  int status = 0;
  std::string content_type;
  std::string body;
};

std::unique_ptr<httplib::ClientImpl> NewClient(const Url& u, const WitnessClientOptions& o, bool keep_alive) {
  std::unique_ptr<httplib::ClientImpl> c;
  if (u.tls) {
    auto tls = std::make_unique<httplib::SSLClient>(u.host, u.port);
    tls->enable_server_certificate_verification(true);  // the system's trust store
    c = std::move(tls);
  } else {
    c = std::make_unique<httplib::ClientImpl>(u.host, u.port);
  }
  c->set_connection_timeout(o.timeout_s, 0);
  c->set_read_timeout(o.timeout_s, 0);
  c->set_write_timeout(o.timeout_s, 0);
  c->set_keep_alive(keep_alive);
  c->set_tcp_nodelay(true);  // else a request's body waits for the ACK of its headers
  c->set_decompress(false);
  return c;
}

Result<Answer> Send(httplib::ClientImpl& c, const Url& u, const std::string& who, const std::string& body,
                    bool* no_answer) {
  httplib::Request req;
  req.method = "POST";
  req.path = u.prefix + "/add-checkpoint";
  req.headers = {{"Content-Type", "text/plain; charset=utf-8"}};
  req.body = body;
  Answer a;
  bool too_long = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (a.body.size() + n > kMaxWitnessAnswerBytes) {
      too_long = true;
      return false;
    }
    a.body.append(data, n);
    return true;
  };
  auto r = c.send(req);
  *no_answer = !r && !too_long;
  if (too_long) return Unavailable(who + ": the answer is longer than 64 KiB");
  if (!r) return Unavailable(who + ": no answer: " + httplib::to_string(r.error()));
  a.status = r->status;
  a.content_type = r->get_header_value("Content-Type");
  return a;
}

}  // namespace

struct WitnessConnections::Impl {
  struct Slot {
    std::mutex mu;
    std::unique_ptr<httplib::ClientImpl> client;  // null: the next request opens a new one
  };
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Slot>> slots;  // by URL
};
WitnessConnections::WitnessConnections() : impl_(std::make_unique<Impl>()) {}
WitnessConnections::~WitnessConnections() = default;

namespace {

Result<Answer> Post(const Url& u, const std::string& url, const std::string& who, const std::string& body,
                    const WitnessClientOptions& o) {
  bool no_answer = false;
  if (!o.connections) return Send(*NewClient(u, o, /*keep_alive=*/false), u, who, body, &no_answer);
  std::shared_ptr<WitnessConnections::Impl::Slot> slot;
  {
    WitnessConnections::Impl& pool = o.connections->impl();
    std::lock_guard<std::mutex> lk(pool.mu);
    auto& s = pool.slots[url];
    if (!s) s = std::make_shared<WitnessConnections::Impl::Slot>();
    slot = s;
  }
  std::lock_guard<std::mutex> lk(slot->mu);
  const bool reused = slot->client != nullptr;
  if (!reused) slot->client = NewClient(u, o, /*keep_alive=*/true);
  auto a = Send(*slot->client, u, who, body, &no_answer);
  if (a.ok() || !no_answer) return a;
  slot->client.reset();
  if (!reused) return a;
  // The witness may have closed the kept connection as the request went out: once more on a
  // new one (asking a witness twice for the same checkpoint is harmless: it cosigns again).
  slot->client = NewClient(u, o, /*keep_alive=*/true);
  a = Send(*slot->client, u, who, body, &no_answer);
  if (!a.ok() && no_answer) slot->client.reset();
  return a;
}

std::string FirstLine(const std::string& s) {
  std::string line = s.substr(0, s.find('\n')).substr(0, 300);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return line;
}

ConsistencyProver ProverOf(std::span<const Hash> leaf_hashes) {
  return [leaf_hashes](uint64_t first, uint64_t second) { return ConsistencyProof(leaf_hashes, first, second); };
}

}  // namespace

Result<VerifiedCosignature> RequestCosignature(const PolicyWitness& witness, std::string_view checkpoint_note,
                                               std::span<const Hash> leaf_hashes, uint64_t* old_size,
                                               const WitnessClientOptions& options) {
  ASSIGN_OR_RETURN(SignedNote note, ParseNote(checkpoint_note, "the checkpoint"));
  ASSIGN_OR_RETURN(CheckpointText cp, ParseCheckpointText(note.text, "the checkpoint"));
  if (cp.tree_size > leaf_hashes.size()) {
    return InvalidInput("the checkpoint is of size " + std::to_string(cp.tree_size) + ", but only " +
                        std::to_string(leaf_hashes.size()) + " leaf hashes were given");
  }
  return RequestCosignature(witness, checkpoint_note, ProverOf(leaf_hashes), old_size, options);
}

Result<VerifiedCosignature> RequestCosignature(const PolicyWitness& witness, std::string_view checkpoint_note,
                                               const ConsistencyProver& prove, uint64_t* old_size,
                                               const WitnessClientOptions& options) {
  const std::string who = "witness " + witness.name + " (" + witness.url + ")";
  if (witness.url.empty()) return InvalidInput(who + ": the policy gives no URL for it");
  ASSIGN_OR_RETURN(Url url, ParseUrl(witness.url, who));
  ASSIGN_OR_RETURN(SignedNote note, ParseNote(checkpoint_note, "the checkpoint"));
  ASSIGN_OR_RETURN(CheckpointText cp, ParseCheckpointText(note.text, "the checkpoint"));
  std::set<uint64_t> tried;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint64_t old = *old_size;
    if (old > cp.tree_size) {
      return AuthFailed(who + " has cosigned a tree of size " + std::to_string(old) + ", larger than this checkpoint's " +
                        std::to_string(cp.tree_size) + ": the log was cut back after it was witnessed");
    }
    tried.insert(old);
    AddCheckpointRequest req;
    req.old_size = old;
    req.checkpoint = std::string(checkpoint_note);
    if (old > 0 && old < cp.tree_size) {
      ASSIGN_OR_RETURN(req.proof, prove(old, cp.tree_size));
    }
    ASSIGN_OR_RETURN(Answer a, Post(url, witness.url, who, FormatAddCheckpointRequest(req), options));
    if (a.status == 200) {
      // The answer is signature lines: read them as the signatures of the checkpoint's text.
      // An answer that is not (a blank line or other text before its lines would make the
      // note's text another one, which a line could then be signed over) is refused. A
      // bad answer says nothing against the log: unavailable, not a refusal.
      auto answered = ParseNote(note.text + "\n" + a.body, who + " answer");
      if (!answered.ok()) return Unavailable(answered.status().message());
      if (answered->text != note.text) return Unavailable(who + ": the answer is not signature lines alone");
      auto c = FindCosignature(*answered, witness.key);
      if (!c.ok()) return Unavailable(who + ": " + c.status().message());
      return c;
    }
    if (a.status == 409 && a.content_type.rfind(kTlogSizeContentType, 0) == 0) {
      const std::string text = a.body.size() > 1 && a.body.back() == '\n' ? a.body.substr(0, a.body.size() - 1) : "";
      auto size = ParseCanonicalDecimal(text);
      if (!size.ok()) return Unavailable(who + ": a 409 answer without a tree size: " + FirstLine(a.body));
      if (tried.count(*size)) return Unavailable(who + ": answered 409 with size " + text + " again");
      *old_size = *size;
      continue;
    }
    const std::string why = who + " answered " + std::to_string(a.status) + ": " + FirstLine(a.body);
    switch (a.status) {
      case 409:
      case 422: return AuthFailed(why + " (the checkpoint is not consistent with what it cosigned)");
      case 403:
      case 404: return PermissionDenied(why);
      case 400: return InvalidInput(why);
      default: return Unavailable(why);
    }
  }
  return Unavailable(who + ": the tree size it reports kept changing");
}

CosignResult CosignCheckpoint(const WitnessPolicy& policy, std::string_view checkpoint_note,
                              std::span<const Hash> leaf_hashes, uint64_t old_size_hint,
                              const WitnessClientOptions& options) {
  auto note = ParseNote(checkpoint_note, "the checkpoint");
  auto cp = note.ok() ? ParseCheckpointText(note->text, "the checkpoint") : Result<CheckpointText>(note.status());
  Status bad = !cp.ok() ? cp.status()
               : cp->tree_size > leaf_hashes.size()
                   ? InvalidInput("the checkpoint is of size " + std::to_string(cp->tree_size) + ", but only " +
                                  std::to_string(leaf_hashes.size()) + " leaf hashes were given")
                   : OkStatus();
  if (!bad.ok()) {
    CosignResult out;
    for (const PolicyWitness& w : policy.witnesses()) {
      if (!w.url.empty()) out.outcomes.push_back({w.name, bad, std::nullopt, old_size_hint});
    }
    out.cosigned_note = std::string(checkpoint_note);
    return out;
  }
  return CosignCheckpoint(policy, checkpoint_note, ProverOf(leaf_hashes), old_size_hint, options);
}

CosignResult CosignCheckpoint(const WitnessPolicy& policy, std::string_view checkpoint_note,
                              const ConsistencyProver& prove, uint64_t old_size_hint,
                              const WitnessClientOptions& options) {
  CosignResult out;
  for (const PolicyWitness& w : policy.witnesses()) {
    if (!w.url.empty()) out.outcomes.push_back({w.name, OkStatus(), std::nullopt, old_size_hint});
  }
  std::vector<std::thread> threads;
  size_t i = 0;
  for (const PolicyWitness& w : policy.witnesses()) {
    if (w.url.empty()) continue;
    WitnessOutcome* o = &out.outcomes[i++];
    threads.emplace_back([&, o, pw = &w] {
      auto c = RequestCosignature(*pw, checkpoint_note, prove, &o->old_size, options);
      if (c.ok()) {
        o->cosignature = std::move(*c);
      } else {
        o->status = c.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> names;
  out.cosigned_note = std::string(checkpoint_note);
  for (const WitnessOutcome& o : out.outcomes) {
    if (!o.cosignature) continue;
    names.insert(o.name);
    out.cosigned_note += o.cosignature->line;
  }
  out.quorum = policy.Satisfied(names);
  return out;
}

}  // namespace enclave::audit
