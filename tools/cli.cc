#include "cli.h"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <iostream>

#include "enclave/common/exit_codes.h"
#include "enclave/common/process_hardening.h"

namespace enclave::cli {

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>{} : it->second;
}

Result<uint64_t> Args::GetU64(const std::string& name, uint64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  uint64_t v = 0;
  const std::string& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) {
    return InvalidInput("--" + name + " needs a non-negative integer, got '" + s + "'");
  }
  return v;
}

Result<Args> ParseArgs(const std::vector<FlagSpec>& flags, size_t positional_count, int argc, char** argv) {
  Args args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      args.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : flags) {
      if (f.name == name) spec = &f;
    }
    if (spec == nullptr) return InvalidInput("unknown option --" + name);
    if (spec->value.empty()) {
      if (inline_value) return InvalidInput("option --" + name + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= argc) return InvalidInput("option --" + name + " needs a value " + spec->value);
      value = argv[++i];
    }
    if (args.values_.count(name) && !spec->repeatable) return InvalidInput("option --" + name + " given twice");
    args.values_[name] = value;
    if (spec->repeatable) args.repeated_[name].push_back(value);
  }
  for (const FlagSpec& f : flags) {
    if (f.required && !args.Has(f.name)) return InvalidInput("missing required option --" + f.name);
  }
  if (args.positional_.size() != positional_count) {
    return InvalidInput("expected " + std::to_string(positional_count) + " argument(s), got " +
                        std::to_string(args.positional_.size()));
  }
  return args;
}

namespace {

void PrintProgramHelp(const Program& p, std::FILE* out) {
  std::fprintf(out, "%s: %s\n\nUsage: %s <verb> [options]   (%s <verb> --help for details)\n\nVerbs:\n",
               p.name.c_str(), p.summary.c_str(), p.name.c_str(), p.name.c_str());
  for (const Verb& v : p.verbs) std::fprintf(out, "  %-16s %s\n", v.name.c_str(), v.summary.c_str());
  std::fprintf(out, "\nExit codes: docs/exit-codes.md (0 ok, 2 usage, 3 invalid input, 4 authentication "
                    "failed, 5 permission denied, ...).\n");
}

void PrintVerbHelp(const Program& p, const Verb& v) {
  std::printf("%s %s: %s\n\nUsage: %s %s%s%s [options]\n\nOptions:\n", p.name.c_str(), v.name.c_str(),
              v.summary.c_str(), p.name.c_str(), v.name.c_str(), v.positional.empty() ? "" : " ",
              v.positional.c_str());
  for (const FlagSpec& f : v.flags) {
    std::string left = "--" + f.name + (f.value.empty() ? "" : " " + f.value);
    std::printf("  %-26s %s%s%s\n", left.c_str(), f.help.c_str(), f.required ? " (required)" : "",
                f.repeatable ? " (repeatable)" : "");
  }
  std::printf("  %-26s %s\n", "--help", "show this help");
}

}  // namespace

std::string DumpJson(const nlohmann::json& doc, int indent) {
  // Names from a file (column and class names, possibly from an unauthenticated header) need
  // not be UTF-8; the strict default would throw. Each ill-formed sequence becomes U+FFFD.
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void PrintJson(const nlohmann::json& doc) { std::cout << DumpJson(doc, 2) << std::endl; }
void PrintJsonLine(const nlohmann::json& doc) { std::cout << DumpJson(doc) << std::endl; }

int Main(const Program& program, int argc, char** argv) {
  if (program.holds_keys) {
    if (Status s = HardenProcess(); !s.ok()) {
      std::fprintf(stderr, "%s: error: %s\n", program.name.c_str(), s.ToString().c_str());
      return ExitCodeFor(s);
    }
  }
  if (argc < 2) {
    PrintProgramHelp(program, stderr);
    return kExitUsage;
  }
  std::string verb_name = argv[1];
  if (verb_name == "--help" || verb_name == "-h" || verb_name == "help") {
    PrintProgramHelp(program, stdout);
    return kExitOk;
  }
  // A verb may be two words ("keystore init").
  const Verb* verb = nullptr;
  int consumed = 2;
  for (const Verb& v : program.verbs) {
    if (v.name == verb_name) verb = &v;
    if (argc > 2 && v.name == verb_name + " " + argv[2]) {
      verb = &v;
      consumed = 3;
      break;
    }
  }
  if (verb == nullptr) {
    std::fprintf(stderr, "%s: error: unknown verb '%s' (try --help)\n", program.name.c_str(), verb_name.c_str());
    return kExitUsage;
  }
  for (int i = consumed; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {
      PrintVerbHelp(program, *verb);
      return kExitOk;
    }
  }
  auto args = ParseArgs(verb->flags, verb->positional_count, argc - consumed, argv + consumed);
  if (!args.ok()) {
    std::fprintf(stderr, "%s %s: usage error: %s\n", program.name.c_str(), verb->name.c_str(),
                 args.status().message().c_str());
    return kExitUsage;
  }
  Status s;
  try {
    s = verb->run(*args);
  } catch (const std::exception& e) {  // a bug: report it as one line and exit 1, never abort
    s = Internal(std::string("unexpected exception: ") + e.what());
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s %s: error: %s\n", program.name.c_str(), verb->name.c_str(), s.ToString().c_str());
    if (args->json()) {
      // One line, so that verbs that stream JSON lines (enclave-train run) end with a line too.
      PrintJsonLine({{"ok", false}, {"error", {{"code", CodeName(s.code())}, {"message", s.message()}}}});
    }
  }
  return ExitCodeFor(s);
}

FlagSpec PassphraseFdFlag() {
  return {"passphrase-fd", "N", "read the keystore passphrase from file descriptor N (default: prompt)"};
}

Result<crypto::SecretBytes> ReadPassphrase(int fd, const std::string& prompt, bool confirm) {
  // keystore.md: the bytes before the first LF (a CR before it is kept), 1 .. 1023 of them.
  constexpr size_t kMax = 1023;
  ASSIGN_OR_RETURN(crypto::SecretBytes buf, crypto::SecretBytes::Create(kMax));
  auto read_line = [&](int from, size_t* len) -> Status {
    *len = 0;
    auto b = buf.ExposeSecretMutable();
    while (true) {
      char c;
      ssize_t n = ::read(from, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("reading passphrase", errno);
      if (n == 0 || c == '\n') break;
      if (*len == kMax) return InvalidInput("passphrase longer than 1023 bytes");
      b[(*len)++] = static_cast<uint8_t>(c);
    }
    return OkStatus();
  };
  size_t len = 0;
  if (fd >= 0) {
    RETURN_IF_ERROR(read_line(fd, &len));
  } else {
    int tty = ::open("/dev/tty", O_RDWR | O_CLOEXEC);
    if (tty < 0) return FailedPrecondition("no terminal to prompt for the passphrase; use --passphrase-fd");
    struct termios old {};
    bool have_termios = ::tcgetattr(tty, &old) == 0;
    struct termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    if (have_termios) ::tcsetattr(tty, TCSAFLUSH, &quiet);
    auto ask = [&](const std::string& text, size_t* n) -> Status {
      (void)!::write(tty, text.data(), text.size());
      Status s = read_line(tty, n);
      (void)!::write(tty, "\n", 1);
      return s;
    };
    Status s = ask(prompt + ": ", &len);
    if (s.ok() && confirm) {
      ASSIGN_OR_RETURN(crypto::SecretBytes first, crypto::SecretBytes::CopyFrom(buf.ExposeSecret().first(len)));
      size_t len2 = 0;
      s = ask("Repeat to confirm: ", &len2);
      if (s.ok() && !crypto::ConstantTimeEquals(first.ExposeSecret(), buf.ExposeSecret().first(len2))) {
        s = InvalidInput("the two passphrases differ");
      }
    }
    if (have_termios) ::tcsetattr(tty, TCSAFLUSH, &old);
    ::close(tty);
    RETURN_IF_ERROR(s);
  }
  if (len == 0) return InvalidInput("empty passphrase");
  return crypto::SecretBytes::CopyFrom(buf.ExposeSecret().first(len));
}

Result<crypto::SecretBytes> PassphraseFromArgs(const Args& args, const std::string& prompt, bool confirm) {
  int fd = -1;
  if (args.Has("passphrase-fd")) {
    ASSIGN_OR_RETURN(uint64_t v, args.GetU64("passphrase-fd", 0));
    if (v > 1024) return InvalidInput("--passphrase-fd out of range");
    fd = static_cast<int>(v);
  }
  return ReadPassphrase(fd, prompt, confirm);
}

}  // namespace enclave::cli
