// Writes seed inputs for the fuzz_attest_* targets into tests/fuzz/corpus/attest_*/
// (run once; the event-log and IMA seeds are also copied from tests/data/attest/). Keys are
// fresh each run, so to add one target's seeds write to a scratch folder and copy that
// target's folder.
//   attest_make_fuzz_seeds CORPUS_DIR
#include <filesystem>
#include <fstream>

#include "attest_test_util.h"
#include "boot_fixture.h"

using namespace attest_test;

static void Write(const std::filesystem::path& p, const Bytes& b) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::filesystem::path dir = argv[1];
  AttestFields f;
  f.extra = Bytes(32, 0x11);
  f.sel = {{0x000B, {0, 1, 2, 3, 4, 5, 6, 7}}, {0x0004, {10}}};
  f.pcr_digest = Bytes(32, 0x22);
  Bytes quote = EncodeAttest(f);
  Write(dir / "attest_tpms_attest/valid-quote.bin", quote);
  Write(dir / "attest_tpms_attest/valid-tpm2b-quote.bin", Be().u16(uint16_t(quote.size())).raw(quote).b);
  f.type = 0x8017;
  f.sel.clear();
  Write(dir / "attest_tpms_attest/valid-certify-type.bin", EncodeAttest(f));
  Pkey ec = MakeEcKey();
  Pkey rsa = MakeRsaKey();
  Write(dir / "attest_tpms_attest/valid-ecdsa-signature.bin", SignAttest(ec.get(), quote));
  Write(dir / "attest_tpms_attest/valid-rsassa-signature.bin", SignAttest(rsa.get(), quote));
  Bytes ecpub = EncodeAkPublic(ec.get()), rsapub = EncodeAkPublic(rsa.get());
  Write(dir / "attest_tpm2b_public/valid-ecc-ak.bin", Be().u16(uint16_t(ecpub.size())).raw(ecpub).b);
  Write(dir / "attest_tpm2b_public/valid-rsa-ak.bin", Be().u16(uint16_t(rsapub.size())).raw(rsapub).b);
  Write(dir / "attest_tpm2b_public/valid-ecc-ak-tpmt.bin", ecpub);
  AkOptions no_fixed;
  no_fixed.attributes &= ~0x2u;
  Write(dir / "attest_tpm2b_public/valid-ecc-ak-without-fixedtpm.bin", EncodeAkPublic(ec.get(), no_fixed));
  std::vector<LogEvent> events = {{0, 3, Cat(StrBytes(std::string("StartupLocality", 16)), Bytes{3})},
                                  {0, 8, StrBytes("crtm")},
                                  {7, 4, Bytes(4, 0)},
                                  {17, 5, StrBytes("drtm")}};
  Write(dir / "attest_eventlog/valid-small-crypto-agile.bin", CryptoAgileLog(events));
  Write(dir / "attest_eventlog/valid-small-legacy.bin", LegacyLog(events));
  // fuzz_attest_measurements: a UEFI + shim/GRUB boot (boot_fixture.h), Secure Boot off,
  // and one UEFI_VARIABLE_DATA on its own.
  Write(dir / "attest_measurements/valid-typical-boot.bin", EncodeBootLog(TypicalBoot()));
  auto off = TypicalBoot();
  off[2] = SbVariable("SecureBoot", {0});
  Write(dir / "attest_measurements/valid-secure-boot-off.bin", EncodeBootLog(off));
  Write(dir / "attest_measurements/valid-uefi-variable.bin", UefiVariableData(Guid(true), "db", StrBytes("db-list")));
  // fuzz_attest_golden: options byte, u32 LE log length, the log, the IMA list.
  auto golden = [](uint8_t flags, const Bytes& log, const std::string& ima) {
    Le w;
    w.u8(flags).u32(uint32_t(log.size())).raw(log).str(ima);
    return w.b;
  };
  const std::string ima = ImaLogText({{"boot_aggregate", Sha256(StrBytes("pcrs 0-7"))},
                                      {"/usr/bin/enclave-train", Sha256(StrBytes("trainer"))},
                                      {"/var/log/enclave/run.log", Sha256(StrBytes("log"))}});
  Write(dir / "attest_golden/valid-typical-boot-ima.bin", golden(3, EncodeBootLog(TypicalBoot()), ima));
  Write(dir / "attest_golden/valid-typical-boot.bin", golden(0, EncodeBootLog(TypicalBoot()), ""));
  Write(dir / "attest_golden/valid-secure-boot-off.bin", golden(1, EncodeBootLog(off), ima));
  // fuzz_attest_third_party: selector byte, then a tpm2-tools PCR file or an AK key.
  const Bytes sha256_0 = Sha256(Bytes{0}), sha256_7 = Sha256(Bytes{7}), sha1_7 = Sha1(Bytes{7});
  Le ser;
  ser.u8(0).u32(2).u16(0x000B).u8(3).u8(0x81).u8(0).u8(0).u8(0).u8(0);
  ser.u16(0x0004).u8(3).u8(0x80).u8(0).u8(0).u8(0).u8(0).raw(Bytes(14 * 8, 0)).u32(1).u32(3);
  for (const Bytes* d : {&sha256_0, &sha256_7, &sha1_7}) {
    Bytes buffer(64, 0);
    std::copy(d->begin(), d->end(), buffer.begin());
    ser.u16(uint16_t(d->size())).raw(buffer);
  }
  ser.raw(Bytes(5 * 66, 0));
  Write(dir / "attest_third_party/valid-serialized.bin", ser.b);
  Write(dir / "attest_third_party/valid-values.bin", Cat(Bytes{1}, Cat(Cat(sha256_0, sha256_7), sha1_7)));
  Write(dir / "attest_third_party/valid-spki-ecc.bin", Cat(Bytes{2}, SpkiDer(ec.get())));
  Write(dir / "attest_third_party/valid-spki-rsa.bin", Cat(Bytes{2}, SpkiDer(rsa.get())));
  {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PUBKEY(bio, ec.get());
    char* text = nullptr;
    long len = BIO_get_mem_data(bio, &text);
    Write(dir / "attest_third_party/valid-pem.txt", Cat(Bytes{3}, Bytes(text, text + len)));
    BIO_free(bio);
  }
  return 0;
}
