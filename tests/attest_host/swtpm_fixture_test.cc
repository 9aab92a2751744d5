// The swtpm fixture itself: it manufactures a TPM whose EK certificates chain to a fresh
// local CA, serves raw TPM 2.0 commands on its port, and cleans up after itself.
#include "swtpm_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace enclave::testing {
namespace {

std::unique_ptr<X509, decltype(&X509_free)> LoadPem(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  X509* cert = f ? PEM_read_X509(f, nullptr, nullptr, nullptr) : nullptr;
  if (f) std::fclose(f);
  return {cert, X509_free};
}

// Sends TPM2_GetRandom(8) as raw bytes (what the swtpm TCTI does) and returns the response.
std::vector<uint8_t> GetRandomRaw(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::vector<uint8_t> resp(64);
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(s);
    return {};
  }
  const uint8_t cmd[] = {0x80, 0x01, 0, 0, 0, 12, 0, 0, 0x01, 0x7B, 0x00, 0x08};
  ssize_t sent = send(s, cmd, sizeof(cmd), 0);
  ssize_t got = sent == sizeof(cmd) ? recv(s, resp.data(), resp.size(), 0) : -1;
  close(s);
  resp.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return resp;
}

TEST(SwtpmFixture, ManufacturesServesAndCleansUp) {
  if (!SwtpmFixture::Installed()) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
  auto started = SwtpmFixture::Start();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<SwtpmFixture> tpm = std::move(started).value();
  EXPECT_EQ(tpm->tcti(), "swtpm:host=127.0.0.1,port=" + std::to_string(tpm->port()));
  const std::string dir = tpm->dir();
  const pid_t pid = tpm->pid();
  ASSERT_GT(pid, 0);

  // The local CA: a self-signed root and the intermediate that issues EK certificates.
  auto root = LoadPem(tpm->ca_root_cert());
  auto issuer = LoadPem(tpm->ca_issuer_cert());
  ASSERT_TRUE(root && issuer);
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  ASSERT_EQ(X509_STORE_add_cert(store.get(), root.get()), 1);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  ASSERT_EQ(X509_STORE_CTX_init(ctx.get(), store.get(), issuer.get(), nullptr), 1);
  EXPECT_EQ(X509_verify_cert(ctx.get()), 1) << X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));

  // swtpm answers a TPM2_GetRandom: tag TPM_ST_NO_SESSIONS, rc 0, 8 random bytes.
  std::vector<uint8_t> resp = GetRandomRaw(tpm->port());
  ASSERT_EQ(resp.size(), 20u);
  EXPECT_EQ(resp[0], 0x80);
  EXPECT_EQ(resp[1], 0x01);
  EXPECT_EQ(resp[6] | resp[7] | resp[8] | resp[9], 0) << "TPM response code is not success";
  EXPECT_EQ((resp[10] << 8) | resp[11], 8);

  tpm.reset();
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " left behind";
  EXPECT_EQ(kill(pid, 0), -1) << "swtpm pid " << pid << " still running";
}

TEST(SwtpmFixture, TwoAtOnceUseDifferentPortsAndCas) {
  if (!SwtpmFixture::Installed()) GTEST_SKIP() << "swtpm is not installed (scripts/install-deps installs it)";
  auto a = SwtpmFixture::Start();
  auto b = SwtpmFixture::Start();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE((*a)->port(), (*b)->port());
  EXPECT_NE((*a)->port() + 1, (*b)->port());
  EXPECT_NE((*a)->ca_root_cert(), (*b)->ca_root_cert());
  auto root_a = LoadPem((*a)->ca_root_cert());
  auto root_b = LoadPem((*b)->ca_root_cert());
  ASSERT_TRUE(root_a && root_b);
  EXPECT_NE(X509_cmp(root_a.get(), root_b.get()), 0) << "each fixture must make its own CA";
}

}  // namespace
}  // namespace enclave::testing
