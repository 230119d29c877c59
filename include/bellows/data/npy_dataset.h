// A Dataset over NumPy arrays (.npy files, .npz members) that share their first dimension: the dataset built on
// the NPY/NPZ readers of npy.h.
//   auto ds = make_npy_dataset({{"x", "train.npz:x"}, {"y", "train.npz:y"}});
#pragma once

#include <map>
#include <memory>
#include <string>

#include "bellows/data/dataset.h"  // defines: Dataset
#include "bellows/data/npy.h"      // defines: NpyReadOptions, read_npy, read_npz_array

namespace bellows::data {

// `arrays` maps tensor names ("x", "y") to a source: "file.npy", "file.npz:array_name", or "file.npz" (the array
// named like the tensor). Floating arrays become float32 per batch; describe(i) is "<file of the first tensor>
// index i".
std::shared_ptr<Dataset> make_npy_dataset(const std::map<std::string, std::string>& arrays,
                                          NpyReadOptions options = {});

}  // namespace bellows::data
