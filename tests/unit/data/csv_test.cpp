// The CSV/TSV reader: typed columns chosen by name, categorical indices, missing-value policies, quoting, line ends,
// chunk boundaries, and errors that name the file, line and column. Files are written into a per-test temp folder.
#include "bellows/data/csv.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bellows/data/csv_dataset.h"  // defines: make_csv_dataset
#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::data {
namespace {

using test_support::error_from;
using test_support::floats;

namespace fs = std::filesystem;
using ::testing::HasSubstr;



std::vector<std::int64_t> longs(const at::Tensor& t) {
  EXPECT_EQ(t.scalar_type(), at::kLong);
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

using Sizes = std::vector<std::int64_t>;
using Names = std::vector<std::string>;

// A fresh folder per test; files are written byte for byte (no newline translation).
class CsvTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(testing::TempDir()) /
           fmt::format("bellows_{}_{}_{}", info->test_suite_name(), info->name(), static_cast<long>(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& content) const {
    const fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    out << content;
    return path;
  }

  CsvOptions options(const std::string& name, const std::string& content) const {
    CsvOptions o;
    o.path = write(name, content);
    return o;
  }

  fs::path dir_;
};

class CsvRead : public CsvTest {};
class CsvErrors : public CsvTest {};
class CsvDataset : public CsvTest {};

// --- values, columns and types ---

TEST_F(CsvRead, FloatsIntoXAndY) {
  CsvOptions o = options("t.csv", "a,b,c,target\n1,2.5,-3,10\n4,5e-1,6,11.5\n");
  o.targets = {"target"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(t.tensors.at("x").sizes().vec(), (Sizes{2, 3}));
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 2.5f, -3, 4, 0.5f, 6}));
  EXPECT_EQ(t.tensors.at("y").sizes().vec(), (Sizes{2, 1}));
  EXPECT_EQ(floats(t.tensors.at("y")), (std::vector<float>{10, 11.5f}));
  EXPECT_EQ(t.feature_names, (Names{"a", "b", "c"}));
  EXPECT_EQ(t.target_names, (Names{"target"}));
  EXPECT_EQ(t.lines, (Sizes{2, 3}));
  EXPECT_TRUE(t.categories.empty());
  EXPECT_EQ(t.dropped_rows, 0);
}

TEST_F(CsvRead, FloatsAreCorrectlyRounded) {
  CsvOptions o = options("t.csv", "a\n0.1\n3.4028235e38\n-1.17549435e-38\n1e-50\n+7\ninf\n");
  const CsvTable t = read_csv(o);
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{0.1f, 3.4028235e38f, -1.17549435e-38f, 0.0f, 7.0f,
                                                           std::numeric_limits<float>::infinity()}));
}

TEST_F(CsvRead, WithoutTargetsEveryColumnIsAFeatureAndThereIsNoY) {
  const CsvTable t = read_csv(options("t.csv", "a,b\n1,2\n3,4\n"));
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(t.tensors.count("y"), 0u);
  EXPECT_TRUE(t.target_names.empty());
}

TEST_F(CsvRead, FeaturesInTheGivenOrderAndUnlistedColumnsAreNotParsed) {
  CsvOptions o = options("t.csv", "a,b,c,d\n1,2,3,not a number\n4,5,6,\"quoted, skipped\"\n");
  o.features = {"c", "a"};
  o.targets = {"b"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{3, 1, 6, 4}));
  EXPECT_EQ(floats(t.tensors.at("y")), (std::vector<float>{2, 5}));
  EXPECT_EQ(t.feature_names, (Names{"c", "a"}));
}

TEST_F(CsvRead, IntegerTargetBecomesInt64Labels) {
  CsvOptions o = options("t.csv", "f,label\n0.5,3\n1.5,-2\n2.5,9007199254740993\n");
  o.targets = {"label"};
  o.integer = {"label"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(t.tensors.at("y").sizes().vec(), (Sizes{3}));
  EXPECT_EQ(longs(t.tensors.at("y")), (Sizes{3, -2, 9007199254740993LL}));  // exact beyond float and double
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{0.5f, 1.5f, 2.5f}));
}

TEST_F(CsvRead, IntegerFeatureIsItsValueAsFloat) {
  CsvOptions o = options("t.csv", "n,f\n7,1\n-3,2\n");
  o.integer = {"n"};
  EXPECT_EQ(floats(read_csv(o).tensors.at("x")), (std::vector<float>{7, 1, -3, 2}));
}

TEST_F(CsvRead, CategoricalIndicesFollowSortedDistinctValues) {
  CsvOptions o = options("t.csv", "color,size\nred,1\nblue,2\ngreen,3\nblue,4\n");
  o.categorical = {"color"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{2, 1, 0, 2, 1, 3, 0, 4}));
  EXPECT_EQ(t.categories.at("color"), (Names{"blue", "green", "red"}));
}

TEST_F(CsvRead, CategoricalTargetIsLabels) {
  CsvOptions o = options("t.csv", "x,species\n1,virginica\n2,setosa\n3,versicolor\n4,setosa\n");
  o.targets = {"species"};
  o.categorical = {"species"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(longs(t.tensors.at("y")), (Sizes{2, 0, 1, 0}));
  EXPECT_EQ(t.categories.at("species"), (Names{"setosa", "versicolor", "virginica"}));
}

TEST_F(CsvRead, SeveralTargetsAreFloatEvenWhenInteger) {
  CsvOptions o = options("t.csv", "x,t,k\n1,0.5,2\n2,1.5,3\n");
  o.targets = {"t", "k"};
  o.integer = {"k"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(t.tensors.at("y").sizes().vec(), (Sizes{2, 2}));
  EXPECT_EQ(floats(t.tensors.at("y")), (std::vector<float>{0.5f, 2, 1.5f, 3}));
}

// --- missing values ---

TEST_F(CsvRead, MissingDropDropsTheRowAndKeepsFileLines) {
  CsvOptions o = options("t.csv", "a,b,c\n1,2,x\n3,NA,y\n\n5,6,x\n,8,z\n9,10,\n11,12,y\n");
  o.missing = "drop";
  o.categorical = {"c"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(t.dropped_rows, 3);
  EXPECT_EQ(t.lines, (Sizes{2, 5, 8}));
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 2, 0, 5, 6, 0, 11, 12, 1}));
  EXPECT_EQ(t.categories.at("c"), (Names{"x", "y"}));  // 'z' was only in a dropped row
}

TEST_F(CsvRead, MissingZeroFillsZeroAndIndexZero) {
  CsvOptions o = options("t.csv", "a,n,c\n1.5,2,q\nnull,N/A,\nNaN,nan,p\n");
  o.missing = "zero";
  o.integer = {"n"};
  o.categorical = {"c"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1.5f, 2, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(t.categories.at("c"), (Names{"p", "q"}));
  EXPECT_EQ(t.lines, (Sizes{2, 3, 4}));
}

TEST_F(CsvRead, MissingMeanUsesThePresentValues) {
  CsvOptions o = options("t.csv", "a,n,c,y\n1,1,b,0\nNA,2,a,1\n4,NULL,b,2\n,4,,3\n");
  o.missing = "mean";
  o.integer = {"n", "y"};
  o.categorical = {"c"};
  o.targets = {"y"};
  const CsvTable t = read_csv(o);
  // a: mean(1, 4) = 2.5; n: mean(1, 2, 4) = 2.33 rounded to 2; c: the most frequent value, 'b' (index 1).
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 1, 1, 2.5f, 2, 0, 4, 2, 1, 2.5f, 4, 1}));
  EXPECT_EQ(longs(t.tensors.at("y")), (Sizes{0, 1, 2, 3}));
}

TEST_F(CsvRead, NumericMissingTokenIsRecognised) {
  CsvOptions o = options("t.csv", "a,b\n-999,1\n-998,-999\n");
  o.missing = "zero";
  o.missing_tokens = {"-999"};
  EXPECT_EQ(floats(read_csv(o).tensors.at("x")), (std::vector<float>{0, 1, -998, 0}));
}

TEST_F(CsvRead, NanIsANumberWhenNotAMissingToken) {
  CsvOptions o = options("t.csv", "a\nnan\n2\n");
  o.missing_tokens = {"NA"};
  const std::vector<float> x = floats(read_csv(o).tensors.at("x"));
  ASSERT_EQ(x.size(), 2u);
  EXPECT_TRUE(std::isnan(x[0]));
  EXPECT_EQ(x[1], 2);
}

// --- format: delimiters, quotes, line ends ---

TEST_F(CsvRead, TsvByExtension) {
  for (const char* name : {"t.tsv", "t.TAB"}) {
    const CsvTable t = read_csv(options(name, "a\tb b\tc\n1\t2\t3.5\n"));
    EXPECT_EQ(t.feature_names, (Names{"a", "b b", "c"})) << name;
    EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 2, 3.5f})) << name;
  }
  // The comma is no delimiter in a .tsv file: "3,5" is one (bad) field.
  CsvOptions o = options("bad.tsv", "a\tb\n1\t3,5\n");
  EXPECT_THAT(error_from([&] { read_csv(o); }).message(), HasSubstr("line 2, column 'b': '3,5' is not a number"));
}

TEST_F(CsvRead, ExplicitDelimiter) {
  CsvOptions o = options("t.csv", "a;b\n1,5;2\n");
  o.delimiter = ';';
  o.categorical = {"a"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(t.categories.at("a"), (Names{"1,5"}));
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{0, 2}));
}

TEST_F(CsvRead, QuotedFieldsHoldDelimitersAndEscapedQuotes) {
  CsvOptions o = options("t.csv",
                         "name,\"value, in units\",note\n"
                         "\"Smith, J.\",1.5,\"say \"\"hi\"\"\"\n"
                         "\"\"\"quoted\"\"\", \"2\" ,plain\n");
  o.categorical = {"name", "note"};
  const CsvTable t = read_csv(o);
  EXPECT_EQ(t.feature_names, (Names{"name", "value, in units", "note"}));
  EXPECT_EQ(t.categories.at("name"), (Names{"\"quoted\"", "Smith, J."}));
  EXPECT_EQ(t.categories.at("note"), (Names{"plain", "say \"hi\""}));
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 1.5f, 1, 0, 2, 0}));
}

TEST_F(CsvRead, CrlfLineEndsAndBom) {
  const CsvTable t = read_csv(options("t.csv",
                                      "\xEF\xBB\xBF"
                                      "a,b\r\n1,2\r\n3,4\r\n"));
  EXPECT_EQ(t.feature_names, (Names{"a", "b"}));  // no BOM in the first name
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(t.lines, (Sizes{2, 3}));
}

TEST_F(CsvRead, BlankLinesAreSkippedAndTheLastLineNeedsNoLineEnd) {
  const CsvTable t = read_csv(options("t.csv", "a,b\n1,2\n\n\r\n3,4"));
  EXPECT_EQ(floats(t.tensors.at("x")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(t.lines, (Sizes{2, 5}));
}

TEST_F(CsvRead, SpacesAroundUnquotedFieldsAreTrimmed) {
  CsvOptions o = options("t.csv", "a , b\n 1 ,\t2\n");
  o.features = {"b"};
  EXPECT_EQ(floats(read_csv(o).tensors.at("x")), (std::vector<float>{2}));
}

TEST_F(CsvRead, ChunkBoundariesDoNotChangeTheTable) {
  std::string content =
      "\xEF\xBB\xBF"
      "id,\"v, 1\",cat,n,label\r\n";
  for (int r = 0; r < 40; ++r) {
    const std::string value = r % 7 == 3 ? "NA" : fmt::format("{}.25", r * 3);
    const std::string category = r % 3 == 0 ? "\"a, \"\"x\"\"\"" : (r % 3 == 1 ? "b" : "c");
    const std::string n = r % 11 == 4 ? "" : std::to_string(r * 1000003);
    content += fmt::format("{},{},{},{},{}{}", r, value, category, n, r % 4, r % 2 ? "\r\n" : "\n");
    if (r == 20) content += "\n";                                                     // a blank line
    if (r == 30) content += fmt::format("999,{}1.5,b,1,1\n", std::string(300, '0'));  // a long line
  }
  content += "41,1.5,b,2,3";  // no final line end
  const fs::path path = write("chunks.csv", content);
  auto read = [&](std::size_t chunk_bytes) {
    CsvOptions o;
    o.path = path;
    o.targets = {"label"};
    o.integer = {"n", "label"};
    o.categorical = {"cat"};
    o.missing = "mean";
    o.chunk_bytes = chunk_bytes;
    return read_csv(o);
  };
  const CsvTable reference = read(4 << 20);
  ASSERT_EQ(reference.lines.size(), 42u);
  EXPECT_EQ(reference.lines.back(), 44);
  EXPECT_EQ(reference.categories.at("cat"), (Names{"a, \"x\"", "b", "c"}));
  for (const std::size_t chunk : {1, 2, 3, 5, 7, 16, 64, 333}) {
    const CsvTable t = read(chunk);
    EXPECT_TRUE(at::equal(t.tensors.at("x"), reference.tensors.at("x"))) << "chunk_bytes " << chunk;
    EXPECT_TRUE(at::equal(t.tensors.at("y"), reference.tensors.at("y"))) << "chunk_bytes " << chunk;
    EXPECT_EQ(t.lines, reference.lines) << "chunk_bytes " << chunk;
    EXPECT_EQ(t.categories, reference.categories) << "chunk_bytes " << chunk;
    EXPECT_EQ(t.feature_names, (Names{"id", "v, 1", "cat", "n"})) << "chunk_bytes " << chunk;
  }
}

// --- errors: each names the file, the line, the column and what was expected ---

TEST_F(CsvErrors, MissingFile) {
  CsvOptions o;
  o.path = dir_ / "nope.csv";
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("nope.csv: no such file"));
}

TEST_F(CsvErrors, EmptyFile) {
  for (const char* content : {"", "\xEF\xBB\xBF"}) {
    const CsvOptions o = options("empty.csv", content);
    const Error e = error_from([&] { read_csv(o); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("empty.csv: the file is empty"));
  }
}

TEST_F(CsvErrors, NoHeader) {
  const CsvOptions blank = options("blank.csv", "\n1,2\n");
  EXPECT_THAT(error_from([&] { read_csv(blank); }).message(),
              HasSubstr("blank.csv line 1: no header: the line is blank"));
  const CsvOptions numbers = options("numbers.csv", "1.5,2\n3,4\n");
  const Error e = error_from([&] { read_csv(numbers); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("numbers.csv line 1: no header: the line holds numbers ('1.5')"));
}

TEST_F(CsvErrors, LoneCarriageReturnLineEnds) {
  const CsvOptions o = options("mac.csv", "a,b\r1,2\r3,4\r");
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("mac.csv line 1: a carriage return inside the line: lines end in a lone \\r"));
}

TEST_F(CsvErrors, HeaderOnly) {
  const CsvOptions o = options("h.csv", "a,b\n\n");
  EXPECT_THAT(error_from([&] { read_csv(o); }).message(), HasSubstr("h.csv: no data rows after the header"));
}

TEST_F(CsvErrors, DuplicateHeaderNames) {
  const CsvOptions o = options("d.csv", "a,b,a\n1,2,3\n");
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("d.csv line 1: column 'a' appears twice in the header (fields 1 and 3)"));
}

TEST_F(CsvErrors, UnknownColumnSuggestsTheClosestAndListsColumns) {
  CsvOptions o = options("w.csv", "temp,rain,wind\n1,2,3\n");
  o.features = {"tmep"};
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("w.csv line 1: no column 'tmep' (named in features), did you mean 'temp'?"));
  EXPECT_THAT(e.message(), HasSubstr("the header has 'temp', 'rain', 'wind'"));
  o.features = {};
  o.targets = {"snow"};
  EXPECT_THAT(error_from([&] { read_csv(o); }).message(), HasSubstr("no column 'snow' (named in targets)"));
  o.targets = {};
  o.categorical = {"wnd"};
  EXPECT_THAT(error_from([&] { read_csv(o); }).message(), HasSubstr("no column 'wnd' (named in categorical)"));
}

TEST_F(CsvErrors, WrongFieldCount) {
  const CsvOptions few = options("few.csv", "a,b,c\n1,2,3\n4,5\n");
  const Error e = error_from([&] { read_csv(few); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("few.csv line 3: 2 fields, the header has 3"));
  const CsvOptions many = options("many.csv", "a,b,c\n1,2,3,4\n");
  EXPECT_THAT(error_from([&] { read_csv(many); }).message(), HasSubstr("many.csv line 2: 4 fields, the header has 3"));
  CsvOptions quoted = options("quoted.csv", "a,b,c\n1,\"2,3\"\n");  // the quoted comma is no delimiter
  quoted.categorical = {"b"};
  EXPECT_THAT(error_from([&] { read_csv(quoted); }).message(),
              HasSubstr("quoted.csv line 2: 2 fields, the header has 3"));
}

TEST_F(CsvErrors, TruncatedFile) {
  std::string header, row;
  for (int c = 0; c < 64; ++c) {
    header += fmt::format("{}f{}", c ? "," : "", c);
    row += fmt::format("{}{}.5", c ? "," : "", c);
  }
  std::string content = header + "\n";
  for (int r = 0; r < 16; ++r) content += row + "\n";
  const std::string cut = row.substr(0, row.size() / 2);  // the last line cut short, as by an interrupted copy
  content += cut;
  const auto fields = std::count(cut.begin(), cut.end(), ',') + 1;
  const CsvOptions o = options("x.csv", content);
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr(fmt::format("x.csv line 18: {} fields, the header has 64", fields)));
  EXPECT_THAT(e.message(), HasSubstr("is the file truncated?"));
}

TEST_F(CsvErrors, CorruptNumber) {
  std::string content = "id,temp\n";
  for (int r = 0; r < 7; ++r) content += fmt::format("{},{}.5\n", r, r);
  content += "7,abc\n8,1\n";
  const CsvOptions o = options("data.csv", content);
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("data.csv line 9, column 'temp': 'abc' is not a number"));
  for (const char* bad : {"1.2.3", "12abc", "0x10", "1e", "- 1", "+-1"}) {
    const CsvOptions b = options("bad.csv", fmt::format("a,b\n1,{}\n", bad));
    EXPECT_THAT(error_from([&] { read_csv(b); }).message(),
                HasSubstr(fmt::format("bad.csv line 2, column 'b': '{}' is not a number", bad)));
  }
  const CsvOptions huge = options("huge.csv", "a\n1e39\n");
  EXPECT_THAT(error_from([&] { read_csv(huge); }).message(),
              HasSubstr("huge.csv line 2, column 'a': '1e39' is out of the range of float32"));
}

TEST_F(CsvErrors, IntegerColumnRejectsFractions) {
  CsvOptions o = options("i.csv", "n,f\n1,2\n1.5,3\n");
  o.integer = {"n"};
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("i.csv line 3, column 'n': '1.5' is not an integer"));
  CsvOptions big = options("big.csv", "n\n99999999999999999999\n");
  big.integer = {"n"};
  EXPECT_THAT(error_from([&] { read_csv(big); }).message(),
              HasSubstr("big.csv line 2, column 'n': '99999999999999999999' is out of the range of int64"));
}

TEST_F(CsvErrors, MissingValueUnderMissingError) {
  const CsvOptions o = options("m.csv", "a,b\n1,2\n3,NA\n");
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("m.csv line 3, column 'b': missing value 'NA'"));
  const CsvOptions empty = options("e.csv", "a,b\n1,2\n,4\n");
  EXPECT_THAT(error_from([&] { read_csv(empty); }).message(),
              HasSubstr("e.csv line 3, column 'a': missing value (empty field)"));
  CsvOptions no_tokens = options("n.csv", "a,b\n1,2\n,4\n");
  no_tokens.missing_tokens = {};
  EXPECT_THAT(error_from([&] { read_csv(no_tokens); }).message(),
              HasSubstr("n.csv line 3, column 'a': an empty field is not a number"));
}

TEST_F(CsvErrors, AllRowsDropped) {
  CsvOptions o = options("d.csv", "a,b\nNA,1\n2,\n");
  o.missing = "drop";
  EXPECT_THAT(error_from([&] { read_csv(o); }).message(),
              HasSubstr("d.csv: all 2 rows have missing values and were dropped"));
}

TEST_F(CsvErrors, MeanOfAnEmptyColumn) {
  CsvOptions o = options("d.csv", "a,b\n1,NA\n2,\n");
  o.missing = "mean";
  EXPECT_THAT(error_from([&] { read_csv(o); }).message(), HasSubstr("d.csv: column 'b' has no values"));
}

TEST_F(CsvErrors, UnterminatedQuote) {
  const CsvOptions o = options("q.csv", "a,b\n1,2\n3,\"abc\n");
  const Error e = error_from([&] { read_csv(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("q.csv line 3, column 'b': unterminated quote"));
  // A quoted line break is rejected the same way: the quote is open at the end of its line.
  CsvOptions multiline = options("ml.csv", "a,b\n1,\"two\nlines\"\n");
  multiline.categorical = {"b"};
  EXPECT_THAT(error_from([&] { read_csv(multiline); }).message(),
              HasSubstr("ml.csv line 2, column 'b': unterminated quote"));
  const CsvOptions header = options("h.csv", "a,\"b\n1,2\n");
  EXPECT_THAT(error_from([&] { read_csv(header); }).message(), HasSubstr("h.csv line 1, field 2: unterminated quote"));
}

TEST_F(CsvErrors, TextAfterAClosingQuote) {
  CsvOptions o = options("q.csv", "a,b\n1,\"ab\"c\n");
  o.categorical = {"b"};
  EXPECT_THAT(error_from([&] { read_csv(o); }).message(),
              HasSubstr("q.csv line 2, column 'b': 'c' after the closing quote"));
}

TEST_F(CsvErrors, ConfigProblemsAreConfigErrors) {
  auto config_error = [&](const std::function<void(CsvOptions&)>& change, const std::string& expected) {
    CsvOptions o = options("c.csv", "a,b,c\n1,2,3\n");
    change(o);
    const Error e = error_from([&] { read_csv(o); });
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << expected;
    EXPECT_THAT(e.message(), HasSubstr(expected));
  };
  config_error([](CsvOptions& o) { o.missing = "dorp"; }, "missing is 'dorp' (did you mean 'drop'?)");
  config_error(
      [](CsvOptions& o) {
        o.features = {"a", "b"};
        o.targets = {"b"};
      },
      "column 'b' is in both features and targets");
  config_error(
      [](CsvOptions& o) {
        o.categorical = {"a"};
        o.integer = {"a"};
      },
      "column 'a' is in both categorical and integer");
  config_error([](CsvOptions& o) { o.features = {"a", "a"}; }, "column 'a' is listed twice in features");
  config_error(
      [](CsvOptions& o) {
        o.targets = {"a", "b", "c"};
      },
      "c.csv: no feature columns: every column is a target");
  config_error([](CsvOptions& o) { o.chunk_bytes = 0; }, "chunk_bytes is 0");
  config_error([](CsvOptions& o) { o.delimiter = '"'; }, "delimiter is '\"'");
}

// --- the dataset ---

TEST_F(CsvDataset, NameDescribeAndBatches) {
  CsvOptions o = options("train.csv", "a,b,label\n1,2,0\n\n3,4,1\n5,6,1\n");
  o.targets = {"label"};
  o.integer = {"label"};
  const auto dataset = make_csv_dataset(o);
  const std::string path = o.path.string();
  EXPECT_EQ(dataset->name(), fmt::format("csv {} (3 rows, 2 features)", path));
  EXPECT_EQ(dataset->size(), 3);
  EXPECT_EQ(dataset->describe(1), fmt::format("{} line 4", path));
  FetchContext context;
  const std::vector<std::int64_t> indices = {2, 0};
  const Batch batch = dataset->get_batch(indices, context);
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ(floats(batch.at("x")), (std::vector<float>{5, 6, 1, 2}));
  EXPECT_EQ(longs(batch.at("y")), (Sizes{1, 0}));
}

// The parse speed for W1's shape (200k rows x 64 float columns, ~100 MB). Run by hand:
//   build-csv/tests/bellows_unit_tests --gtest_also_run_disabled_tests --gtest_filter='CsvSpeed*'
class CsvSpeed : public CsvTest {};
TEST_F(CsvSpeed, DISABLED_W1Shape200kBy64) {
  const fs::path path = dir_ / "w1.csv";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::string line;
    for (int c = 0; c < 64; ++c) line += fmt::format("{}col{}", c ? "," : "", c);
    std::fputs((line + "\n").c_str(), f);
    std::uint64_t state = 12345;
    for (int r = 0; r < 200000; ++r) {
      line.clear();
      for (int c = 0; c < 64; ++c) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        const double v = static_cast<double>(state >> 11) / 9007199254740992.0 * 200.0 - 100.0;
        line += fmt::format("{}{:.4f}", c ? "," : "", v);
      }
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), f);
    }
    std::fclose(f);
  }
  CsvOptions o;
  o.path = path;
  o.targets = {"col63"};
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();  // CPU time too: on a busy machine wall time says little
  const CsvTable t = read_csv(o);
  const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mb = static_cast<double>(fs::file_size(path)) / 1e6;
  std::printf("read_csv: %.1f MB, %lld rows x %lld features in %.3f s wall, %.3f s CPU (%.0f MB/s wall)\n", mb,
              static_cast<long long>(t.tensors.at("x").size(0)), static_cast<long long>(t.tensors.at("x").size(1)),
              seconds, cpu_seconds, mb / seconds);
  EXPECT_EQ(t.tensors.at("x").size(0), 200000);
}

}  // namespace
}  // namespace bellows::data
