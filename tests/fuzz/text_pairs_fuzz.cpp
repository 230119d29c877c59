// Fuzzes the sentence-pair TSV reader, data::TextPairsDataset (include/bellows/data/text_pairs.h), over a temp
// file with a vocabulary trained once at start-up (its samples and a batch are checked), and the SentencePiece model
// loader, data::Tokenizer::from_serialized (tokenizer.h), on the same raw bytes, encoding and decoding with it.
//
// Input: the file's bytes (a TSV of premise/hypothesis/label rows, or a serialized SentencePiece model).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bellows/data/batch.h"
#include "bellows/data/dataset.h"
#include "bellows/data/text_pairs.h"
#include "bellows/data/tokenizer.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;

constexpr std::int64_t kMaxLen = 16;
constexpr std::int64_t kMaxSamples = 64;

// The vocabulary every input is tokenized with: trained once, small, on sentences like the seeds'.
std::shared_ptr<const data::Tokenizer> vocabulary() {
  static const std::shared_ptr<const data::Tokenizer> vocab = [] {
    const std::vector<std::string> sentences = {
        "the cat sleeps in the garden", "the cat is awake",         "the dog sleeps in the garden",
        "the cat sleeps",               "a bird sings on the roof", "nobody is singing",
        "the farmer feeds the cows",    "the cows are hungry",      "two children play football outside",
        "children are playing",         "a man reads a newspaper",  "the man is sleeping",
        "it rains in the city",         "the streets are wet",      "a woman rides a bicycle",
        "someone is cycling",           "Grüße aus Köln",           "数字 123 and symbols !?",
    };
    data::TokenizerTrainOptions o;
    o.vocab_size = 48;
    try {
      return std::make_shared<const data::Tokenizer>(
          data::Tokenizer::from_serialized(data::Tokenizer::train(sentences, o), "fuzz vocabulary"));
    } catch (const Error& e) {
      fz::violated(std::string("cannot train the harness's vocabulary: ") + e.what());
    }
  }();
  return vocab;
}

void check_sample(const data::Example& ex, const data::TextPairsDataset& ds) {
  const auto x = ex.find("x"), seg = ex.find("segments"), y = ex.find("y");
  fz::expect(x != ex.end() && seg != ex.end() && y != ex.end(), "a text-pair sample lacks x, segments or y");
  if (x == ex.end() || seg == ex.end() || y == ex.end()) return;
  const at::Tensor xs = x->second.contiguous(), ys = y->second.contiguous();
  const bool x_ok = xs.scalar_type() == at::kLong && xs.dim() == 1 && xs.size(0) >= 3 && xs.size(0) <= ds.max_len();
  fz::expect(x_ok, "\"x\" is not int64 [L] with 3 <= L <= max_len");
  fz::expect(seg->second.sizes() == xs.sizes(), "\"segments\" and \"x\" differ in shape");
  if (x_ok) {
    const auto* ids = xs.const_data_ptr<std::int64_t>();
    fz::expect(ids[0] == ds.tokenizer().cls_id() && ids[xs.size(0) - 1] == ds.tokenizer().sep_id(), "\"x\" is not [CLS] ... [SEP]");
    for (std::int64_t i = 0; i < xs.size(0); ++i) fz::expect(ids[i] >= 0 && ids[i] < ds.vocab_size(), "a token id outside the vocabulary");
  }
  const bool y_ok = ys.scalar_type() == at::kLong && ys.dim() == 0;
  fz::expect(y_ok, "\"y\" is not an int64 scalar");
  if (y_ok) {
    const std::int64_t label = *ys.const_data_ptr<std::int64_t>();
    fz::expect(label >= 0 && label < ds.num_classes(), "a label index outside [0, num_classes)");
  }
}

void fuzz_pairs(const fz::fs::path& path) {
  data::TextPairsOptions o;
  o.path = path;
  o.vocabulary = vocabulary();
  o.max_len = kMaxLen;
  const data::TextPairsDataset ds(o);
  const std::int64_t n = std::min(ds.size(), kMaxSamples);
  fz::expect(ds.size() > 0, "a text-pair dataset without samples");
  data::FetchContext ctx;
  std::vector<std::int64_t> indices;
  for (std::int64_t i = 0; i < n; ++i) {
    check_sample(ds.get(i, ctx), ds);
    (void)ds.describe(i);
    if (i < 8) indices.push_back(i);
  }
  if (!indices.empty()) {
    const data::Batch batch = ds.get_batch(indices, ctx);
    for (const auto& [name, t] : batch.tensors) fz::touch(t);
  }
  const at::Tensor labels = ds.class_labels();
  fz::expect(labels.defined() && labels.dim() == 1 && labels.size(0) == ds.size(), "class_labels() is not int64 [size()]");
  (void)ds.label_names();
  (void)ds.truncated();
}

void fuzz_model(std::string_view bytes) {
  const data::Tokenizer t = data::Tokenizer::from_serialized(std::string(bytes), "fuzz-input");
  const std::int64_t n = t.vocab_size();
  fz::expect(t.cls_id() >= 0 && t.cls_id() < n && t.sep_id() >= 0 && t.sep_id() < n, "[CLS]/[SEP] ids outside the vocabulary");
  (void)t.id_of("[CLS]");
  (void)t.id_of("");
  (void)t.serialized();
  for (const std::string_view text : {std::string_view("the cat sleeps in the garden"), std::string_view(""),
                                      bytes.substr(0, std::min<std::size_t>(bytes.size(), 64))}) {
    try {
      const auto ids = t.encode(text);
      for (const auto id : ids) fz::expect(id >= 0 && id < n, "encode() gives an id outside the vocabulary");
      (void)t.decode(ids);
      (void)t.pieces(text);
    } catch (const Error& e) {
      fz::rejected(e);
    }
  }
  // Every id decodes (capped); one past the end is a rejection.
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < std::min<std::int64_t>(n, 256); ++i) ids.push_back(i);
  (void)t.decode(ids);
  try {
    (void)t.decode({n});
  } catch (const Error& e) {
    fz::rejected(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  fz::init();
  (void)vocabulary();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fz::fs::path path = fz::input_file(data, size, "pairs.tsv");
  if (path.empty()) return 0;
  try {
    fuzz_pairs(path);
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    fuzz_model(fz::as_text(data, size));
  } catch (const Error& e) {
    return fz::rejected(e);
  }
  return 0;
}
