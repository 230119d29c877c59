// TSV sentence pairs: columns by header name, label order (sorted, numeric, as listed), the sample layout
// [CLS] a [SEP] b [SEP] with segments, longest-first truncation, padded batches with masks, the vocabulary cache,
// validation files and cross-validation folds through build_datasets, and errors naming the file and line.
#include "bellows/data/text_pairs.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bellows/data/build.h"
#include "bellows/data/subset.h"
#include "data/data_config.h"
#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test_support::error_from;

std::vector<std::int64_t> text_longs(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

// A small NLI-like corpus: enough text for a vocabulary of a few dozen pieces.
std::string corpus_rows(int n) {
  const std::vector<std::string> nouns = {"cat", "dog", "farmer", "teacher", "bird", "child"};
  const std::vector<std::string> verbs = {"sleeps", "walks", "sings", "reads", "waits"};
  const std::vector<std::string> labels = {"entailment", "neutral", "contradiction"};
  std::string rows;
  for (int i = 0; i < n; ++i) {
    rows += fmt::format("{}\tthe {} {} in the garden\tthe {} {}\t{}\n", i, nouns[i % 6], verbs[i % 5], nouns[(i + i / 6) % 6],
                        verbs[(i / 2) % 5], labels[i % 3]);
  }
  return rows;
}

class TextPairsTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(testing::TempDir()) / fmt::format("text_pairs_{}_{}", info->name(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }
  TextPairsOptions options(const fs::path& path) {
    TextPairsOptions o;
    o.path = path;
    o.train.vocab_size = 60;
    return o;
  }
  fs::path dir_;
};

TEST_F(TextPairsTest, ReadsColumnsByNameAndSortsLabels) {
  // Columns in another order, an extra column, CRLF line ends, a BOM and a blank line.
  const fs::path p = write("pairs.tsv", "\xEF\xBB\xBFid\tlabel\thypothesis\tpremise\r\n1\tneutral\ta b\tthe cat\r\n\r\n"
                                        "2\tcontradiction\tc d\tthe dog\r\n3\tentailment\te f\tthe bird\r\n4\tneutral\tg\th\r\n");
  TextPairsDataset d(options(p));
  EXPECT_EQ(d.size(), 4);
  EXPECT_THAT(d.label_names(), ElementsAre("contradiction", "entailment", "neutral"));  // byte-wise sorted
  EXPECT_EQ(d.num_classes(), 3);
  EXPECT_THAT(text_longs(d.class_labels()), ElementsAre(2, 0, 1, 2));
  EXPECT_EQ(d.describe(1), p.string() + " line 4");  // the blank line 3 is skipped
  EXPECT_THAT(d.name(), HasSubstr("4 pairs, 3 classes"));
  // The premise column is "premise" although it comes last.
  FetchContext context;
  const Example e = d.get(2, context);
  const auto x = text_longs(e.at("x"));
  const auto bird = d.tokenizer().encode("the bird");
  EXPECT_EQ(std::vector<std::int64_t>(x.begin() + 1, x.begin() + 1 + static_cast<std::ptrdiff_t>(bird.size())), bird);
}

TEST_F(TextPairsTest, LabelOrderAsListedOrNumeric) {
  const fs::path p = write("pairs.tsv", "premise\thypothesis\tlabel\na\tb\tneutral\nc\td\tentailment\ne\tf\tcontradiction\n");
  TextPairsOptions o = options(p);
  o.labels = {"entailment", "neutral", "contradiction"};
  TextPairsDataset listed(o);
  EXPECT_THAT(text_longs(listed.class_labels()), ElementsAre(1, 0, 2));
  // Integer labels sort as numbers: "2" before "10".
  const fs::path n = write("numeric.tsv", "premise\thypothesis\tlabel\na\tb\t10\nc\td\t2\ne\tf\t1\n");
  TextPairsDataset numeric(options(n));
  EXPECT_THAT(numeric.label_names(), ElementsAre("1", "2", "10"));
  EXPECT_THAT(text_longs(numeric.class_labels()), ElementsAre(2, 1, 0));
}

TEST_F(TextPairsTest, SampleIsClsPremiseSepHypothesisSepWithSegments) {
  const fs::path p = write("pairs.tsv", "idx\tpremise\thypothesis\tlabel\n" + corpus_rows(60));
  TextPairsDataset d(options(p));
  const Tokenizer& tok = d.tokenizer();
  FetchContext context;
  const Example e = d.get(7, context);  // row 7: "the dog sings in the garden" / "the farmer reads", neutral
  const auto a = tok.encode("the dog sings in the garden");
  const auto b = tok.encode("the farmer reads");
  std::vector<std::int64_t> expected = {tok.cls_id()};
  expected.insert(expected.end(), a.begin(), a.end());
  expected.push_back(tok.sep_id());
  expected.insert(expected.end(), b.begin(), b.end());
  expected.push_back(tok.sep_id());
  EXPECT_EQ(text_longs(e.at("x")), expected);
  std::vector<std::int64_t> segments(a.size() + 2, 0);
  segments.resize(expected.size(), 1);
  EXPECT_EQ(text_longs(e.at("segments")), segments);
  EXPECT_EQ(e.at("y").dim(), 0);
  EXPECT_EQ(e.at("y").item<std::int64_t>(), d.class_labels()[7].item<std::int64_t>());
  EXPECT_EQ(d.label_names()[static_cast<std::size_t>(e.at("y").item<std::int64_t>())], "neutral");  // 7 % 3 == 1
}

TEST(TextPairsTruncation, LongestFirstMatchesTokenByTokenRemoval) {
  // The reference: take one token from the longer part, from the hypothesis on a tie.
  for (std::int64_t a = 0; a < 25; ++a) {
    for (std::int64_t b = 0; b < 25; ++b) {
      for (std::int64_t max_len = 3; max_len < 35; ++max_len) {
        std::int64_t ra = a, rb = b;
        while (ra + rb > max_len - 3) (ra > rb ? ra : rb) -= 1;
        EXPECT_EQ(truncate_longest_first(a, b, max_len), std::make_pair(ra, rb)) << a << " " << b << " " << max_len;
      }
    }
  }
  EXPECT_EQ(truncate_longest_first(100, 4, 16), std::make_pair(std::int64_t{9}, std::int64_t{4}));
  EXPECT_EQ(truncate_longest_first(10, 10, 16), std::make_pair(std::int64_t{7}, std::int64_t{6}));
}

TEST_F(TextPairsTest, TruncatesLongestFirstToMaxLen) {
  const std::string long_premise = "the cat sleeps in the garden and the dog walks near the river while the bird sings";
  const fs::path p = write("pairs.tsv", "idx\tpremise\thypothesis\tlabel\nx\t" + long_premise + "\tthe cat sleeps\tentailment\n" +
                                            corpus_rows(40));
  TextPairsOptions o = options(p);
  o.max_len = 12;
  TextPairsDataset d(o);
  EXPECT_GE(d.truncated(), 1);
  const Tokenizer& tok = d.tokenizer();
  const auto a = tok.encode(long_premise), b = tok.encode("the cat sleeps");
  const auto [la, lb] = truncate_longest_first(static_cast<std::int64_t>(a.size()), static_cast<std::int64_t>(b.size()), 12);
  ASSERT_EQ(la + lb + 3, 12);
  FetchContext context;
  const auto x = text_longs(d.get(0, context).at("x"));
  ASSERT_EQ(x.size(), 12u);
  // The kept tokens are the beginnings of both sentences.
  EXPECT_EQ(std::vector<std::int64_t>(x.begin() + 1, x.begin() + 1 + la), std::vector<std::int64_t>(a.begin(), a.begin() + la));
  EXPECT_EQ(x[static_cast<std::size_t>(la + 1)], tok.sep_id());
  EXPECT_EQ(std::vector<std::int64_t>(x.begin() + 2 + la, x.end() - 1), std::vector<std::int64_t>(b.begin(), b.begin() + lb));
  EXPECT_EQ(x.back(), tok.sep_id());
}

TEST_F(TextPairsTest, BatchPadsWithThePadIdAndAddsMasks) {
  const fs::path p = write("pairs.tsv", "premise\thypothesis\tlabel\nthe cat sleeps in the garden\tthe cat sleeps\tentailment\n"
                                        "a dog\tthe bird\tneutral\n" + std::string("the farmer reads\tthe child sings\tcontradiction\n"));
  TextPairsDataset d(options(p));
  FetchContext context;
  const std::vector<std::int64_t> idx = {1, 0};
  const Batch batch = d.get_batch(idx, context);
  EXPECT_EQ(batch.size, 2);
  const std::int64_t n1 = d.get(1, context).at("x").size(0), n0 = d.get(0, context).at("x").size(0);
  ASSERT_LT(n1, n0);
  EXPECT_EQ(batch.at("x").sizes(), (std::vector<std::int64_t>{2, n0}));
  EXPECT_EQ(batch.at("x_mask").scalar_type(), at::kBool);
  EXPECT_THAT(text_longs(batch.at("x_lengths")), ElementsAre(n1, n0));
  EXPECT_EQ(text_longs(batch.at("x_mask").sum(1)), text_longs(batch.at("x_lengths")));
  const auto row = text_longs(batch.at("x")[0]);
  for (std::int64_t t = n1; t < n0; ++t) EXPECT_EQ(row[static_cast<std::size_t>(t)], d.pad_id());
  EXPECT_EQ(text_longs(batch.at("x")[0].narrow(0, 0, n1)), text_longs(d.get(1, context).at("x")));
  EXPECT_EQ(text_longs(batch.at("segments")[0].narrow(0, n1, n0 - n1)), std::vector<std::int64_t>(static_cast<std::size_t>(n0 - n1), 0));
  EXPECT_THAT(text_longs(batch.at("y")), ElementsAre(2, 1));  // neutral, entailment in sorted order
}

TEST_F(TextPairsTest, ErrorsNameTheFileAndLine) {
  const std::string header = "premise\thypothesis\tlabel\n";
  Error e = error_from([&] { TextPairsDataset(options(write("cols.tsv", header + "a\tb\tneutral\nc\td\n"))); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("cols.tsv line 3: 2 tab-separated fields, the header has 3"));

  TextPairsOptions listed = options(write("labels.tsv", header + "a\tb\tneutral\nc\td\tentailmnt\n"));
  listed.labels = {"entailment", "neutral", "contradiction"};
  e = error_from([&] { TextPairsDataset{listed}; });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("labels.tsv line 3: unknown label 'entailmnt'"));
  EXPECT_THAT(e.hint(), HasSubstr("did you mean 'entailment'"));

  e = error_from([&] { TextPairsDataset(options(write("empty.tsv", header + "\n"))); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("empty.tsv: a header but no rows"));

  e = error_from([&] { TextPairsDataset(options(write("nothing.tsv", ""))); });
  EXPECT_THAT(e.message(), HasSubstr("nothing.tsv is empty"));

  e = error_from([&] { TextPairsDataset(options(write("nolabel.tsv", header + "a\tb\t\n"))); });
  EXPECT_THAT(e.message(), HasSubstr("nolabel.tsv line 2: empty label"));

  e = error_from([&] { TextPairsDataset(options(write("names.tsv", "sentence1\tsentence2\tgold_label\na\tb\tc\n"))); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("names.tsv line 1: no column 'premise' (data.text.premise); the header has sentence1, sentence2, gold_label"));

  e = error_from([&] { TextPairsDataset(options(dir_ / "absent.tsv")); });
  EXPECT_THAT(e.message(), HasSubstr("absent.tsv"));
}

TEST_F(TextPairsTest, TrainedVocabularyIsCachedBesideTheDataAndKeyedByTheText) {
  const fs::path p = write("pairs.tsv", "idx\tpremise\thypothesis\tlabel\n" + corpus_rows(60));
  TextPairsDataset first(options(p));
  EXPECT_TRUE(first.tokenizer_trained());
  EXPECT_EQ(first.tokenizer_path(), dir_ / "pairs.tsv.spm-unigram-60.model");
  EXPECT_TRUE(fs::exists(dir_ / "pairs.tsv.spm-unigram-60.model.key"));
  TextPairsDataset second(options(p));
  EXPECT_FALSE(second.tokenizer_trained());
  EXPECT_EQ(second.tokenizer().serialized(), first.tokenizer().serialized());
  // Other text: the key no longer matches, the vocabulary is trained again.
  write("pairs.tsv", "idx\tpremise\thypothesis\tlabel\n" + corpus_rows(45));
  TextPairsDataset third(options(p));
  EXPECT_TRUE(third.tokenizer_trained());
  // A named cache location, and a named .model file.
  TextPairsOptions o = options(p);
  o.tokenizer_cache = dir_ / "sub" / "vocab.model";
  TextPairsDataset cached(o);
  EXPECT_EQ(cached.tokenizer_path(), dir_ / "sub" / "vocab.model");
  TextPairsOptions named = options(p);
  named.tokenizer = dir_ / "sub" / "vocab.model";
  TextPairsDataset loaded(named);
  EXPECT_FALSE(loaded.tokenizer_trained());
  EXPECT_EQ(loaded.tokenizer().serialized(), cached.tokenizer().serialized());
}

TEST_F(TextPairsTest, BuildSharesTheVocabularyWithValidationAndSplitsFolds) {
  const fs::path train = write("train.tsv", "idx\tpremise\thypothesis\tlabel\n" + corpus_rows(60));
  const fs::path val = write("val.tsv", "premise\thypothesis\tlabel\nthe bird waits\tthe bird sleeps\tneutral\n");
  const std::string base = fmt::format("data: {{source: text_pairs, path: '{}', text: {{vocab_size: 60}}", train.string());
  DataSplits splits = build_datasets(test_support::data_config(fmt::format("{}, val_path: '{}'}}\n", base, val.string())), 0);
  const auto* t = find_text_pairs(*splits.train);
  const auto* v = find_text_pairs(*splits.val);
  ASSERT_TRUE(t && v);
  EXPECT_EQ(&t->tokenizer(), &v->tokenizer());
  EXPECT_EQ(v->label_names(), t->label_names());  // the validation file alone has only "neutral"
  EXPECT_THAT(text_longs(v->class_labels()), ElementsAre(2));

  // Fold 1 of 3 validates, the others train; the dataset under the subsets is still found.
  splits = build_datasets(test_support::data_config(base + ", cv: {folds: 3, fold: 1}}\n"), 0);
  EXPECT_EQ(splits.train->size(), 40);
  EXPECT_EQ(splits.val->size(), 20);
  ASSERT_NE(find_text_pairs(*splits.train), nullptr);
  EXPECT_EQ(find_text_pairs(*splits.train)->num_classes(), 3);
  // Stratified: every class has 20 rows, so 20/3 of each per fold, within one.
  const at::Tensor counts = at::bincount(splits.val->class_labels());
  EXPECT_THAT(text_longs(counts), ElementsAre(::testing::AllOf(::testing::Ge(6), ::testing::Le(7)), ::testing::AllOf(::testing::Ge(6), ::testing::Le(7)),
                                        ::testing::AllOf(::testing::Ge(6), ::testing::Le(7))));
  const config::Config fold3 = test_support::data_config(base + ", cv: {folds: 3, fold: 3}}\n");
  const Error e = error_from([&] { build_datasets(fold3, 0); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("data.cv.fold is 3, outside [0, 3)"));
}

}  // namespace
}  // namespace bellows::data
