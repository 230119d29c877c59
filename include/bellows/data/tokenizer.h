// Subword tokenization for text data (seed 004): a thin wrapper over SentencePiece (Debian's libsentencepiece),
// which encodes text into vocabulary ids, decodes them back, and trains a vocabulary (unigram or BPE) on a
// corpus. A vocabulary that bellows trains has the pieces the text-pair classifier needs: <pad> = 0, <unk> = 1,
// [CLS] = 2, [SEP] = 3 (control symbols: encoding text never produces them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::data {

struct TokenizerTrainOptions {
  std::int64_t vocab_size = 8000;        // an upper bound: a small corpus may give fewer pieces
  std::string model_type = "unigram";    // unigram | bpe
  double character_coverage = 1.0;       // share of characters covered by the vocabulary (rarer ones: <unk>)
  std::uint64_t seed = 0;                // SentencePiece's random generator (training is single-threaded)
};

class Tokenizer {
 public:
  // A SentencePiece .model file (e.g. one that sentencepiece's spm_train or Python wrote). kData error naming
  // the file when it is missing or not a SentencePiece model.
  static Tokenizer load(const std::filesystem::path& model_file);
  // A serialized model (the bytes of a .model file); `origin` names it in errors.
  static Tokenizer from_serialized(std::string serialized, const std::string& origin);
  // Trains a vocabulary on `sentences` and returns the serialized model. Single-threaded and seeded, so the
  // same sentences and options give the same bytes. kData error when there is no text to learn from.
  static std::string train(const std::vector<std::string>& sentences, const TokenizerTrainOptions& options);

  // Ids of the text's pieces (no [CLS]/[SEP]). Thread-safe.
  std::vector<std::int64_t> encode(std::string_view text) const;
  // The text of `ids` (control pieces such as [CLS] and <pad> decode to nothing).
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::vector<std::string> pieces(std::string_view text) const;  // the pieces' text, for inspection

  std::int64_t vocab_size() const;
  // The id of `piece`, or -1 when the vocabulary does not have it.
  std::int64_t id_of(std::string_view piece) const;
  std::int64_t pad_id() const { return pad_; }  // <pad>; the unknown id when the model defines no pad
  std::int64_t unk_id() const { return unk_; }
  // The sentence-pair markers: [CLS]/[SEP] when the vocabulary has them, else its <s>/</s> (bos/eos); a
  // model with neither is a kData error at load time.
  std::int64_t cls_id() const { return cls_; }
  std::int64_t sep_id() const { return sep_; }

  const std::string& serialized() const;  // the .model file's bytes
  const std::string& origin() const { return origin_; }
  // Writes the .model file durably and atomically (util/atomic_file.h). kResource error when it cannot.
  void save(const std::filesystem::path& path) const;

 private:
  struct Impl;
  Tokenizer(std::shared_ptr<const Impl> impl, std::string origin);
  std::shared_ptr<const Impl> impl_;
  std::string origin_;
  std::int64_t pad_ = 0, unk_ = 0, cls_ = 0, sep_ = 0;
};

}  // namespace bellows::data
