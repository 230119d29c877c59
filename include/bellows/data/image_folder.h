// Image classification data from a folder: one subfolder per class (torchvision's ImageFolder layout) or a
// CSV index of "path,label". Samples travel as uint8 [C, H, W] through decode, resize, crop and flip, and
// become normalised floats only in finish_on_device, on the training device: a quarter of the bytes to move.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bellows/data/dataset.h"  // defines: Dataset, Example, FetchContext

namespace bellows::data {

struct ImageFolderOptions {
  std::filesystem::path root;
  // Optional CSV index with the header "path,label": paths relative to root, label a class name or an integer.
  // Empty: class-per-subfolder layout (sorted class names -> 0..K-1; files ending .png .jpg .jpeg in any case,
  // searched recursively, sorted).
  std::filesystem::path index;
  // Optional fixed class list (label i = classes[i]). Then every class folder / index label must be one of them
  // (unknown ones are kData errors), and a validation folder missing a class still numbers the others the same
  // as training. Empty: the sorted class names found (or, for an index of integers, "0".."max").
  std::vector<std::string> classes;
  int channels = 3;                  // 1 or 3
  std::vector<std::int64_t> resize;  // [H, W], or [S]: shorter side to S keeping the aspect ratio; empty: none
  std::vector<std::int64_t> crop;    // [h, w]; empty: none. Training: random crop; evaluation: center crop
  bool random_crop = true;           // false: center crop also in training
  bool hflip = false;                // training: horizontal flip with p = 0.5
  // When resizing, decode JPEGs at the smallest DCT scale (n/8) that is still at least the resized size:
  // several times cheaper for large photos and small targets, pixels differ slightly from a full decode.
  bool jpeg_dct_scaling = true;
  std::vector<double> mean = {0.485, 0.456, 0.406};  // on [0, 1] values; one per channel
  std::vector<double> std = {0.229, 0.224, 0.225};
};

class ImageFolderDataset final : public Dataset {
 public:
  // Lists the images (and checks that each indexed one exists); decodes nothing. kConfig for bad options,
  // kData for a missing root, empty class folders, bad index lines and unknown labels.
  explicit ImageFolderDataset(ImageFolderOptions options);

  std::int64_t size() const override { return static_cast<std::int64_t>(files_.size()); }
  // "x": uint8 [C, H, W] decoded, resized, cropped, flipped; "y": int64 scalar label. Stage times go to
  // context.times (read, decode, transform); random draws come from mix_seed(context.seed, index).
  Example get(std::int64_t index, FetchContext& context) const override;
  // As the default, but images of different sizes are reported with the options that fix it.
  Batch get_batch(std::span<const std::int64_t> indices, FetchContext& context) const override;
  std::string describe(std::int64_t index) const override;  // the image's path: "<root>/cat/0003.png"
  std::string name() const override;                        // "image folder <root> (<N> images, <K> classes)"
  // "x" -> float32 (x / 255 - mean) / std, on whatever device the batch is on.
  void finish_on_device(Batch& batch) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<std::int64_t>& labels() const { return labels_; }
  at::Tensor class_labels() const override;  // labels() as int64 [N], for class-balanced sampling
  const std::vector<std::string>& files() const { return files_; }  // relative to root, generic separators
  const ImageFolderOptions& options() const { return options_; }

 private:
  void list_subfolders();
  void read_index();
  at::Tensor transform(at::Tensor hwc, const std::string& file, std::uint64_t seed, bool train) const;
  std::pair<at::Tensor, at::Tensor> affine_on(c10::Device device) const;

  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<std::int64_t> labels_;
  std::vector<float> scale_, shift_;  // per channel: x * scale + shift == (x / 255 - mean) / std
  mutable std::mutex affine_mutex_;   // guards the per-device copies of scale_ and shift_
  mutable std::vector<std::pair<c10::Device, std::pair<at::Tensor, at::Tensor>>> affine_;
};

std::shared_ptr<ImageFolderDataset> make_image_folder_dataset(const ImageFolderOptions& options);

}  // namespace bellows::data
