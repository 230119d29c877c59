// Data of examples/nli-encoder (seed 004, workload W7): sentence pairs with entailment / neutral / contradiction
// labels from a small template grammar, as TSV files with the header "premise<TAB>hypothesis<TAB>label".
//  - premise: "the <adjective> <noun> is <activity> <place>", e.g. "the young farmer is swimming near the river".
//  - entailment: the premise with a part dropped (adjective or place), the noun generalised (farmer -> person,
//    cat -> animal), "someone"/"an animal" as subject, or a different activity negated ("... is not dancing").
//  - contradiction: another activity, the same one negated, the opposite adjective (young -> old), another place,
//    or "nobody is <activity> <place>".
//  - neutral: the premise plus a detail it does not state (a time, a companion, a reason), a different subject
//    doing the same, or an unrelated property of the subject ("the farmer is hungry").
// Deciding a label needs both sentences (every hypothesis form occurs with two labels, e.g. negation with
// entailment and contradiction), so the classifier must compare them: a learnable, non-trivial pair task.
//  - train.tsv: the pairs the 5-fold cross-validation splits (3,000; --quick: 600).
//  - pretrain.tsv: other pairs of the same grammar for training the encoder before it is frozen (6,000;
//    --quick: 1,500). No (premise, hypothesis) pair of train.tsv occurs in pretrain.tsv, and no pair repeats
//    within a file, so a held-out fold's pairs were never seen in training, not even by the encoder.
// Labels are balanced (drawn uniformly). Deterministic: one splitmix64 stream per file from mix_seed(seed, part).
#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bellows/data/dataset.h"  // mix_seed
#include "bellows/util/atomic_file.h"  // defines: write_file_atomically
#include "bellows/util/check.h"
#include "generators.h"

namespace bellows::example_data {
namespace {

namespace fs = std::filesystem;

struct Noun {
  const char* word;
  const char* kind;  // "person" or "animal"
};
constexpr std::array<Noun, 10> kNouns = {{{"farmer", "person"}, {"teacher", "person"}, {"doctor", "person"}, {"child", "person"},
                                          {"woman", "person"}, {"cat", "animal"}, {"dog", "animal"}, {"horse", "animal"},
                                          {"bird", "animal"}, {"rabbit", "animal"}}};
// Adjectives in opposite pairs: 2i and 2i+1.
constexpr std::array<const char*, 8> kAdjectives = {"young", "old", "tall", "short", "happy", "sad", "quiet", "loud"};
// Activities that cannot happen at the same time.
constexpr std::array<const char*, 6> kActivities = {"sleeping", "running", "eating", "swimming", "dancing", "singing"};
constexpr std::array<const char*, 6> kPlaces = {"in the kitchen", "in the park", "at the beach", "near the river", "in the garden",
                                                "on the bridge"};
constexpr std::array<const char*, 6> kDetails = {"in the morning", "after lunch", "with a friend", "because it is warm",
                                                 "for the first time", "at night"};
constexpr std::array<const char*, 4> kProperties = {"hungry", "tired", "famous", "curious"};
constexpr std::array<const char*, 3> kLabels = {"entailment", "neutral", "contradiction"};

// splitmix64: a small, fully specified generator (the same numbers on every platform and compiler).
class Stream {
 public:
  explicit Stream(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  // An index below n other than `not_this`.
  std::size_t other(std::size_t n, std::size_t not_this) { return (not_this + 1 + below(n - 1)) % n; }

 private:
  std::uint64_t state_;
};

struct Pair {
  std::string premise, hypothesis;
  std::size_t label;  // index into kLabels
};

Pair make_pair(Stream& s) {
  const std::size_t adj = s.below(kAdjectives.size()), noun = s.below(kNouns.size()), act = s.below(kActivities.size()),
                    place = s.below(kPlaces.size());
  const Noun& n = kNouns[noun];
  const std::string a = kAdjectives[adj], w = n.word, v = kActivities[act], p = kPlaces[place];
  Pair out;
  out.premise = fmt::format("the {} {} is {} {}", a, w, v, p);
  out.label = s.below(kLabels.size());
  const bool person = std::string(n.kind) == "person";
  switch (out.label) {
    case 0:  // entailment
      switch (s.below(5)) {
        case 0: out.hypothesis = fmt::format("the {} is {} {}", w, v, p); break;
        case 1: out.hypothesis = fmt::format("the {} {} is {}", a, n.kind, v); break;
        case 2: out.hypothesis = fmt::format("the {} {} is {}", a, w, v); break;
        case 3: out.hypothesis = fmt::format("{} is {} {}", person ? "someone" : "an animal", v, p); break;
        default: out.hypothesis = fmt::format("the {} is not {}", w, kActivities[s.other(kActivities.size(), act)]); break;
      }
      break;
    case 1:  // neutral
      switch (s.below(4)) {
        case 0: out.hypothesis = fmt::format("the {} {} is {} {} {}", a, w, v, p, kDetails[s.below(kDetails.size())]); break;
        case 1: out.hypothesis = fmt::format("the {} {} is {} {}", a, kNouns[s.other(kNouns.size(), noun)].word, v, p); break;
        case 2: out.hypothesis = fmt::format("the {} is {}", w, kProperties[s.below(kProperties.size())]); break;
        default: out.hypothesis = fmt::format("the {} is {} {}", w, v, kDetails[s.below(kDetails.size())]); break;
      }
      break;
    default:  // contradiction
      switch (s.below(5)) {
        case 0: out.hypothesis = fmt::format("the {} {} is {} {}", a, w, kActivities[s.other(kActivities.size(), act)], p); break;
        case 1: out.hypothesis = fmt::format("the {} is not {}", w, v); break;
        case 2: out.hypothesis = fmt::format("the {} {} is {}", kAdjectives[adj ^ 1], w, v); break;
        case 3: out.hypothesis = fmt::format("the {} is {} {}", w, v, kPlaces[s.other(kPlaces.size(), place)]); break;
        default: out.hypothesis = fmt::format("nobody is {} {}", v, p); break;
      }
      break;
  }
  return out;
}

// `count` distinct pairs, none of them in `exclude`; every pair written is added to `exclude`.
std::vector<Pair> draw(std::uint64_t seed, std::int64_t count, std::set<std::pair<std::string, std::string>>& exclude) {
  Stream s(seed);
  std::vector<Pair> pairs;
  for (std::int64_t tries = 0; static_cast<std::int64_t>(pairs.size()) < count; ++tries) {
    BELLOWS_CHECK(tries < 100 * count, fmt::format("the grammar gave only {} distinct pairs of {}", pairs.size(), count),
                  "ask for fewer pairs");
    Pair p = make_pair(s);
    if (!exclude.emplace(p.premise, p.hypothesis).second) continue;
    pairs.push_back(std::move(p));
  }
  return pairs;
}

void write_tsv(const fs::path& path, const std::vector<Pair>& pairs) {
  std::string text = "premise\thypothesis\tlabel\n";
  for (const auto& p : pairs) text += fmt::format("{}\t{}\t{}\n", p.premise, p.hypothesis, kLabels[p.label]);
  write_file_atomically(path, text);  // kResource error naming the file when it cannot be written
}

}  // namespace

std::string generate_nli_encoder(const GenOptions& options) {
  std::error_code ec;
  fs::create_directories(options.out, ec);
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create {}: {}", options.out.string(), ec.message()), "check the path");
  const std::int64_t train_pairs = options.quick ? 600 : 3000;
  const std::int64_t pretrain_pairs = options.quick ? 1500 : 6000;
  std::set<std::pair<std::string, std::string>> seen;
  const std::vector<Pair> train = draw(data::mix_seed(options.seed, 1), train_pairs, seen);
  const std::vector<Pair> pretrain = draw(data::mix_seed(options.seed, 2), pretrain_pairs, seen);
  write_tsv(options.out / "train.tsv", train);
  write_tsv(options.out / "pretrain.tsv", pretrain);
  std::array<std::int64_t, 3> counts{};
  for (const auto& p : train) ++counts[p.label];
  return fmt::format("nli-encoder: {} pairs in {} (entailment {}, neutral {}, contradiction {}), {} other pairs in {}", train.size(),
                     (options.out / "train.tsv").string(), counts[0], counts[1], counts[2], pretrain.size(),
                     (options.out / "pretrain.tsv").string());
}

}  // namespace bellows::example_data
