#include "enclave/broker/config.h"

#include <filesystem>
#include <set>

#include <toml++/toml.h>

#include "enclave/common/files.h"

namespace enclave::broker {
namespace {

std::string Resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p.front() == '/') return p;
  return (std::filesystem::path(base) / p).lexically_normal().string();
}

Status CheckKeys(const toml::table& t, std::string_view where, const std::set<std::string>& allowed) {
  for (const auto& [k, v] : t) {
    if (!allowed.count(std::string(k.str())))
      return InvalidInput("broker config: unknown key '" + std::string(where) + std::string(where.empty() ? "" : ".") +
                          std::string(k.str()) + "'");
  }
  return OkStatus();
}

Result<const toml::table*> Table(const toml::table& root, const std::string& name, bool required) {
  const toml::node* n = root.get(name);
  if (n == nullptr) {
    if (required) return InvalidInput("broker config: missing table [" + name + "]");
    return static_cast<const toml::table*>(nullptr);
  }
  if (!n->is_table()) return InvalidInput("broker config: '" + name + "' must be a table");
  return n->as_table();
}

Status GetString(const toml::table* t, const std::string& table, const std::string& key, bool required,
                 std::string* out) {
  const toml::node* n = t ? t->get(key) : nullptr;
  if (n == nullptr) {
    if (required) return InvalidInput("broker config: missing key '" + table + "." + key + "'");
    return OkStatus();
  }
  if (!n->is_string()) return InvalidInput("broker config: '" + table + "." + key + "' must be a string");
  *out = n->as_string()->get();
  if (out->empty()) return InvalidInput("broker config: '" + table + "." + key + "' is empty");
  if (out->find('\0') != std::string::npos)
    return InvalidInput("broker config: '" + table + "." + key + "' contains a NUL byte");
  return OkStatus();
}

Status GetInt(const toml::table* t, const std::string& table, const std::string& key, int64_t lo, int64_t hi,
              int64_t* out) {
  const toml::node* n = t ? t->get(key) : nullptr;
  if (n == nullptr) return OkStatus();
  if (!n->is_integer()) return InvalidInput("broker config: '" + table + "." + key + "' must be an integer");
  int64_t v = n->as_integer()->get();
  if (v < lo || v > hi)
    return InvalidInput("broker config: '" + table + "." + key + "' = " + std::to_string(v) + " is outside [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
  *out = v;
  return OkStatus();
}

Status GetBool(const toml::table* t, const std::string& table, const std::string& key, bool* out) {
  const toml::node* n = t ? t->get(key) : nullptr;
  if (n == nullptr) return OkStatus();
  if (!n->is_boolean()) return InvalidInput("broker config: '" + table + "." + key + "' must be true or false");
  *out = n->as_boolean()->get();
  return OkStatus();
}

// GetInt into a field of another integer type (the range keeps it representable).
template <typename T>
Status GetIntAs(const toml::table* t, const std::string& table, const std::string& key, int64_t lo, int64_t hi,
                T* out) {
  int64_t v = static_cast<int64_t>(*out);
  RETURN_IF_ERROR(GetInt(t, table, key, lo, hi, &v));
  *out = static_cast<T>(v);
  return OkStatus();
}

}  // namespace

Result<BrokerConfig> ParseBrokerConfig(std::string_view text, const std::string& base_dir) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view("broker.toml"));
  } catch (const toml::parse_error& e) {
    return InvalidInput("broker config: line " + std::to_string(e.source().begin.line) + ", column " +
                        std::to_string(e.source().begin.column) + ": " + std::string(e.description()));
  }
  RETURN_IF_ERROR(CheckKeys(root, "", {"server", "store", "keystore", "audit", "attestation", "release", "admin"}));
  BrokerConfig c;

  ASSIGN_OR_RETURN(const toml::table* server, Table(root, "server", true));
  RETURN_IF_ERROR(CheckKeys(*server, "server",
                            {"listen", "port", "certificate", "private_key", "threads", "max_queued", "max_body_bytes",
                             "read_timeout_s", "write_timeout_s", "keep_alive_s", "max_header_bytes",
                             "max_header_fields", "header_timeout_s", "body_timeout_s", "max_connections",
                             "max_connections_per_peer"}));
  ServerConfig& s = c.server;
  RETURN_IF_ERROR(GetString(server, "server", "listen", false, &s.listen));
  RETURN_IF_ERROR(GetString(server, "server", "certificate", true, &s.certificate));
  RETURN_IF_ERROR(GetString(server, "server", "private_key", true, &s.private_key));
  RETURN_IF_ERROR(GetIntAs(server, "server", "port", 0, 65535, &s.port));
  RETURN_IF_ERROR(GetIntAs(server, "server", "threads", 1, 1024, &s.threads));
  RETURN_IF_ERROR(GetIntAs(server, "server", "max_queued", 1, 65536, &s.max_queued));
  RETURN_IF_ERROR(GetIntAs(server, "server", "max_body_bytes", 4096, int64_t{256} << 20, &s.max_body_bytes));
  RETURN_IF_ERROR(GetIntAs(server, "server", "read_timeout_s", 1, 300, &s.read_timeout_s));
  RETURN_IF_ERROR(GetIntAs(server, "server", "write_timeout_s", 1, 300, &s.write_timeout_s));
  RETURN_IF_ERROR(GetIntAs(server, "server", "keep_alive_s", 1, 300, &s.keep_alive_s));
  RETURN_IF_ERROR(GetIntAs(server, "server", "max_header_bytes", 1024, 1 << 20, &s.max_header_bytes));
  RETURN_IF_ERROR(GetIntAs(server, "server", "max_header_fields", 8, 1024, &s.max_header_fields));
  RETURN_IF_ERROR(GetIntAs(server, "server", "header_timeout_s", 1, 300, &s.header_timeout_s));
  RETURN_IF_ERROR(GetIntAs(server, "server", "body_timeout_s", 1, 3600, &s.body_timeout_s));
  RETURN_IF_ERROR(GetIntAs(server, "server", "max_connections", 1, 65536, &s.max_connections));
  RETURN_IF_ERROR(GetIntAs(server, "server", "max_connections_per_peer", 1, 65536, &s.max_connections_per_peer));
  s.certificate = Resolve(base_dir, s.certificate);
  s.private_key = Resolve(base_dir, s.private_key);

  ASSIGN_OR_RETURN(const toml::table* store, Table(root, "store", true));
  RETURN_IF_ERROR(CheckKeys(*store, "store", {"path"}));
  RETURN_IF_ERROR(GetString(store, "store", "path", true, &c.store_path));
  c.store_path = Resolve(base_dir, c.store_path);

  ASSIGN_OR_RETURN(const toml::table* keystore, Table(root, "keystore", true));
  RETURN_IF_ERROR(CheckKeys(*keystore, "keystore", {"path"}));
  RETURN_IF_ERROR(GetString(keystore, "keystore", "path", true, &c.keystore_path));
  c.keystore_path = Resolve(base_dir, c.keystore_path);

  ASSIGN_OR_RETURN(const toml::table* audit, Table(root, "audit", true));
  RETURN_IF_ERROR(
      CheckKeys(*audit, "audit", {"dir", "signing_key", "actor", "archive_max_bytes", "archive_min_free_bytes",
                                  "witness_policy", "witness_wait_ms", "witness_timeout_s", "witness_interval_ms",
                                  "serve_tiles"}));
  RETURN_IF_ERROR(GetInt(audit, "audit", "archive_max_bytes", 1, INT64_MAX, &c.archive_max_bytes));
  RETURN_IF_ERROR(GetInt(audit, "audit", "archive_min_free_bytes", 0, INT64_MAX, &c.archive_min_free_bytes));
  RETURN_IF_ERROR(GetString(audit, "audit", "dir", true, &c.audit_dir));
  RETURN_IF_ERROR(GetString(audit, "audit", "signing_key", true, &c.audit_signing_key));
  RETURN_IF_ERROR(GetString(audit, "audit", "actor", false, &c.actor));
  c.audit_dir = Resolve(base_dir, c.audit_dir);
  c.audit_signing_key = Resolve(base_dir, c.audit_signing_key);
  RETURN_IF_ERROR(GetString(audit, "audit", "witness_policy", false, &c.witness_policy));
  if (!c.witness_policy.empty()) c.witness_policy = Resolve(base_dir, c.witness_policy);
  RETURN_IF_ERROR(GetInt(audit, "audit", "witness_wait_ms", 1, 600000, &c.witness_wait_ms));
  RETURN_IF_ERROR(GetInt(audit, "audit", "witness_timeout_s", 1, 300, &c.witness_timeout_s));
  RETURN_IF_ERROR(GetInt(audit, "audit", "witness_interval_ms", 0, 1000, &c.witness_interval_ms));
  RETURN_IF_ERROR(GetBool(audit, "audit", "serve_tiles", &c.serve_tiles));

  ASSIGN_OR_RETURN(const toml::table* att, Table(root, "attestation", true));
  RETURN_IF_ERROR(CheckKeys(*att, "attestation", {"policy", "nonce_ttl_s", "challenge_ttl_s", "nonces_per_minute"}));
  RETURN_IF_ERROR(GetInt(att, "attestation", "nonces_per_minute", 1, 1000000, &c.nonces_per_minute));
  RETURN_IF_ERROR(GetString(att, "attestation", "policy", true, &c.attestation_policy));
  c.attestation_policy = Resolve(base_dir, c.attestation_policy);
  RETURN_IF_ERROR(GetInt(att, "attestation", "nonce_ttl_s", 1, 3600, &c.nonce_ttl_s));
  RETURN_IF_ERROR(GetInt(att, "attestation", "challenge_ttl_s", 1, 86400, &c.challenge_ttl_s));

  ASSIGN_OR_RETURN(const toml::table* release, Table(root, "release", false));
  if (release != nullptr) {
    RETURN_IF_ERROR(CheckKeys(*release, "release", {"policy_signers", "export_key"}));
    if (const toml::node* n = release->get("policy_signers"); n != nullptr) {
      const toml::array* a = n->as_array();
      if (a == nullptr) return InvalidInput("broker config: 'release.policy_signers' must be an array of file names");
      for (const toml::node& e : *a) {
        if (!e.is_string() || e.as_string()->get().empty())
          return InvalidInput("broker config: 'release.policy_signers' must be an array of file names");
        c.policy_signers.push_back(Resolve(base_dir, e.as_string()->get()));
      }
    }
    RETURN_IF_ERROR(GetString(release, "release", "export_key", false, &c.export_key));
  }
  ASSIGN_OR_RETURN(const toml::table* admin, Table(root, "admin", false));
  if (admin != nullptr) {
    RETURN_IF_ERROR(CheckKeys(*admin, "admin", {"token_file"}));
    RETURN_IF_ERROR(GetString(admin, "admin", "token_file", true, &c.admin_token_file));
    c.admin_token_file = Resolve(base_dir, c.admin_token_file);
  }
  return c;
}

Result<BrokerConfig> LoadBrokerConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxConfigBytes));
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  auto c = ParseBrokerConfig(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), dir);
  if (!c.ok()) return c.status().Annotate(path);
  c->path = path;
  return c;
}

}  // namespace enclave::broker
