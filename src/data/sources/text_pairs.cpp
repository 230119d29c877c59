// data.source: text_pairs -- tab-separated sentence pairs with labels, tokenised with a SentencePiece
// vocabulary (given, or trained on the corpus and cached). Its vocabulary and labels are the text model's facts.
#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/config/paths.h"    // defines: check_path_exists
#include "bellows/data/source_registry.h"
#include "bellows/data/text_pairs.h"

namespace bellows::data {
namespace {

// The data.text.* keys of TextPairsOptions (and its tokenizer training), bound once (config/binding.h).
const config::Binding<TextPairsOptions>& text_pairs_binding() {
  using O = TextPairsOptions;
  using T = TokenizerTrainOptions;
  return config::bound<O>("data.text.", [](config::Binding<O>& b) {
    b.key("premise", &O::premise_column, "text_pairs: column of the first sentence");
    b.key("hypothesis", &O::hypothesis_column, "text_pairs: column of the second sentence");
    b.key("label", &O::label_column, "text_pairs: label column");
    b.key("labels", &O::labels, "text_pairs: labels in class order (empty: the file's, sorted)");
    b.key("max_len", &O::max_len, "text_pairs: tokens per sample with [CLS] and [SEP]s (longest-first truncation)").min(3);
    b.key("tokenizer", &O::tokenizer, "text_pairs: SentencePiece .model file (empty: train one on data.path's text)")
        .file_path();
    b.key("tokenizer_cache", &O::tokenizer_cache, "text_pairs: where a trained vocabulary is cached (empty: beside the data)")
        .file_path();
    config::Binding<T> train("data.text.", O{}.train);
    train.key("vocab_size", &T::vocab_size, "text_pairs: pieces of a trained vocabulary (at most)").min(8);
    train.key("model_type", &T::model_type, "text_pairs: SentencePiece algorithm of a trained vocabulary").choices({"unigram", "bpe"});
    b.nest(&O::train, train);
  });
}

SourceEntry text_pairs_source() {
  SourceEntry e;
  e.name = "text_pairs";
  e.help = "TSV sentence pairs with labels, SentencePiece tokens";
  e.add_keys = [](config::Schema& s) { text_pairs_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    TextPairsOptions o = text_pairs_binding().read(*r.config);
    o.path = r.path;
    if (!o.tokenizer.empty()) {
      config::check_path_exists(*r.config, "data.text.tokenizer", o.tokenizer, ErrorKind::kData,
                                "give a SentencePiece .model file, or leave data.text.tokenizer empty to train one on "
                                "data.path's text");
    }
    // Validation text uses the training vocabulary and label order.
    if (const TextPairsDataset* train = r.like ? find_text_pairs(*r.like) : nullptr) {
      o.vocabulary = train->shared_tokenizer();
      o.tokenizer = train->tokenizer_path();
      o.labels = train->label_names();
    }
    return std::make_shared<TextPairsDataset>(o);
  };
  e.facts = [](const Dataset& d) {
    DataFacts f;
    if (const TextPairsDataset* text = find_text_pairs(d)) {
      f.text = TextFacts{text->vocab_size(), text->num_classes(), text->pad_id(), text->max_len()};
    }
    return f;
  };
  return e;
}

const SourceRegistrar kTextPairsRegistered(text_pairs_source());

}  // namespace
}  // namespace bellows::data
