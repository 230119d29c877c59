// The seam between libbellows and its SentencePiece module, libbellows_sentencepiece.so (private: no installed
// header). Why a module: Debian's libsentencepiece exports a global `FLAGS_minloglevel` (a 32-byte absl::Flag
// of its own absl copy) and so does LibTorch's libc10 (a 4-byte int). Linked into one process, the dynamic linker
// binds sentencepiece's references to libc10's symbol, and sentencepiece's flag constructor writes 32 bytes over
// libc10's flags: FLAGS_caffe2_use_fatal_for_enforce became true, so every failed CAFFE_ENFORCE (a CPU
// allocation that fails, for one) aborted the process instead of throwing. libbellows therefore does not link
// libsentencepiece; data/tokenizer.cpp opens this module on first use with RTLD_DEEPBIND, which binds the
// module's and sentencepiece's own symbols (its flags, its protobuf 3.14 runtime) ahead of the process's.
// Both sides share one libstdc++, so the interface uses C++ types; the module is never unloaded.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bellows::data::sentencepiece_module {

inline constexpr int kApiVersion = 1;

// A loaded SentencePiece model. Methods that can fail return "" on success or SentencePiece's status text.
class Model {
 public:
  virtual ~Model() = default;
  virtual std::string encode(std::string_view text, std::vector<int>* ids) const = 0;
  virtual std::string encode_pieces(std::string_view text, std::vector<std::string>* pieces) const = 0;
  virtual std::string decode(const std::vector<int>& ids, std::string* text) const = 0;
  virtual int piece_size() const = 0;
  virtual int piece_to_id(std::string_view piece) const = 0;
  virtual std::string id_to_piece(int id) const = 0;
  virtual int unk_id() const = 0;
  virtual int pad_id() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
};

struct Api {
  int version = kApiVersion;
  // The model in `serialized` (a .model file's bytes); null with *error set when it is not one.
  Model* (*load)(const std::string& serialized, std::string* error) = nullptr;
  // Trains a vocabulary on `sentences` (empty ones skipped) with SentencePiece's named arguments and random
  // seed, into *serialized; "" or the error. Not thread-safe (SentencePiece's trainer is process-wide).
  std::string (*train)(const std::unordered_map<std::string, std::string>& args, const std::vector<std::string>& sentences,
                       unsigned seed, std::string* serialized) = nullptr;
};

}  // namespace bellows::data::sentencepiece_module

// The module's one exported symbol.
extern "C" const bellows::data::sentencepiece_module::Api* bellows_sentencepiece_api();
