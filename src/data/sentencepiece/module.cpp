// libbellows_sentencepiece.so: Debian's libsentencepiece behind the interface of module.h, loaded by
// data/tokenizer.cpp with RTLD_DEEPBIND (module.h says why). Everything but bellows_sentencepiece_api() is hidden.
#include "module.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace bellows::data::sentencepiece_module {
namespace {

std::string error_of(const sentencepiece::util::Status& status) { return status.ok() ? std::string() : status.ToString(); }

// SentencePiece reports most problems as a Status, but some of its parts throw (darts_clone's trie on a malformed
// model: "failed to insert key: zero-length key", found by fuzzing): those become the error text too.
template <typename F>
std::string guarded(F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return std::string("SentencePiece: ") + e.what();
  } catch (...) {
    return "SentencePiece: an unknown exception";
  }
}

class ProcessorModel final : public Model {
 public:
  sentencepiece::SentencePieceProcessor processor;
  std::string encode(std::string_view text, std::vector<int>* ids) const override {
    return guarded([&] { return error_of(processor.Encode(text, ids)); });
  }
  std::string encode_pieces(std::string_view text, std::vector<std::string>* pieces) const override {
    return guarded([&] { return error_of(processor.Encode(text, pieces)); });
  }
  std::string decode(const std::vector<int>& ids, std::string* text) const override {
    return guarded([&] { return error_of(processor.Decode(ids, text)); });
  }
  int piece_size() const override { return processor.GetPieceSize(); }
  int piece_to_id(std::string_view piece) const override { return processor.PieceToId(piece); }
  std::string id_to_piece(int id) const override { return processor.IdToPiece(id); }
  int unk_id() const override { return processor.unk_id(); }
  int pad_id() const override { return processor.pad_id(); }
  int bos_id() const override { return processor.bos_id(); }
  int eos_id() const override { return processor.eos_id(); }
};

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

Model* load(const std::string& serialized, std::string* error) {
  auto model = std::make_unique<ProcessorModel>();
  *error = guarded([&] { return error_of(model->processor.LoadFromSerializedProto(serialized)); });
  return error->empty() ? model.release() : nullptr;
}

std::string train(const std::unordered_map<std::string, std::string>& args, const std::vector<std::string>& sentences, unsigned seed,
                  std::string* serialized) {
  return guarded([&] {
    sentencepiece::SetRandomGeneratorSeed(seed);
    VectorIterator it(sentences);
    return error_of(sentencepiece::SentencePieceTrainer::Train(args, &it, serialized));
  });
}

}  // namespace
}  // namespace bellows::data::sentencepiece_module

extern "C" __attribute__((visibility("default"))) const bellows::data::sentencepiece_module::Api* bellows_sentencepiece_api() {
  using namespace bellows::data::sentencepiece_module;
  static const Api api{kApiVersion, &load, &train};
  return &api;
}
