// SentencePiece tokenizer; see tokenizer.h. libsentencepiece is a private dependency: its headers appear only
// here, behind Tokenizer::Impl.
#include "bellows/data/tokenizer.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "bellows/util/atomic_file.h"  // defines: write_file_atomically
#include "bellows/util/check.h"

namespace bellows::data {
namespace fs = std::filesystem;

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
  std::string serialized;
};

namespace {

constexpr const char* kCls = "[CLS]";
constexpr const char* kSep = "[SEP]";

// Feeds the trainer from memory, so no temporary corpus file is written.
class VectorIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& sentences) : sentences_(sentences) { skip_empty(); }
  bool done() const override { return i_ >= sentences_.size(); }
  void Next() override {
    ++i_;
    skip_empty();
  }
  const std::string& value() const override { return sentences_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void skip_empty() {
    while (i_ < sentences_.size() && sentences_[i_].empty()) ++i_;
  }
  const std::vector<std::string>& sentences_;
  std::size_t i_ = 0;
};

// SentencePiece's trainer and its random generator are process-wide; one training at a time.
std::mutex& train_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl, std::string origin) : impl_(std::move(impl)), origin_(std::move(origin)) {
  const auto& sp = impl_->processor;
  unk_ = sp.unk_id();
  pad_ = sp.pad_id() >= 0 ? sp.pad_id() : unk_;
  cls_ = id_of(kCls);
  sep_ = id_of(kSep);
  if (cls_ < 0) cls_ = sp.bos_id();
  if (sep_ < 0) sep_ = sp.eos_id();
  BELLOWS_CHECK_DATA(cls_ >= 0 && sep_ >= 0,
                     fmt::format("tokenizer {} has neither [CLS]/[SEP] pieces nor <s>/</s> (bos/eos) to mark sentence pairs", origin_),
                     "train the vocabulary with --control_symbols=[CLS],[SEP] (or with bos/eos), or let bellows train one "
                     "(leave data.text.tokenizer empty)");
}

Tokenizer Tokenizer::from_serialized(std::string serialized, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  const auto status = impl->processor.LoadFromSerializedProto(serialized);
  BELLOWS_CHECK_DATA(status.ok(), fmt::format("{} is not a SentencePiece model: {}", origin, status.ToString()),
                     "name a .model file written by SentencePiece (spm_train, or a vocabulary bellows trained)");
  impl->serialized = std::move(serialized);
  return Tokenizer(std::move(impl), origin);
}

Tokenizer Tokenizer::load(const fs::path& model_file) {
  std::ifstream in(model_file, std::ios::binary);
  BELLOWS_CHECK_DATA(in.good(), fmt::format("cannot open tokenizer model {}: {}", model_file.string(), std::strerror(errno)),
                     "check data.text.tokenizer; leave it empty to train a vocabulary on the data");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return from_serialized(bytes.str(), model_file.string());
}

std::string Tokenizer::train(const std::vector<std::string>& sentences, const TokenizerTrainOptions& o) {
  BELLOWS_CHECK_CONFIG(o.model_type == "unigram" || o.model_type == "bpe",
                       fmt::format("tokenizer model type '{}' is not known", o.model_type), "use unigram or bpe");
  BELLOWS_CHECK_CONFIG(o.vocab_size >= 8, fmt::format("vocabulary size {} is too small", o.vocab_size),
                       "set data.text.vocab_size to 8 or more (a few thousand for real text)");
  std::size_t chars = 0;
  for (const auto& s : sentences) chars += s.size();
  BELLOWS_CHECK_DATA(chars > 0, "the tokenizer's training corpus has no text", "give the data some non-empty sentences");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", fmt::format("{}", o.character_coverage)},
      {"hard_vocab_limit", "false"},  // a small corpus gives fewer pieces instead of an error
      {"pad_id", "0"},
      {"unk_id", "1"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"control_symbols", fmt::format("{},{}", kCls, kSep)},  // ids 2 and 3
      {"num_threads", "1"},                                    // the same pieces on every machine
      {"input_sentence_size", "0"},                            // every sentence, no sampling
      {"shuffle_input_sentence", "false"},
      {"minloglevel", "2"},  // SentencePiece logs every training phase to stderr otherwise
  };
  std::lock_guard<std::mutex> lock(train_mutex());
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(o.seed));
  VectorIterator it(sentences);
  std::string serialized;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &serialized);
  BELLOWS_CHECK_DATA(status.ok(), fmt::format("training the SentencePiece vocabulary failed: {}", status.ToString()),
                     "check the corpus and data.text.vocab_size (a tiny corpus needs a small vocabulary)");
  return serialized;
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  BELLOWS_CHECK_DATA(status.ok(), fmt::format("tokenizer {} cannot encode '{}': {}", origin_, text, status.ToString()),
                     "check the text's encoding (UTF-8 expected)");
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  const int n = impl_->processor.GetPieceSize();
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (const std::int64_t id : ids) {
    BELLOWS_CHECK_DATA(id >= 0 && id < n, fmt::format("token id {} outside the vocabulary of {} ({} pieces)", id, origin_, n),
                       "decode ids produced by this tokenizer");
    narrow.push_back(static_cast<int>(id));
  }
  std::string text;
  const auto status = impl_->processor.Decode(narrow, &text);
  BELLOWS_CHECK_DATA(status.ok(), fmt::format("tokenizer {} cannot decode: {}", origin_, status.ToString()), "report this bug");
  return text;
}

std::vector<std::string> Tokenizer::pieces(std::string_view text) const {
  std::vector<std::string> out;
  const auto status = impl_->processor.Encode(text, &out);
  BELLOWS_CHECK_DATA(status.ok(), fmt::format("tokenizer {} cannot encode '{}': {}", origin_, text, status.ToString()),
                     "check the text's encoding (UTF-8 expected)");
  return out;
}

std::int64_t Tokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::int64_t Tokenizer::id_of(std::string_view piece) const {
  const auto& sp = impl_->processor;
  const int id = sp.PieceToId(piece);
  return id == sp.unk_id() && piece != sp.IdToPiece(id) ? -1 : id;
}

const std::string& Tokenizer::serialized() const { return impl_->serialized; }

void Tokenizer::save(const fs::path& path) const {
  write_file_atomically(path, impl_->serialized);
}

}  // namespace bellows::data
