// TSV sentence pairs; see text_pairs.h.
//
// The file is split on tabs only, without quoting: TSV exports of NLI corpora (MNLI, SNLI) carry quotes as text.
// Lines end in "\n" or "\r\n"; a UTF-8 BOM is skipped; blank lines are skipped.
#include "bellows/data/text_pairs.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bellows/data/subset.h"
#include "bellows/util/atomic_file.h"  // defines: write_file_atomically
#include "bellows/util/cache.h"        // defines: user_cache_dir, fnv1a
#include "bellows/util/check.h"
#include "bellows/util/suggest.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::data {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) return fields;
    start = tab + 1;
  }
}

std::string shown(std::string_view s) { return s.size() <= 40 ? std::string(s) : fmt::format("{}...", s.substr(0, 37)); }

// The file's rows as text, with their line numbers; the header's column indices for the three columns.
struct Rows {
  std::vector<std::string> premise, hypothesis, label;
  std::vector<std::int64_t> lines;
};

std::size_t column_index(const std::vector<std::string>& header, const std::string& name, const char* key, const std::string& file) {
  const auto it = std::find(header.begin(), header.end(), name);
  if (it != header.end()) return static_cast<std::size_t>(it - header.begin());
  const auto best = closest_match(name, header);
  BELLOWS_FAIL(ErrorKind::kData,
               fmt::format("{} line 1: no column '{}' ({}); the header has {}", file, name, key, fmt::join(header, ", ")),
               best ? fmt::format("did you mean {}: {}?", key, *best) : fmt::format("set {} to one of the header's columns", key));
}

Rows read_rows(const TextPairsOptions& o) {
  const std::string file = o.path.string();
  std::error_code ec;
  BELLOWS_CHECK_DATA(!fs::is_directory(o.path, ec), fmt::format("{} is a directory, not a text pairs file", file),
                     "give data.path the tab-separated file itself (a header line, then one pair per line)");
  std::ifstream in(o.path, std::ios::binary);
  BELLOWS_CHECK_DATA(in.good(), fmt::format("cannot open {}: {}", file, std::strerror(errno)),
                     "check data.path (a tab-separated file with a header line)");
  std::string line;
  std::int64_t line_no = 0;
  std::vector<std::string> header;
  while (header.empty() && std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.starts_with(kBom)) line.erase(0, kBom.size());
    if (line.empty()) continue;
    for (const auto f : split_tabs(line)) header.emplace_back(f);
  }
  BELLOWS_CHECK_DATA(!header.empty(), fmt::format("{} is empty: no header line", file),
                     fmt::format("write a header line naming the columns ({}, {}, {}) separated by tabs", o.premise_column,
                                 o.hypothesis_column, o.label_column));
  const std::size_t ip = column_index(header, o.premise_column, "data.text.premise", file);
  const std::size_t ih = column_index(header, o.hypothesis_column, "data.text.hypothesis", file);
  const std::size_t il = column_index(header, o.label_column, "data.text.label", file);
  Rows rows;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto fields = split_tabs(line);
    BELLOWS_CHECK_DATA(fields.size() == header.size(),
                       fmt::format("{} line {}: {} tab-separated fields, the header has {} ({})", file, line_no, fields.size(),
                                   header.size(), fmt::join(header, ", ")),
                       "every row needs one field per column; tabs separate fields and there is no quoting, so a tab "
                       "inside a sentence must be replaced by a space");
    BELLOWS_CHECK_DATA(!fields[il].empty(), fmt::format("{} line {}: empty label (column '{}')", file, line_no, o.label_column),
                       "give every row a label, or remove the row");
    rows.premise.emplace_back(fields[ip]);
    rows.hypothesis.emplace_back(fields[ih]);
    rows.label.emplace_back(fields[il]);
    rows.lines.push_back(line_no);
  }
  BELLOWS_CHECK_DATA(!in.bad(), fmt::format("reading {} failed: {}", file, std::strerror(errno)), "check the disk and the file");
  BELLOWS_CHECK_DATA(!rows.lines.empty(), fmt::format("{}: a header but no rows of sentence pairs (an empty corpus)", file),
                     "check data.path; the file needs at least one row below the header");
  return rows;
}

bool parse_int(const std::string& s, long long& v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc{} && p == s.data() + s.size();
}

// The distinct labels, sorted numerically when every one is an integer ("2" before "10"), else byte-wise.
std::vector<std::string> sorted_labels(const std::vector<std::string>& values) {
  std::set<std::string> distinct(values.begin(), values.end());
  std::vector<std::string> out(distinct.begin(), distinct.end());
  long long a = 0, b = 0;
  const bool numeric = std::all_of(out.begin(), out.end(), [&](const std::string& s) { return parse_int(s, a); });
  if (numeric) {
    std::sort(out.begin(), out.end(), [&](const std::string& x, const std::string& y) {
      parse_int(x, a);
      parse_int(y, b);
      return a < b;
    });
  }
  return out;
}

// --- the vocabulary cache ---

// What a cached vocabulary was trained from: the text (hashed) and the options.
std::string cache_key(const std::vector<std::string>& sentences, const TokenizerTrainOptions& t) {
  std::uint64_t h = fnv1a("bellows text pairs vocabulary v1");
  for (const auto& s : sentences) h = fnv1a(std::string_view("\n", 1), fnv1a(s, h));
  return fmt::format("text_fnv1a={:016x} sentences={} model_type={} vocab_size={} character_coverage={} seed={}\n", h,
                     sentences.size(), t.model_type, t.vocab_size, t.character_coverage, t.seed);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in.good()) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Durably and atomically (util/atomic_file.h); false when it cannot be written.
bool write_text(const fs::path& p, const std::string& text) {
  try {
    write_file_atomically(p, text);
    return true;
  } catch (const Error&) {
    return false;
  }
}

fs::path user_cache_path(const fs::path& data, const std::string& file_name) {
  const fs::path root = user_cache_dir();
  if (root.empty()) return {};
  const std::string absolute = fs::absolute(data).lexically_normal().string();
  return root / "tokenizers" / fmt::format("{:016x}-{}", fnv1a(absolute), file_name);
}

// --- the constructor's steps ---

// Each row's class index in `label_names` (the class order); an unknown label is a data error naming its line.
std::vector<std::int64_t> class_indices(const Rows& rows, const std::vector<std::string>& label_names, const std::string& file) {
  std::map<std::string, std::int64_t> index;
  for (std::size_t i = 0; i < label_names.size(); ++i) {
    BELLOWS_CHECK_CONFIG(index.emplace(label_names[i], static_cast<std::int64_t>(i)).second,
                         fmt::format("data.text.labels lists '{}' twice", label_names[i]), "list each label once");
  }
  std::vector<std::int64_t> labels;
  labels.reserve(rows.label.size());
  for (std::size_t r = 0; r < rows.label.size(); ++r) {
    const auto it = index.find(rows.label[r]);
    if (it == index.end()) {
      const auto best = closest_match(rows.label[r], label_names);
      BELLOWS_FAIL(ErrorKind::kData,
                   fmt::format("{} line {}: unknown label '{}'; the labels are {}", file, rows.lines[r], shown(rows.label[r]),
                               fmt::join(label_names, ", ")),
                   best ? fmt::format("did you mean '{}'? (data.text.labels lists the labels in class order)", *best)
                        : "add it to data.text.labels, or fix the row");
    }
    labels.push_back(it->second);
  }
  return labels;
}

// The vocabulary the dataset tokenizes with, and where it came from.
struct PairsVocabulary {
  std::shared_ptr<const Tokenizer> tokenizer;
  fs::path path;         // its .model file; empty when it was not saved
  bool trained = false;  // trained here, not loaded
};

// Where a trained vocabulary is looked for (in this order) and where a new one is written: data.text.tokenizer_cache
// when set, else beside the data file (or, where that directory is not writable, in the user's cache).
struct VocabularyCacheSites {
  std::vector<fs::path> candidates;
  fs::path target;
};

VocabularyCacheSites vocabulary_cache_sites(const TextPairsOptions& options) {
  if (!options.tokenizer_cache.empty()) return {{options.tokenizer_cache}, options.tokenizer_cache};
  const std::string name = fmt::format("{}.spm-{}-{}.model", options.path.filename().string(), options.train.model_type,
                                       options.train.vocab_size);
  const fs::path beside = options.path.parent_path() / name;
  const fs::path dir = beside.has_parent_path() ? beside.parent_path() : fs::path(".");
  const fs::path elsewhere = user_cache_path(options.path, name);
  VocabularyCacheSites sites{{beside}, ::access(dir.c_str(), W_OK) == 0 ? beside : elsewhere};
  if (!elsewhere.empty()) sites.candidates.push_back(elsewhere);
  return sites;
}

// Writes a trained vocabulary and its key to `target`; false when it cannot.
bool save_vocabulary(const Tokenizer& tokenizer, const fs::path& target, const std::string& key) {
  std::error_code ec;
  if (!target.empty() && target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (target.empty()) return false;
  try {
    tokenizer.save(target);
    return write_text(target.string() + ".key", key);  // the key last: a key implies a complete model
  } catch (const Error&) {
    return false;
  }
}

// A vocabulary cached for these sentences and options (its key file matches), else one trained on them and cached.
PairsVocabulary cached_or_trained_vocabulary(const TextPairsOptions& options, const Rows& rows) {
  std::vector<std::string> sentences;
  sentences.reserve(2 * rows.premise.size());
  for (std::size_t r = 0; r < rows.premise.size(); ++r) {
    sentences.push_back(rows.premise[r]);
    sentences.push_back(rows.hypothesis[r]);
  }
  const std::string key = cache_key(sentences, options.train);
  const VocabularyCacheSites sites = vocabulary_cache_sites(options);
  for (const auto& p : sites.candidates) {
    if (read_text(p.string() + ".key") != key) continue;
    return {std::make_shared<const Tokenizer>(Tokenizer::load(p)), p, false};
  }
  PairsVocabulary v;
  v.tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_serialized(Tokenizer::train(sentences, options.train),
                                                                             fmt::format("trained on {}", options.path.string())));
  v.trained = true;
  const bool written = save_vocabulary(*v.tokenizer, sites.target, key);
  // A cache the user named must work; the default location is a convenience.
  BELLOWS_CHECK_RESOURCE(written || options.tokenizer_cache.empty(),
                         fmt::format("cannot write the tokenizer cache {}", options.tokenizer_cache.string()),
                         "set data.text.tokenizer_cache to a writable path, or leave it empty");
  if (written) v.path = sites.target;
  return v;
}

// The vocabulary: given, loaded, cached or trained.
PairsVocabulary pairs_vocabulary(const TextPairsOptions& options, const Rows& rows) {
  if (options.vocabulary) return {options.vocabulary, options.tokenizer, false};
  if (!options.tokenizer.empty()) return {std::make_shared<const Tokenizer>(Tokenizer::load(options.tokenizer)), options.tokenizer, false};
  return cached_or_trained_vocabulary(options, rows);
}

// The ids of one sentence; an error names the file's line.
std::vector<std::int64_t> encode_sentence(const Tokenizer& tokenizer, const std::string& text, const std::string& file,
                                          std::int64_t line) {
  try {
    return tokenizer.encode(text);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{} line {}: {}", file, line, e.message()), e.hint());
  }
}

}  // namespace

std::pair<std::int64_t, std::int64_t> truncate_longest_first(std::int64_t a, std::int64_t b, std::int64_t max_len) {
  const std::int64_t budget = std::max<std::int64_t>(max_len - 3, 0);
  if (a + b <= budget) return {a, b};
  // Taking one token at a time from the longer part (the hypothesis on a tie) shortens only the longer part
  // while the shorter one fits in half the budget; otherwise both end at half, the premise keeping the odd token.
  const std::int64_t half = budget / 2;
  if (a >= b && b <= half) return {budget - b, b};
  if (b > a && a <= half) return {a, budget - a};
  return {budget - half, half};
}

TextPairsDataset::TextPairsDataset(const TextPairsOptions& options) : options_(options) {
  const std::string file = options.path.string();
  BELLOWS_CHECK_CONFIG(options.max_len >= 3, fmt::format("data.text.max_len is {}, expected >= 3 ([CLS] and two [SEP])", options.max_len),
                       "set data.text.max_len to e.g. 128");
  Rows rows = read_rows(options);

  // --- labels to class indices ---
  label_names_ = options.labels.empty() ? sorted_labels(rows.label) : options.labels;
  labels_ = class_indices(rows, label_names_, file);
  lines_ = std::move(rows.lines);

  // --- the vocabulary: given, loaded, cached or trained ---
  PairsVocabulary vocabulary = pairs_vocabulary(options, rows);
  tokenizer_ = std::move(vocabulary.tokenizer);
  tokenizer_path_ = std::move(vocabulary.path);
  trained_ = vocabulary.trained;

  // --- tokenize every row once ---
  offsets_.reserve(2 * lines_.size() + 1);
  offsets_.push_back(0);
  for (std::size_t r = 0; r < lines_.size(); ++r) {
    std::int64_t parts[2] = {0, 0};
    for (int side = 0; side < 2; ++side) {
      const std::vector<std::int64_t> ids = encode_sentence(*tokenizer_, side == 0 ? rows.premise[r] : rows.hypothesis[r], file, lines_[r]);
      for (const std::int64_t id : ids) tokens_.push_back(static_cast<std::int32_t>(id));
      offsets_.push_back(static_cast<std::int64_t>(tokens_.size()));
      parts[side] = static_cast<std::int64_t>(ids.size());
    }
    if (parts[0] + parts[1] + 3 > options.max_len) ++truncated_;
  }
}

Example TextPairsDataset::get(std::int64_t index, FetchContext& context) const {
  BELLOWS_CHECK_DATA(index >= 0 && index < size(), fmt::format("sample {} of {}, which has {}", index, name(), size()),
                     "index within the dataset");
  const auto start = std::chrono::steady_clock::now();
  const auto r = static_cast<std::size_t>(index);
  const std::int64_t a0 = offsets_[2 * r], b0 = offsets_[2 * r + 1], end = offsets_[2 * r + 2];
  const auto [la, lb] = truncate_longest_first(b0 - a0, end - b0, options_.max_len);
  const std::int64_t n = la + lb + 3;
  at::Tensor x = at::empty({n}, at::kLong);
  at::Tensor seg = at::zeros({n}, at::kLong);
  auto* xp = x.data_ptr<std::int64_t>();
  auto* sp = seg.data_ptr<std::int64_t>();
  std::int64_t k = 0;
  xp[k++] = tokenizer_->cls_id();
  for (std::int64_t i = 0; i < la; ++i) xp[k++] = tokens_[a0 + i];
  xp[k++] = tokenizer_->sep_id();
  for (std::int64_t i = 0; i < lb; ++i) {
    sp[k] = 1;
    xp[k++] = tokens_[b0 + i];
  }
  sp[k] = 1;
  xp[k++] = tokenizer_->sep_id();
  Example e;
  e.emplace("x", x);
  e.emplace("segments", seg);
  e.emplace("y", at::scalar_tensor(labels_[r], at::kLong));
  context.times.transform += seconds_since(start);
  return e;
}

Batch TextPairsDataset::get_batch(std::span<const std::int64_t> indices, FetchContext& context) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (const std::int64_t i : indices) examples.push_back(get(i, context));
  const auto start = std::chrono::steady_clock::now();
  const auto b = static_cast<std::int64_t>(indices.size());
  std::int64_t longest = 0;
  for (const auto& e : examples) longest = std::max(longest, e.at("x").size(0));
  at::Tensor x = at::full({b, longest}, tokenizer_->pad_id(), at::kLong);
  at::Tensor seg = at::zeros({b, longest}, at::kLong);
  at::Tensor y = at::empty({b}, at::kLong);
  at::Tensor lengths = at::empty({b}, at::kLong);
  for (std::int64_t i = 0; i < b; ++i) {
    const Example& e = examples[static_cast<std::size_t>(i)];
    const std::int64_t n = e.at("x").size(0);
    x[i].narrow(0, 0, n).copy_(e.at("x"));
    seg[i].narrow(0, 0, n).copy_(e.at("segments"));
    y[i] = e.at("y");
    lengths[i] = n;
  }
  Batch batch;
  batch.size = b;
  batch.tensors.emplace("x", x);
  batch.tensors.emplace("segments", seg);
  batch.tensors.emplace("y", y);
  batch.tensors.emplace("x_mask", at::arange(longest, at::kLong).unsqueeze(0) < lengths.unsqueeze(1));
  batch.tensors.emplace("x_lengths", lengths);
  context.times.collate += seconds_since(start);
  return batch;
}

std::string TextPairsDataset::describe(std::int64_t index) const {
  return fmt::format("{} line {}", options_.path.string(), lines_.at(static_cast<std::size_t>(index)));
}

std::string TextPairsDataset::name() const {
  return fmt::format("text pairs {} ({} pairs, {} classes, vocabulary of {} from {})", options_.path.string(), size(), num_classes(),
                     vocab_size(), tokenizer_path_.empty() ? tokenizer_->origin() : tokenizer_path_.string());
}

at::Tensor TextPairsDataset::class_labels() const { return at::tensor(labels_, at::kLong); }

const TextPairsDataset* find_text_pairs(const Dataset& dataset) {
  const Dataset* d = &dataset;
  while (const auto* subset = dynamic_cast<const SubsetDataset*>(d)) d = &subset->base();
  return dynamic_cast<const TextPairsDataset*>(d);
}

}  // namespace bellows::data
