// A synthetic measured boot for verifier tests, written from the TCG PC Client PFP and
// GRUB's tpm.c independently of attest/: a crypto-agile log (SHA-1 + SHA-256) whose events
// carry explicit measured bytes (the digest input, which differs from the event data for
// GRUB command lines), Secure Boot variables as UEFI_VARIABLE_DATA, an ima-ng log, the
// PCR values both produce (computed here, not by the library), and a quote over them
// signed by a test AK. Tests change one thing and expect one finding.
#pragma once

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <memory>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "attest_test_util.h"

namespace attest_test {

struct BootEvent {
  uint32_t pcr;
  uint32_t type;
  Bytes data;
  std::optional<Bytes> measured;  // digest input; the event data when unset
  bool extend = true;             // false for EV_NO_ACTION
};

inline Bytes Guid(bool image_db) {
  // EFI_GLOBAL_VARIABLE 8BE4DF61-93CA-11D2-AA0D-00E098032B8C and
  // EFI_IMAGE_SECURITY_DATABASE_GUID D719B2CB-3D3A-4596-A3BC-DAD00E67656F, UEFI byte order.
  return image_db ? Bytes{0xCB, 0xB2, 0x19, 0xD7, 0x3A, 0x3D, 0x96, 0x45, 0xA3, 0xBC, 0xDA, 0xD0, 0x0E, 0x67, 0x65, 0x6F}
                  : Bytes{0x61, 0xDF, 0xE4, 0x8B, 0xCA, 0x93, 0xD2, 0x11, 0xAA, 0x0D, 0x00, 0xE0, 0x98, 0x03, 0x2B, 0x8C};
}

// UEFI_VARIABLE_DATA: GUID, u64 name length (chars), u64 data length, UTF-16LE name, data.
inline Bytes UefiVariableData(const Bytes& guid, const std::string& name, const Bytes& data) {
  Le w;
  w.raw(guid);
  uint64_t n = name.size(), d = data.size();
  for (int i = 0; i < 8; ++i) w.u8(uint8_t(n >> (8 * i)));
  for (int i = 0; i < 8; ++i) w.u8(uint8_t(d >> (8 * i)));
  for (char c : name) w.u16(uint16_t(uint8_t(c)));
  w.raw(data);
  return w.b;
}

inline BootEvent Separator(uint32_t pcr, uint32_t value = 0) {
  Le w;
  w.u32(value);
  return {pcr, 0x4, w.b, std::nullopt, true};
}

inline BootEvent SbVariable(const std::string& name, const Bytes& data) {
  bool db = name == "db" || name == "dbx";
  return {7, 0x80000001, UefiVariableData(Guid(db), name, data), std::nullopt, true};
}

// EV_EFI_VARIABLE_AUTHORITY (PFP 10.4.4): UEFI_VARIABLE_DATA naming db, its VariableData
// the EFI_SIGNATURE_DATA of the db entry that verified an image: SignatureOwner GUID and
// the certificate (here a stand-in that starts like DER: SEQUENCE, two length bytes).
inline Bytes DbAuthorityData(const std::string& cert_text) {
  Bytes entry = {0x77, 0xFA, 0x9A, 0xBD, 0x03, 0x59, 0xB4, 0x4F, 0x9D, 0xB9, 0x3B, 0x1E, 0x35, 0x4E, 0x3E, 0x2D};
  Bytes cert = {0x30, 0x82, uint8_t(cert_text.size() >> 8), uint8_t(cert_text.size())};
  return UefiVariableData(Guid(true), "db", Cat(entry, Cat(cert, StrBytes(cert_text))));
}

// GRUB (grub-core/commands/tpm.c): EV_IPL in PCR 8, digest over the string, data is the
// prefixed string with its NUL.
inline BootEvent GrubString(const std::string& prefix, const std::string& text) {
  Bytes data = StrBytes(prefix + text);
  data.push_back(0);
  return {8, 0xD, data, StrBytes(text), true};
}

// The events of a typical UEFI + shim/GRUB boot, as the PFP orders them.
inline std::vector<BootEvent> TypicalBoot() {
  std::vector<BootEvent> ev;
  ev.push_back({0, 0x8, StrBytes("firmware 1.0"), std::nullopt, true});  // EV_S_CRTM_VERSION
  ev.push_back({0, 0x80000008, StrBytes("platform firmware blob"), std::nullopt, true});
  ev.push_back(SbVariable("SecureBoot", {1}));
  ev.push_back(SbVariable("PK", StrBytes("pk-list")));
  ev.push_back(SbVariable("KEK", StrBytes("kek-list")));
  ev.push_back(SbVariable("db", StrBytes("db-list")));
  ev.push_back(SbVariable("dbx", StrBytes("dbx-list")));
  ev.push_back({1, 0x80000002, StrBytes("Boot0001 variable"), std::nullopt, true});  // EV_EFI_VARIABLE_BOOT
  ev.push_back({4, 0x80000007, StrBytes("Calling EFI Application from Boot Option"), std::nullopt, true});
  for (uint32_t pcr = 0; pcr <= 7; ++pcr) ev.push_back(Separator(pcr));
  ev.push_back({7, 0x800000E0, DbAuthorityData("db certificate used"), std::nullopt, true});  // EV_EFI_VARIABLE_AUTHORITY
  ev.push_back({4, 0x80000003, StrBytes("shimx64.efi device path"), StrBytes("shim image"), true});
  ev.push_back({4, 0x80000003, StrBytes("grubx64.efi device path"), StrBytes("grub image"), true});
  ev.push_back(GrubString("grub_cmd: ", "linux /vmlinuz-6.1 root=/dev/sda1 ro"));
  ev.push_back(GrubString("kernel_cmdline: ", "/vmlinuz-6.1 root=/dev/sda1 ro"));
  ev.push_back({9, 0xD, StrBytes("/vmlinuz-6.1"), StrBytes("kernel image"), true});
  return ev;
}

inline const EVP_MD* MdFor(uint16_t alg) {
  return alg == 0x0004 ? EVP_sha1() : alg == 0x000B ? EVP_sha256() : alg == 0x000C ? EVP_sha384() : EVP_sha512();
}

// The crypto-agile log (SHA-1 and SHA-256 banks) of `events`.
inline Bytes EncodeBootLog(const std::vector<BootEvent>& events) {
  const std::vector<std::pair<uint16_t, uint16_t>> algs = {{0x0004, 20}, {0x000B, 32}};
  Le spec;
  spec.str(std::string("Spec ID Event03", 16)).u32(0).u8(0).u8(2).u8(0).u8(2).u32(uint32_t(algs.size()));
  for (auto [id, size] : algs) spec.u16(id).u16(size);
  spec.u8(0);
  Le w;
  w.u32(0).u32(3).raw(Bytes(20, 0)).u32(uint32_t(spec.b.size())).raw(spec.b);
  for (const auto& e : events) {
    w.u32(e.pcr).u32(e.type).u32(uint32_t(algs.size()));
    for (auto [id, size] : algs) {
      Bytes d = e.extend ? Digest(MdFor(id), e.measured ? *e.measured : e.data) : Bytes(size, 0);
      w.u16(id).raw(d);
    }
    w.u32(uint32_t(e.data.size())).raw(e.data);
  }
  return w.b;
}

// PCR values after `events`, per bank, from zero (the fixture has no locality event).
inline std::map<uint32_t, Bytes> BootPcrs(const std::vector<BootEvent>& events, uint16_t bank) {
  std::map<uint32_t, Bytes> pcrs;
  const EVP_MD* md = MdFor(bank);
  for (const auto& e : events) {
    if (!e.extend) continue;
    auto it = pcrs.find(e.pcr);
    if (it == pcrs.end()) it = pcrs.emplace(e.pcr, Bytes(size_t(EVP_MD_get_size(md)), 0)).first;
    it->second = Digest(md, Cat(it->second, Digest(md, e.measured ? *e.measured : e.data)));
  }
  return pcrs;
}

// ima-ng: template data = u32le len || "sha256:\0" || digest || u32le len || path || "\0".
struct ImaFile {
  std::string path;
  Bytes sha256;
};
inline Bytes ImaTemplateData(const ImaFile& f) {
  Le w;
  w.u32(uint32_t(std::string("sha256").size() + 2 + f.sha256.size())).str("sha256").u8(':').u8(0).raw(f.sha256);
  w.u32(uint32_t(f.path.size() + 1)).str(f.path).u8(0);
  return w.b;
}
inline std::string Hex(const Bytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s.push_back(d[x >> 4]);
    s.push_back(d[x & 15]);
  }
  return s;
}
inline std::string ImaLogText(const std::vector<ImaFile>& files) {
  std::string out;
  for (const auto& f : files) {
    out += "10 " + Hex(Sha1(ImaTemplateData(f))) + " ima-ng sha256:" + Hex(f.sha256) + " " + f.path + "\n";
  }
  return out;
}
inline Bytes ImaPcr10Sha256(const std::vector<ImaFile>& files) {
  Bytes pcr(32, 0);
  for (const auto& f : files) pcr = Sha256(Cat(pcr, Sha256(ImaTemplateData(f))));
  return pcr;
}

// A self-signed CA certificate as PEM, for policies' ek_roots.
inline std::string SelfSignedPem(const std::string& cn) {
  Pkey key = MakeEcKey();
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600L * 24 * 365);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  X509_set_pubkey(cert.get(), key.get());
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
  X509_add_ext(cert.get(), ext, -1);
  X509_EXTENSION_free(ext);
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) throw std::runtime_error("X509_sign");
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert.get());
  char* p = nullptr;
  long n = BIO_get_mem_data(bio, &p);
  std::string pem(p, size_t(n));
  BIO_free(bio);
  return pem;
}

// A certificate for `subject` signed by `issuer_key` (self-signed when `issuer` is null),
// valid from at + not_before_s to at + not_after_s: a CA (basicConstraints CA:TRUE) or a
// leaf (an AK certificate: digitalSignature).
struct TestCert {
  std::shared_ptr<X509> cert;
  Bytes der;
  std::string pem;
};
inline TestCert IssueCert(EVP_PKEY* subject, const std::string& cn, bool ca, const TestCert* issuer,
                          EVP_PKEY* issuer_key, time_t at, long not_before_s = -3600, long not_after_s = 86400) {
  std::shared_ptr<X509> cert(X509_new(), X509_free);
  static long serial = 100;
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_time_adj(X509_getm_notBefore(cert.get()), not_before_s, &at);
  X509_time_adj(X509_getm_notAfter(cert.get()), not_after_s, &at);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* iss = issuer ? issuer->cert.get() : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(iss));
  X509_set_pubkey(cert.get(), subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, iss, cert.get(), nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair<int, const char*>{NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE"},
                            {NID_key_usage, ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) <= 0) throw std::runtime_error("X509_sign");
  TestCert out;
  out.cert = cert;
  unsigned char* p = nullptr;
  int n = i2d_X509(cert.get(), &p);
  out.der.assign(p, p + n);
  OPENSSL_free(p);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert.get());
  char* text = nullptr;
  long len = BIO_get_mem_data(bio, &text);
  out.pem.assign(text, size_t(len));
  BIO_free(bio);
  return out;
}

// DER SubjectPublicKeyInfo of `key` (what a PEM "PUBLIC KEY" holds).
inline Bytes SpkiDer(EVP_PKEY* key) {
  unsigned char* p = nullptr;
  int n = i2d_PUBKEY(key, &p);
  if (n <= 0) throw std::runtime_error("i2d_PUBKEY");
  Bytes out(p, p + n);
  OPENSSL_free(p);
  return out;
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("writing " + path);
}

}  // namespace attest_test
