// The small command-line framework shared by the enclave-* binaries: one table of verbs,
// `--flag value` / `--flag=value` options, `--help` for every verb, `--json` output,
// errors as one line on stderr and a documented exit code (docs/exit-codes.md).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::cli {

struct FlagSpec {
  std::string name;     // without dashes
  std::string value;    // placeholder for the help text; empty for a boolean flag
  std::string help;
  bool required = false;
  bool repeatable = false;  // may be given more than once; read with Args::GetAll
};

class Args {
 public:
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  Result<uint64_t> GetU64(const std::string& name, uint64_t fallback) const;
  // Every value of a repeatable flag, in command-line order (empty when absent).
  std::vector<std::string> GetAll(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool json() const { return Has("json"); }

 private:
  friend Result<Args> ParseArgs(const std::vector<FlagSpec>&, size_t, int, char**);
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeated_;
  std::vector<std::string> positional_;
};

struct Verb {
  std::string name;
  std::string summary;
  std::string positional;  // e.g. "FILE.sealed" for the help line; empty if none
  size_t positional_count = 0;
  std::vector<FlagSpec> flags;
  // Prints its own result; returns the status that decides the exit code.
  std::function<Status(const Args&)> run;
};

struct Program {
  std::string name;     // "enclave-data"
  std::string summary;  // one line
  std::vector<Verb> verbs;
  bool holds_keys = false;  // disable core dumps and ptrace at start
};

int Main(const Program& program, int argc, char** argv);

// Serializes JSON for output: bytes that are not valid UTF-8 in a string (names from a
// file) become U+FFFD instead of throwing. Every JSON output goes through here.
std::string DumpJson(const nlohmann::json& doc, int indent = -1);
// Prints a JSON document on stdout.
void PrintJson(const nlohmann::json& doc);
// One compact line (error objects, JSON lines).
void PrintJsonLine(const nlohmann::json& doc);

// Reads a passphrase from file descriptor `fd` (up to the first newline) or, when fd is
// negative, prompts on the terminal without echo; `confirm` asks twice.
Result<crypto::SecretBytes> ReadPassphrase(int fd, const std::string& prompt, bool confirm);
// The --passphrase-fd flag shared by every verb that opens a keystore.
FlagSpec PassphraseFdFlag();
Result<crypto::SecretBytes> PassphraseFromArgs(const Args& args, const std::string& prompt, bool confirm);

}  // namespace enclave::cli
