// data.source: text_pairs -- tab-separated sentence pairs with labels, tokenised with a SentencePiece
// vocabulary (given, or trained on the corpus and cached). Its vocabulary and labels are the text model's facts.
#include "bellows/data/source_registry.h"
#include "bellows/data/text_pairs.h"

namespace bellows::data {
namespace {

SourceEntry text_pairs_source() {
  SourceEntry e;
  e.name = "text_pairs";
  e.help = "TSV sentence pairs with labels, SentencePiece tokens";
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    auto node = [](auto v) { return YAML::Node(v); };
    s.add("data.text.premise", Type::kString, "text_pairs: column of the first sentence").default_value(node("premise"));
    s.add("data.text.hypothesis", Type::kString, "text_pairs: column of the second sentence").default_value(node("hypothesis"));
    s.add("data.text.label", Type::kString, "text_pairs: label column").default_value(node("label"));
    s.add("data.text.labels", Type::kStringList, "text_pairs: labels in class order (empty: the file's, sorted)").default_value(YAML::Load("[]"));
    s.add("data.text.max_len", Type::kInt, "text_pairs: tokens per sample with [CLS] and [SEP]s (longest-first truncation)").min(3).default_value(node(128));
    s.add("data.text.tokenizer", Type::kString, "text_pairs: SentencePiece .model file (empty: train one on data.path's text)").default_value(node(""));
    s.add("data.text.tokenizer_cache", Type::kString, "text_pairs: where a trained vocabulary is cached (empty: beside the data)").default_value(node(""));
    s.add("data.text.vocab_size", Type::kInt, "text_pairs: pieces of a trained vocabulary (at most)").min(8).default_value(node(8000));
    s.add("data.text.model_type", Type::kString, "text_pairs: SentencePiece algorithm of a trained vocabulary").choices({"unigram", "bpe"}).default_value(node("unigram"));
  };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    using namespace config;
    const Config& c = *r.config;
    TextPairsOptions o;
    o.path = r.path;
    o.premise_column = get_string(c, "data.text.premise");
    o.hypothesis_column = get_string(c, "data.text.hypothesis");
    o.label_column = get_string(c, "data.text.label");
    o.labels = get_string_list(c, "data.text.labels");
    o.max_len = get_int(c, "data.text.max_len");
    o.tokenizer = get_string(c, "data.text.tokenizer");
    o.tokenizer_cache = get_string(c, "data.text.tokenizer_cache");
    o.train.vocab_size = get_int(c, "data.text.vocab_size");
    o.train.model_type = get_string(c, "data.text.model_type");
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
