// Sentence pairs from a TSV file (seed 004: NLI premise/hypothesis/label) as token-id samples for the
// text-pair classifier. Columns are chosen by header name; labels map to class indices; the text is tokenized
// once, when the file is read, with a SentencePiece vocabulary that is loaded from a .model file or trained on
// the file's text and cached.
//
// Sample i: "x" int64 [L] = [CLS] premise [SEP] hypothesis [SEP], truncated longest-first to max_len (tokens are
// taken from the end of the longer sentence, from the hypothesis on a tie); "segments" int64 [L], 0 up to and
// including the first [SEP], 1 after it; "y" int64 [] the label index. A batch pads "x" with the vocabulary's pad
// id and "segments" with 0 to the longest sample, and adds "x_mask" (bool [B, L], true at real tokens) and
// "x_lengths" (int64 [B]).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bellows/data/dataset.h"    // defines: Dataset
#include "bellows/data/tokenizer.h"  // defines: Tokenizer, TokenizerTrainOptions

namespace bellows::data {

struct TextPairsOptions {
  std::filesystem::path path;                // tab-separated, a header line naming the columns
  std::string premise_column = "premise";
  std::string hypothesis_column = "hypothesis";
  std::string label_column = "label";
  // Label values in class-index order; empty: the distinct values of the file, sorted (numerically when all
  // are integers, else byte-wise). A value not listed is a kData error naming the file and line.
  std::vector<std::string> labels;
  std::int64_t max_len = 128;                // tokens per sample, [CLS] and [SEP]s included (>= 3)
  // The vocabulary, in order of precedence: `vocabulary` (shared: a validation file uses the training file's),
  // the .model file `tokenizer`, or one trained on this file's premise and hypothesis text with `train` and
  // cached at `tokenizer_cache` (empty: "<path>.spm-<type>-<vocab_size>.model" beside the data, or under
  // $BELLOWS_CACHE/tokenizers/ (default ~/.cache/bellows) when that folder is not writable). A cached vocabulary
  // is reused only when its key file "<model>.key" matches the text and the options; otherwise it is retrained.
  std::shared_ptr<const Tokenizer> vocabulary;
  std::filesystem::path tokenizer;
  std::filesystem::path tokenizer_cache;
  TokenizerTrainOptions train;
};

class TextPairsDataset final : public Dataset {
 public:
  // Reads and tokenizes the whole file. kData errors name the file and line (a row whose field count differs
  // from the header's, an empty or unknown label, a file without rows); a missing column is a kData error
  // naming the columns there are.
  explicit TextPairsDataset(const TextPairsOptions& options);

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  Example get(std::int64_t index, FetchContext& context) const override;
  Batch get_batch(std::span<const std::int64_t> indices, FetchContext& context) const override;
  std::string describe(std::int64_t index) const override;
  std::string name() const override;
  at::Tensor class_labels() const override;  // int64 [size()]

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const Tokenizer> shared_tokenizer() const { return tokenizer_; }
  // Where the vocabulary came from or was cached ("" when it was given in memory or could not be cached).
  const std::filesystem::path& tokenizer_path() const { return tokenizer_path_; }
  bool tokenizer_trained() const { return trained_; }  // trained by this constructor (not loaded from a cache)
  const std::vector<std::string>& label_names() const { return label_names_; }
  std::int64_t num_classes() const { return static_cast<std::int64_t>(label_names_.size()); }
  std::int64_t vocab_size() const { return tokenizer_->vocab_size(); }
  std::int64_t pad_id() const { return tokenizer_->pad_id(); }
  std::int64_t max_len() const { return options_.max_len; }
  std::int64_t truncated() const { return truncated_; }  // samples longer than max_len

 private:
  TextPairsOptions options_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::filesystem::path tokenizer_path_;
  bool trained_ = false;
  std::vector<std::string> label_names_;
  std::vector<std::int32_t> tokens_;      // every row's premise then hypothesis ids, back to back
  std::vector<std::int64_t> offsets_;     // row r: premise [offsets_[2r], offsets_[2r+1]), hypothesis up to offsets_[2r+2]
  std::vector<std::int64_t> labels_;
  std::vector<std::int64_t> lines_;       // 1-based file line of each row
  std::int64_t truncated_ = 0;
};

// Lengths of the premise and hypothesis parts after longest-first truncation to `max_len` tokens in total
// ([CLS] and two [SEP] included): one token at a time from the longer part, from the hypothesis on a tie.
std::pair<std::int64_t, std::int64_t> truncate_longest_first(std::int64_t premise, std::int64_t hypothesis, std::int64_t max_len);

// The TextPairsDataset under `dataset`, looking through train/validation/fold subsets; null when there is none.
const TextPairsDataset* find_text_pairs(const Dataset& dataset);

}  // namespace bellows::data
