// A scratch folder and an unlocked keystore for the tests that seal CSV files.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "enclave/crypto/keystore.h"
#include "enclave/dataset/sealed_dataset.h"
#include "test_files.h"

namespace enclave::testing {

inline crypto::SecretBytes Passphrase() {
  return *crypto::SecretBytes::CopyFrom(AsBytes("correct horse battery staple"));
}

class SealFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    keystore_path_ = (dir_ / "keystore.json").string();
    ASSERT_TRUE(crypto::Keystore::Init(keystore_path_, Passphrase(), {2, 19ull << 20}).ok());
    auto ks = crypto::Keystore::Unlock(keystore_path_, Passphrase());
    ASSERT_TRUE(ks.ok()) << ks.status().ToString();
    keystore_ = std::make_unique<crypto::Keystore>(std::move(ks).value());
  }

  // Options that seal `csv_text` (written to DIR/in.csv) with `label` into DIR/out.sealed.
  dataset::SealOptions Options(const std::string& csv_text, const std::string& label) {
    dataset::SealOptions o;
    o.csv_path = WriteFile(dir_ / "in.csv", csv_text);
    o.out_path = (dir_ / "out.sealed").string();
    o.label.column = label;
    o.dataset_id = "test-ds";
    return o;
  }

  // Every record of a sealed file, decrypted with the fixture's keystore (features then
  // the label, as stored).
  std::vector<float> Records(const std::string& sealed_path) {
    auto reader = dataset::SealedDatasetReader::Open(sealed_path, *keystore_);
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    std::vector<float> all;
    if (!reader.ok()) return all;
    EXPECT_TRUE(reader
                    ->ForEachChunk([&](std::span<const float> rec, uint64_t, uint64_t) {
                      all.insert(all.end(), rec.begin(), rec.end());
                      return OkStatus();
                    })
                    .ok());
    return all;
  }

  std::filesystem::path dir_;
  std::string keystore_path_;
  std::unique_ptr<crypto::Keystore> keystore_;
};

}  // namespace enclave::testing
