// SentencePiece tokenizer; see tokenizer.h. libsentencepiece lives in a module of its own,
// libbellows_sentencepiece.so, opened here on first use (sentencepiece/module.h says why: its global flags
// collide with LibTorch's).
#include "bellows/data/tokenizer.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "bellows/util/atomic_file.h"  // defines: write_file_atomically
#include "bellows/util/check.h"
#include "bellows/util/sanitizers.h"  // defines: kSanitizedBuild
#include "sentencepiece/module.h"

namespace bellows::data {
namespace fs = std::filesystem;
namespace spm = sentencepiece_module;

struct Tokenizer::Impl {
  std::unique_ptr<const spm::Model> model;
  std::string serialized;
};

namespace {

constexpr const char* kCls = "[CLS]";
constexpr const char* kSep = "[SEP]";
constexpr const char* kModuleName = "libbellows_sentencepiece.so";

// Sanitizer runtimes refuse RTLD_DEEPBIND (they interpose malloc and friends); those builds open the module
// without it and live with the flag collision described in module.h.
constexpr int kOpenFlags = util::kSanitizedBuild ? (RTLD_NOW | RTLD_LOCAL) : (RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);

// The module beside libbellows itself (the build tree's src/ and an installation's lib/ alike), opened once and
// never closed.
const spm::Api& sentencepiece() {
  static const spm::Api* api = [] {
    Dl_info self{};
    BELLOWS_CHECK(::dladdr(reinterpret_cast<const void*>(&sentencepiece), &self) != 0 && self.dli_fname != nullptr,
                  "cannot find the file libbellows was loaded from", "report this bug");
    const fs::path path = fs::path(self.dli_fname).parent_path() / kModuleName;
    void* handle = ::dlopen(path.c_str(), kOpenFlags);
    BELLOWS_CHECK_RESOURCE(handle != nullptr, fmt::format("cannot load the SentencePiece module {}: {}", path.string(), ::dlerror()),
                           "it is built and installed beside libbellows; install Debian's libsentencepiece0 (scripts/setup.sh does)");
    using Entry = const spm::Api* (*)();
    const auto entry = reinterpret_cast<Entry>(::dlsym(handle, "bellows_sentencepiece_api"));
    BELLOWS_CHECK(entry != nullptr && entry() != nullptr && entry()->version == spm::kApiVersion,
                  fmt::format("{} is not the SentencePiece module of this bellows (API version {} expected)", path.string(), spm::kApiVersion),
                  "rebuild and reinstall bellows");
    return entry();
  }();
  return *api;
}

// SentencePiece's trainer and its random generator are process-wide; one training at a time.
std::mutex& train_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl, std::string origin) : impl_(std::move(impl)), origin_(std::move(origin)) {
  const spm::Model& sp = *impl_->model;
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
  std::string error;
  impl->model.reset(sentencepiece().load(serialized, &error));
  BELLOWS_CHECK_DATA(impl->model != nullptr, fmt::format("{} is not a SentencePiece model: {}", origin, error),
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
  const spm::Api& api = sentencepiece();
  std::lock_guard<std::mutex> lock(train_mutex());
  std::string serialized;
  const std::string error = api.train(args, sentences, static_cast<unsigned int>(o.seed), &serialized);
  BELLOWS_CHECK_DATA(error.empty(), fmt::format("training the SentencePiece vocabulary failed: {}", error),
                     "check the corpus and data.text.vocab_size (a tiny corpus needs a small vocabulary)");
  return serialized;
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const std::string error = impl_->model->encode(text, &ids);
  BELLOWS_CHECK_DATA(error.empty(), fmt::format("tokenizer {} cannot encode '{}': {}", origin_, text, error),
                     "check the text's encoding (UTF-8 expected)");
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  const int n = impl_->model->piece_size();
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (const std::int64_t id : ids) {
    BELLOWS_CHECK_DATA(id >= 0 && id < n, fmt::format("token id {} outside the vocabulary of {} ({} pieces)", id, origin_, n),
                       "decode ids produced by this tokenizer");
    narrow.push_back(static_cast<int>(id));
  }
  std::string text;
  const std::string error = impl_->model->decode(narrow, &text);
  BELLOWS_CHECK_DATA(error.empty(), fmt::format("tokenizer {} cannot decode: {}", origin_, error), "report this bug");
  return text;
}

std::vector<std::string> Tokenizer::pieces(std::string_view text) const {
  std::vector<std::string> out;
  const std::string error = impl_->model->encode_pieces(text, &out);
  BELLOWS_CHECK_DATA(error.empty(), fmt::format("tokenizer {} cannot encode '{}': {}", origin_, text, error),
                     "check the text's encoding (UTF-8 expected)");
  return out;
}

std::int64_t Tokenizer::vocab_size() const { return impl_->model->piece_size(); }

std::int64_t Tokenizer::id_of(std::string_view piece) const {
  const spm::Model& sp = *impl_->model;
  const int id = sp.piece_to_id(piece);
  return id == sp.unk_id() && piece != sp.id_to_piece(id) ? -1 : id;
}

const std::string& Tokenizer::serialized() const { return impl_->serialized; }

void Tokenizer::save(const fs::path& path) const {
  write_file_atomically(path, impl_->serialized);
}

}  // namespace bellows::data
