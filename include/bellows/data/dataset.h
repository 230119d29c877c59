// A Dataset: random access to samples by index, safe to call from several loader workers at once. Every
// format (CSV, NPY/NPZ, NetCDF, image folders, windows, the stream buffer) is one; the Loader turns a
// Dataset plus a Sampler into batches. All sources name their tensors "x" (inputs) and "y" (targets), so
// the built-in tasks work with any of them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bellows/data/batch.h"           // defines: Batch
#include "bellows/data/pipeline_stats.h"  // defines: StageTimes

namespace bellows::data {

class ResidentData;  // data/resident.h

// One sample: named tensors without the batch dimension.
using Example = std::map<std::string, at::Tensor>;

// What one fetch call needs besides the indices: where to add stage times, and the seed of this epoch's
// random augmentation. Augmentations draw from sample_generator(seed, index), so a sample is transformed
// the same way whichever worker loads it, and a resumed run repeats the draws exactly.
struct FetchContext {
  StageTimes times;
  std::uint64_t seed = 0;  // the loader sets this to mix(base seed, epoch)
  bool train = true;       // false: evaluation (no random augmentation; center crop)
  double pad_value = 0;    // collation of variable-length samples (see collate.h)
};

// A deterministic 64-bit mix (splitmix64 of seed and index), for per-sample random streams.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t index);

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::int64_t size() const = 0;

  // Sample `index` in [0, size()). Thread-safe. Errors are kData and name the file and the position
  // (row, byte offset, variable, image path) of the bad input.
  virtual Example get(std::int64_t index, FetchContext& context) const = 0;

  // The samples `indices`, collated into one Batch. The default calls get() for each and collate(); datasets
  // held as tensors override it with one gather per tensor. Thread-safe.
  virtual Batch get_batch(std::span<const std::int64_t> indices, FetchContext& context) const;

  // Where sample `index` comes from, for error messages: "train.csv line 1236", "images/cat/0003.png".
  virtual std::string describe(std::int64_t index) const = 0;

  // A short description of the whole dataset: "csv data/train.csv (200000 rows, 64 features)".
  virtual std::string name() const = 0;

  // The last step, run on the batch after it reached the training device: e.g. images travel as uint8 and
  // become normalised floats here, which moves a quarter of the bytes through host memory and the copy.
  virtual void finish_on_device(Batch& batch) const {}

  // The class label (int64 [size()]) of every sample, when the dataset knows them without loading the
  // samples (a weighted sampler balances classes with them); undefined tensor otherwise.
  virtual at::Tensor class_labels() const { return {}; }

  // data.on_device (data/resident.h): the bytes this dataset's tensors take when placed on a device (after the
  // dtype casts its batches get), or -1 when its samples are not in-memory tensors (read or decoded per sample).
  virtual std::int64_t resident_bytes() const { return -1; }
  // Those tensors on `device`, placed once (shared by every caller and view) and gathered there; null when
  // resident_bytes() is -1.
  virtual std::shared_ptr<const ResidentData> place(c10::Device device) const { return nullptr; }
};

// What a data source knows about its samples beyond their shapes, handed to a model before it is built
// (models::ModelContext), so that no model needs to know the concrete source types. Filled by the source's
// registry entry (data/source_registry.h); fields the source does not know stay empty.
struct GridFacts {
  std::vector<double> lat, lon;                               // coordinates in degrees (empty: the file has none)
  std::vector<std::string> input_channels, target_channels;   // channel names, in tensor order
};
struct TextFacts {
  std::int64_t vocab_size = 0;
  std::int64_t num_classes = 0;
  std::int64_t pad_id = 0;
  std::int64_t max_len = 0;  // tokens per sample
};
struct DataFacts {
  std::string source;                               // the dataset's name, for messages ("" without data)
  std::optional<std::vector<std::string>> classes;  // the source's class list, in label order (image folders)
  std::optional<GridFacts> grid;                    // gridded sources (NetCDF)
  std::optional<TextFacts> text;                    // tokenised text sources
  // Categorical table columns (CSV): column -> its values in index order (the numbers the samples hold).
  std::map<std::string, std::vector<std::string>> categories;
};

// Sample 0 of `dataset` as a batch of one, fetched as for evaluation (no random augmentation): what models and
// the run check their widths against before the first step. The dataset must not be empty.
Batch first_sample(const Dataset& dataset);

}  // namespace bellows::data
