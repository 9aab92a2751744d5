#include "enclave/dataset/csv.h"

#include <gtest/gtest.h>

#include "test_files.h"

namespace enclave::dataset {
namespace {

using Rows = std::vector<std::vector<std::string>>;

Result<Rows> ReadAll(const std::string& text) {
  static int n = 0;
  auto path = testing::WriteFile(testing::TestDir("csv") / ("in" + std::to_string(n++) + ".csv"), text);
  ASSIGN_OR_RETURN(CsvReader r, CsvReader::Open(path));
  Rows rows;
  std::vector<std::string> fields;
  while (true) {
    ASSIGN_OR_RETURN(bool have, r.Next(&fields));
    if (!have) break;
    rows.push_back(fields);
  }
  return rows;
}

TEST(Csv, PlainQuotedAndEscaped) {
  auto rows = ReadAll("a,b,c\n1,\"x,y\",\"say \"\"hi\"\"\"\n\"multi\nline\",,3\n");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[1], (std::vector<std::string>{"1", "x,y", "say \"hi\""}));
  EXPECT_EQ((*rows)[2], (std::vector<std::string>{"multi\nline", "", "3"}));
}

TEST(Csv, CrlfBomBlankLinesAndNoFinalNewline) {
  auto rows = ReadAll("\xEF\xBB\xBF" "a,b\r\n\r\n1,2\r\n3,4");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, (Rows{{"a", "b"}, {"1", "2"}, {"3", "4"}}));
}

TEST(Csv, FirstByteEfWithoutBomIsData) {
  // U+FF58 (fullwidth x) is EF BD 98 in UTF-8: not a byte-order mark (found by fuzz_csv).
  auto rows = ReadAll("\xEF\xBD\x98,b\n1,2\n");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ((*rows)[0], (std::vector<std::string>{"\xEF\xBD\x98", "b"}));
  auto tiny = ReadAll("\xEF");  // shorter than a mark
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  EXPECT_EQ(*tiny, (Rows{{"\xEF"}}));
}

TEST(Csv, TooManyFieldsIsAnErrorNotAMemoryBlowUp) {
  auto rows = ReadAll("a\n" + std::string(kMaxCsvFields + 1, ','));
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("more than 1048576 fields"), std::string::npos) << rows.status().message();
}

TEST(Csv, ReportsLineOfMalformedRecord) {
  auto unterminated = ReadAll("a,b\n1,2\n3,\"open\n");
  ASSERT_FALSE(unterminated.ok());
  EXPECT_NE(unterminated.status().message().find(":3: unterminated quoted field"), std::string::npos)
      << unterminated.status().message();
  auto stray = ReadAll("a,b\n1,x\"y\n");
  ASSERT_FALSE(stray.ok());
  EXPECT_NE(stray.status().message().find(":2: stray quote"), std::string::npos) << stray.status().message();
  auto after = ReadAll("a,b\n\"1\"x,2\n");
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("text after a closing quote"), std::string::npos);
}

TEST(Csv, EscapeRoundTrips) {
  EXPECT_EQ(CsvEscape("plain"), "plain");
  EXPECT_EQ(CsvEscape("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvEscape("q\"q"), "\"q\"\"q\"");
  EXPECT_EQ(CsvEscape(""), "\"\"");
}

}  // namespace
}  // namespace enclave::dataset
