// Stratified validation split and stratified k-fold: disjoint, covering, class
// proportions kept, seeded.
#include <gtest/gtest.h>

#include <set>

#include "enclave/trainer/data.h"

namespace enclave::trainer {
namespace {

LockedArray<float> Labels(const std::vector<int>& counts) {
  size_t n = 0;
  for (int c : counts) n += static_cast<size_t>(c);
  auto a = LockedArray<float>::Create(n);
  EXPECT_TRUE(a.ok());
  // Interleaved, so that a split that ignored the labels would not keep proportions by luck.
  std::vector<int> left = counts;
  size_t i = 0;
  while (i < n) {
    for (size_t c = 0; c < counts.size(); ++c) {
      if (left[c] > 0) {
        (*a)[i++] = static_cast<float>(c);
        --left[c];
      }
    }
  }
  return std::move(a).value();
}

TEST(Split, StratifiedValidation) {
  auto labels = Labels({357, 212});
  auto s = StratifiedSplit(labels, 2, 0.2, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->val.size(), 71u + 42u);  // round(0.2 * 357) + round(0.2 * 212)
  EXPECT_EQ(s->train.size() + s->val.size(), labels.size());
  std::set<uint32_t> all;
  size_t val_pos = 0;
  for (uint32_t r : s->train) all.insert(r);
  for (uint32_t r : s->val) {
    all.insert(r);
    val_pos += labels[r] == 1.0f ? 1 : 0;
  }
  EXPECT_EQ(all.size(), labels.size());
  EXPECT_EQ(val_pos, 42u);
  EXPECT_TRUE(std::is_sorted(s->train.begin(), s->train.end()));
  auto again = StratifiedSplit(labels, 2, 0.2, 1);
  auto other = StratifiedSplit(labels, 2, 0.2, 2);
  ASSERT_TRUE(again.ok() && other.ok());
  EXPECT_TRUE(std::equal(s->val.begin(), s->val.end(), again->val.begin()));
  EXPECT_FALSE(std::equal(s->val.begin(), s->val.end(), other->val.begin()));
  auto none = StratifiedSplit(labels, 2, 0.0, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->val.size(), 0u);
}

TEST(Split, StratifiedKFold) {
  auto labels = Labels({100, 37, 13});
  auto folds = StratifiedKFold(labels, 3, 5, 9);
  ASSERT_TRUE(folds.ok());
  ASSERT_EQ(folds->size(), 5u);
  std::vector<int> seen(labels.size(), 0);
  for (const Split& f : *folds) {
    EXPECT_EQ(f.train.size() + f.val.size(), labels.size());
    EXPECT_GE(f.val.size(), 29u);
    EXPECT_LE(f.val.size(), 31u);
    std::vector<int> per(3, 0);
    for (uint32_t r : f.val) {
      ++seen[r];
      ++per[static_cast<size_t>(labels[r])];
    }
    EXPECT_EQ(per[0], 20);
    EXPECT_GE(per[1], 7);
    EXPECT_LE(per[1], 8);
    EXPECT_GE(per[2], 2);
    EXPECT_LE(per[2], 3);
    std::set<uint32_t> tr(f.train.begin(), f.train.end());
    for (uint32_t r : f.val) EXPECT_EQ(tr.count(r), 0u);
  }
  for (int s : seen) EXPECT_EQ(s, 1);  // every row held out exactly once
  EXPECT_FALSE(StratifiedKFold(labels, 3, 1, 9).ok());
  EXPECT_FALSE(StratifiedKFold(labels, 3, 151, 9).ok());
}

}  // namespace
}  // namespace enclave::trainer
