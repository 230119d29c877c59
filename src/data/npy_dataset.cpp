// The dataset over NumPy arrays: named .npy files or .npz members sharing their first dimension, read (mapped by
// default) through the NPY/NPZ readers of npy.h and served by a TensorDataset; see npy_dataset.h.
#include "bellows/data/npy_dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string_view>

#include "bellows/data/tensor_dataset.h"  // defines: TensorDataset
#include "bellows/util/check.h"

namespace bellows::data {

std::shared_ptr<Dataset> make_npy_dataset(const std::map<std::string, std::string>& arrays, NpyReadOptions options) {
  BELLOWS_CHECK_CONFIG(!arrays.empty(), "npy dataset: no arrays given",
                       "map tensor names to files, e.g. x: train_x.npy, y: train.npz:y");
  std::map<std::string, at::Tensor> tensors;
  std::vector<std::string> parts;
  std::string first_file;
  for (const auto& [name, source] : arrays) {
    // "file.npz:array", "file.npz" (the array named like the tensor), or "file.npy".
    const auto colon = source.rfind(':');
    std::string file = source, array;
    if (colon != std::string::npos && std::string_view(source).substr(0, colon).ends_with(".npz")) {
      file = source.substr(0, colon);
      array = source.substr(colon + 1);
    } else if (source.ends_with(".npz")) {
      array = name;
    }
    tensors.emplace(name, array.empty() ? read_npy(file, options) : read_npz_array(file, array, options));
    parts.push_back(fmt::format("{}={}", name, array.empty() ? file : fmt::format("{}:{}", file, array)));
    if (first_file.empty()) first_file = file;
  }
  const std::int64_t n = tensors.begin()->second.dim() > 0 ? tensors.begin()->second.size(0) : 0;
  TensorDatasetOptions o;
  o.name = fmt::format("npy {} ({} samples)", fmt::join(parts, ", "), n);
  o.float_dtype = at::kFloat;
  o.describe = [first_file](std::int64_t i) { return fmt::format("{} index {}", first_file, i); };
  return std::make_shared<TensorDataset>(std::move(tensors), std::move(o));
}

}  // namespace bellows::data
