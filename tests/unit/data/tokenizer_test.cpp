// The SentencePiece tokenizer: training a vocabulary on a small corpus (special ids, determinism), encoding and
// decoding round trips, saving and loading .model files, and the errors for missing, bad and empty inputs.
#include "bellows/data/tokenizer.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Logging.h>

#include "bellows/util/error.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/sanitizers.h"  // defines: kSanitizedBuild
#include "test_util.h"
#include "test_paths.h"

C10_DECLARE_bool(caffe2_use_fatal_for_enforce);

namespace bellows::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test_support::error_from;
using test_support::TempDir;

// Sentences from a small template grammar: enough repetition for subword pieces to form.
std::vector<std::string> corpus() {
  const std::vector<std::string> adjectives = {"red", "small", "old", "happy", "quiet"};
  const std::vector<std::string> nouns = {"cat", "dog", "farmer", "teacher", "bird"};
  const std::vector<std::string> verbs = {"sleeps", "walks", "sings", "reads", "waits"};
  const std::vector<std::string> places = {"in the kitchen", "near the river", "at the market", "under the tree"};
  std::vector<std::string> out;
  for (std::size_t i = 0; i < 300; ++i) {
    out.push_back("the " + adjectives[i % 5] + " " + nouns[(i / 5) % 5] + " " + verbs[(i / 25) % 5] + " " + places[(i / 3) % 4]);
  }
  return out;
}

TEST(Tokenizer, TrainsOnASmallCorpusAndRoundTrips) {
  TokenizerTrainOptions o;
  o.vocab_size = 200;
  o.model_type = "bpe";  // SentencePiece's unigram keeps few pieces on so small a corpus (46 here); BPE fills 200
  const Tokenizer tok = Tokenizer::from_serialized(Tokenizer::train(corpus(), o), "test corpus");
  // The special pieces bellows asks for, at fixed ids.
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.cls_id(), 2);
  EXPECT_EQ(tok.sep_id(), 3);
  EXPECT_EQ(tok.id_of("[CLS]"), 2);
  EXPECT_EQ(tok.id_of("[SEP]"), 3);
  EXPECT_EQ(tok.id_of("no-such-piece"), -1);
  EXPECT_EQ(tok.vocab_size(), 200);
  for (const std::string text : {"the happy farmer reads under the tree", "the quiet bird waits near the river"}) {
    const auto ids = tok.encode(text);
    ASSERT_FALSE(ids.empty());
    // Text never encodes to the control pieces, padding or the unknown id (every character is covered).
    for (const auto id : ids) {
      EXPECT_GE(id, 4) << text;
      EXPECT_LT(id, tok.vocab_size()) << text;
    }
    // Frequent words are single pieces: one id per word.
    EXPECT_EQ(ids.size(), 7u) << text;
    EXPECT_EQ(tok.decode(ids), text);
  }
  // Frequent words become single pieces ("\xe2\x96\x81" is SentencePiece's word-start mark).
  EXPECT_THAT(tok.pieces("the tree"), ElementsAre("\xe2\x96\x81the", "\xe2\x96\x81tree"));
  // Control and padding ids decode to nothing.
  auto ids = tok.encode("the red cat");
  ids.insert(ids.begin(), tok.cls_id());
  ids.push_back(tok.sep_id());
  ids.push_back(tok.pad_id());
  EXPECT_EQ(tok.decode(ids), "the red cat");
  // An unseen character becomes the unknown id.
  EXPECT_THAT(tok.encode("the cat #"), ::testing::Contains(tok.unk_id()));
}

TEST(Tokenizer, UnigramVocabularyRoundTrips) {
  TokenizerTrainOptions o;
  o.vocab_size = 80;
  const Tokenizer tok = Tokenizer::from_serialized(Tokenizer::train(corpus(), o), "test corpus");
  EXPECT_EQ(tok.cls_id(), 2);
  EXPECT_EQ(tok.sep_id(), 3);
  EXPECT_GT(tok.vocab_size(), 30);  // the corpus's characters and some pieces: unigram stops below 80 here
  EXPECT_LE(tok.vocab_size(), 80);
  const std::string text = "the old teacher sings at the market";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_LT(tok.encode(text).size(), text.size());
}

TEST(Tokenizer, TrainingIsDeterministic) {
  TokenizerTrainOptions o;
  o.vocab_size = 64;
  EXPECT_EQ(Tokenizer::train(corpus(), o), Tokenizer::train(corpus(), o));
  o.model_type = "bpe";
  const std::string bpe = Tokenizer::train(corpus(), o);
  EXPECT_EQ(bpe, Tokenizer::train(corpus(), o));
  const Tokenizer tok = Tokenizer::from_serialized(bpe, "bpe");
  EXPECT_EQ(tok.decode(tok.encode("the old dog sings at the market")), "the old dog sings at the market");
}

TEST(Tokenizer, SavesAndLoadsModelFiles) {
  const TempDir temp("tokenizer_test");
  const fs::path& dir = temp.path();
  TokenizerTrainOptions o;
  o.vocab_size = 64;
  const Tokenizer trained = Tokenizer::from_serialized(Tokenizer::train(corpus(), o), "memory");
  trained.save(dir / "vocab.model");
  EXPECT_FALSE(fs::exists(dir / "vocab.model.tmp"));
  const Tokenizer loaded = Tokenizer::load(dir / "vocab.model");
  EXPECT_EQ(loaded.origin(), (dir / "vocab.model").string());
  EXPECT_EQ(loaded.serialized(), trained.serialized());
  EXPECT_EQ(loaded.encode("the small teacher walks"), trained.encode("the small teacher walks"));
  EXPECT_EQ(loaded.vocab_size(), trained.vocab_size());
}

TEST(Tokenizer, ErrorsNameTheFileOrTheProblem) {
  const TempDir temp("tokenizer_test");
  const fs::path& dir = temp.path();
  Error e = error_from([&] { Tokenizer::load(dir / "missing.model"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("missing.model"));
  EXPECT_THAT(e.hint(), HasSubstr("data.text.tokenizer"));

  std::ofstream(dir / "garbage.model") << "this is not a protobuf";
  e = error_from([&] { Tokenizer::load(dir / "garbage.model"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("garbage.model is not a SentencePiece model"));

  e = error_from([&] { Tokenizer::train({"", ""}, TokenizerTrainOptions{}); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("no text"));

  TokenizerTrainOptions wrong;
  wrong.model_type = "wordpiece";
  e = error_from([&] { Tokenizer::train(corpus(), wrong); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("wordpiece"));
}

// Found by fuzzing (tests/data/fuzz/README.md): a model on which SentencePiece's trie build throws (darts_clone:
// "zero-length key") instead of returning a status; the exception escaped as an internal error.
TEST(Tokenizer, AModelOnWhichSentencePieceThrowsIsADataError) {
  const fs::path path = fs::path(BELLOWS_TEST_DATA_DIR) / "fuzz" / "spm_zero_length_key.model";
  const Error e = error_from([&] { Tokenizer::load(path); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("spm_zero_length_key.model is not a SentencePiece model: SentencePiece: "));
}

// Regression: linked into the process, Debian's libsentencepiece bound its global FLAGS_minloglevel (a 32-byte
// flag object) to libc10's 4-byte int of that name and wrote over libc10's flags, turning on
// FLAGS_caffe2_use_fatal_for_enforce: a failed CPU allocation then aborted the process instead of throwing. The
// tokenizer now loads SentencePiece as a module with RTLD_DEEPBIND (data/sentencepiece/module.h).
TEST(Tokenizer, SentencePieceLeavesLibTorchsFlagsAlone) {
  if (util::kSanitizedBuild) {  // GCC's __SANITIZE_ADDRESS__ or Clang's __has_feature (util/sanitizers.h)
    GTEST_SKIP() << "sanitizer builds open the SentencePiece module without RTLD_DEEPBIND (their runtimes refuse it), so the "
                    "collision this test guards against is back there";
  }
  TokenizerTrainOptions o;
  o.vocab_size = 50;
  o.model_type = "bpe";
  const Tokenizer tok = Tokenizer::from_serialized(Tokenizer::train(corpus(), o), "test corpus");  // loaded and trained
  EXPECT_FALSE(tok.encode("the red cat").empty());
  EXPECT_FALSE(FLAGS_caffe2_use_fatal_for_enforce);
  // So a failed allocation (64 TiB) is an exception the CLI reports as out of memory, not an abort.
  try {
    at::empty({std::int64_t{1} << 44}, at::kFloat);
    FAIL() << "64 TiB were allocated";
  } catch (...) {
    const ExceptionReport r = report_current_exception();
    EXPECT_EQ(r.kind, ErrorKind::kResource) << r.message;
    EXPECT_TRUE(r.out_of_memory) << r.message;
  }
}

}  // namespace
}  // namespace bellows::data
