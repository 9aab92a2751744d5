#include "enclave/audit/cosignature.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace enclave::audit {
namespace {

constexpr char kKeyMagic[8] = {'E', 'A', 'W', 'I', 'T', 'S', 'K', '1'};
constexpr size_t kKeyFixedBytes = 8 + 32 + 32;

Status CheckName(const std::string& name, const std::string& where) {
  if (!ValidNoteKeyName(name) || name.size() > kMaxWitnessNameBytes) {
    return InvalidInput(where + ": a witness name is 1..255 bytes with no space, control character or '+' (got '" +
                        name + "')");
  }
  return OkStatus();
}

}  // namespace

Result<WitnessSigningKey> WitnessSigningKey::FromSeed(std::span<const uint8_t> seed, const std::string& name) {
  if (seed.size() != crypto_sign_SEEDBYTES) return Internal("Ed25519 seed must be 32 bytes");
  WitnessSigningKey k;
  ASSIGN_OR_RETURN(k.secret_, crypto::SecretBytes::Create(crypto_sign_SECRETKEYBYTES));
  PublicKeyBytes pk{};
  if (crypto_sign_seed_keypair(pk.data(), k.secret_.ExposeSecretMutable().data(), seed.data()) != 0) {
    return Internal("crypto_sign_seed_keypair failed");
  }
  k.public_ = WitnessPublicKey::FromKey(name, pk);
  return k;
}

WitnessPublicKey WitnessPublicKey::FromKey(std::string name, const PublicKeyBytes& key) {
  WitnessPublicKey w;
  w.key_id = NoteKeyId(name, kNoteAlgCosignatureV1, key);
  w.name = std::move(name);
  w.key = key;
  return w;
}

Result<WitnessPublicKey> WitnessPublicKey::Parse(std::string_view vkey, const std::string& where) {
  ASSIGN_OR_RETURN(audit::VerifierKey v, ParseVerifierKey(vkey, kNoteAlgCosignatureV1, 32, where));
  RETURN_IF_ERROR(CheckName(v.name, where));
  PublicKeyBytes pk{};
  std::copy(v.key.begin(), v.key.end(), pk.begin());
  return FromKey(v.name, pk);
}

std::string WitnessPublicKey::VerifierKey() const {
  return FormatVerifierKey(audit::VerifierKey{name, kNoteAlgCosignatureV1, std::vector<uint8_t>(key.begin(), key.end()), {}});
}

std::string CosignatureMessage(uint64_t timestamp, std::string_view checkpoint_text) {
  std::string m = "cosignature/v1\ntime " + std::to_string(timestamp) + "\n";
  m.append(checkpoint_text);
  return m;
}

Result<WitnessSigningKey> WitnessSigningKey::Generate(const std::string& name) {
  RETURN_IF_ERROR(CheckName(name, "witness keygen"));
  ASSIGN_OR_RETURN(crypto::SecretBytes seed, crypto::SecretBytes::Random(crypto_sign_SEEDBYTES));
  return FromSeed(seed.ExposeSecret(), name);
}

Status WitnessSigningKey::Save(const std::string& path) const {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("creating witness key " + path, errno);
  std::vector<uint8_t> tail(public_.key.begin(), public_.key.end());
  tail.insert(tail.end(), public_.name.begin(), public_.name.end());
  Status s;
  auto write_all = [&](const uint8_t* p, size_t n) {
    while (s.ok() && n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) s = ErrnoStatus("writing " + path, errno);
      if (w > 0) p += w, n -= static_cast<size_t>(w);
    }
  };
  write_all(reinterpret_cast<const uint8_t*>(kKeyMagic), sizeof kKeyMagic);
  write_all(secret_.ExposeSecret().data(), crypto_sign_SEEDBYTES);  // the seed half
  write_all(tail.data(), tail.size());
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus("fsync " + path, errno);
  ::close(fd);
  if (!s.ok()) ::unlink(path.c_str());
  return s;
}

Result<WitnessSigningKey> WitnessSigningKey::Load(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening witness key " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(path, err);
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    return PermissionDenied(path + ": witness key is readable by group or others; chmod 600 it");
  }
  const size_t max = kKeyFixedBytes + kMaxWitnessNameBytes;
  if (!S_ISREG(st.st_mode) || st.st_size <= static_cast<off_t>(kKeyFixedBytes) || st.st_size > static_cast<off_t>(max)) {
    ::close(fd);
    return InvalidInput(path + ": not a witness key (72 bytes and a name of 1..255 bytes)");
  }
  auto buf = crypto::SecretBytes::Create(static_cast<size_t>(st.st_size));
  if (!buf.ok()) {
    ::close(fd);
    return buf.status();
  }
  auto b = buf->ExposeSecretMutable();
  size_t got = 0;
  while (got < b.size()) {
    ssize_t n = ::read(fd, b.data() + got, b.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return n == 0 ? InvalidInput(path + ": short read") : ErrnoStatus("reading " + path, err);
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (std::memcmp(b.data(), kKeyMagic, sizeof kKeyMagic) != 0) return InvalidInput(path + ": not a witness key (magic)");
  const std::string name(reinterpret_cast<const char*>(b.data()) + kKeyFixedBytes, b.size() - kKeyFixedBytes);
  RETURN_IF_ERROR(CheckName(name, path));
  ASSIGN_OR_RETURN(WitnessSigningKey k, FromSeed(b.subspan(8, 32), name));
  if (!std::equal(k.public_.key.begin(), k.public_.key.end(), b.begin() + 40)) {
    return InvalidInput(path + ": stored public key does not match the seed (corrupt key file)");
  }
  return k;
}

Result<std::string> WitnessSigningKey::Cosign(std::string_view checkpoint_text, uint64_t timestamp) const {
  if (timestamp > kMaxCosignatureTime) return InvalidInput("cosignature time above 2^63 - 1");
  const std::string m = CosignatureMessage(timestamp, checkpoint_text);
  NoteSignature sig{public_.name, public_.key_id, std::vector<uint8_t>(8 + 64)};
  for (int i = 0; i < 8; ++i) sig.signature[static_cast<size_t>(i)] = static_cast<uint8_t>(timestamp >> (56 - 8 * i));
  if (crypto_sign_detached(sig.signature.data() + 8, nullptr, reinterpret_cast<const uint8_t*>(m.data()), m.size(),
                           secret_.ExposeSecret().data()) != 0) {
    return Internal("crypto_sign_detached failed");
  }
  return FormatSignatureLine(sig);
}

Result<VerifiedCosignature> FindCosignature(const SignedNote& note, const WitnessPublicKey& witness) {
  for (const NoteSignature& s : note.signatures) {
    if (s.name != witness.name || s.key_id != witness.key_id) continue;
    if (s.signature.size() != 8 + 64) {
      return AuthFailed("the cosignature of witness " + witness.name + " is " + std::to_string(s.signature.size() + 4) +
                        " bytes, not 76");
    }
    uint64_t t = 0;
    for (int i = 0; i < 8; ++i) t = (t << 8) | s.signature[static_cast<size_t>(i)];
    if (t > kMaxCosignatureTime) return AuthFailed("the cosignature of witness " + witness.name + " has a time above 2^63 - 1");
    const std::string m = CosignatureMessage(t, note.text);
    if (crypto_sign_verify_detached(s.signature.data() + 8, reinterpret_cast<const uint8_t*>(m.data()), m.size(),
                                    witness.key.data()) != 0) {
      return AuthFailed("the cosignature of witness " + witness.name + " does not verify");
    }
    return VerifiedCosignature{t, FormatSignatureLine(s)};
  }
  return NotFound("no cosignature by witness " + witness.name);
}

}  // namespace enclave::audit
