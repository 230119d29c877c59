// The image-folder dataset: listing (subfolders or a CSV index), then per sample read -> decode -> resize ->
// crop -> flip, all in uint8, and normalisation on the device; see image_folder.h.
#include "bellows/data/image_folder.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "bellows/data/collate.h"      // defines: collate
#include "bellows/data/image_codec.h"  // defines: decode_image
#include "bellows/util/check.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::data {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// --- options ---

std::string list(const std::vector<std::int64_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

void validate(const ImageFolderOptions& o) {
  BELLOWS_CHECK_CONFIG(o.channels == 1 || o.channels == 3, fmt::format("data.images.channels is {}", o.channels),
                       "set data.images.channels to 1 (gray) or 3 (RGB)");
  const bool positive_resize = std::all_of(o.resize.begin(), o.resize.end(), [](std::int64_t v) { return v > 0; });
  BELLOWS_CHECK_CONFIG(o.resize.size() <= 2 && positive_resize, fmt::format("data.images.resize is {}", list(o.resize)),
                       "give [H, W], or [S] to scale the shorter side to S, or [] for no resize");
  const bool positive_crop = std::all_of(o.crop.begin(), o.crop.end(), [](std::int64_t v) { return v > 0; });
  BELLOWS_CHECK_CONFIG((o.crop.empty() || o.crop.size() == 2) && positive_crop,
                       fmt::format("data.images.crop is {}", list(o.crop)), "give [h, w], or [] for no crop");
  if (!o.crop.empty() && !o.resize.empty()) {
    // [S] guarantees only S on both sides.
    const std::int64_t h = o.resize.front(), w = o.resize.back();
    BELLOWS_CHECK_CONFIG(o.crop[0] <= h && o.crop[1] <= w,
                         fmt::format("data.images.crop {} is larger than the resized image {}", list(o.crop),
                                     o.resize.size() == 1 ? fmt::format("(shorter side {})", h) : list(o.resize)),
                         "make data.images.crop at most data.images.resize on each side");
  }
  const auto n = static_cast<std::size_t>(o.channels);
  BELLOWS_CHECK_CONFIG(o.mean.size() == n && o.std.size() == n,
                       fmt::format("data.images.mean has {} values and data.images.std {}, but there are {} channels",
                                   o.mean.size(), o.std.size(), n),
                       o.channels == 1 ? "give one value each for gray images, e.g. mean: [0.5], std: [0.25]"
                                       : "give one value per channel (R, G, B)");
  for (std::size_t c = 0; c < n; ++c) {
    BELLOWS_CHECK_CONFIG(o.std[c] > 0, fmt::format("data.images.std[{}] is {}", c, o.std[c]),
                         "standard deviations must be positive");
  }
}

// --- listing ---

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

bool is_hidden(const fs::path& p) {
  return p.filename().string().starts_with(".");
}

// Image files below `dir` (recursively, following links), relative to `root`, sorted.
std::vector<std::string> images_below(const fs::path& root, const fs::path& dir) {
  std::vector<std::string> out;
  try {
    const auto opts = fs::directory_options::follow_directory_symlink;
    for (auto it = fs::recursive_directory_iterator(dir, opts); it != fs::recursive_directory_iterator(); ++it) {
      if (is_hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && is_image_file(it->path())) {
        out.push_back(it->path().lexically_relative(root).generic_string());
      }
    }
  } catch (const fs::filesystem_error& e) {
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("cannot list {}: {}", dir.string(), e.code().message()),
                 "check that the image folder is readable");
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string trim(std::string s) {
  const auto not_space = [](unsigned char ch) { return !std::isspace(ch); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

// One CSV line: comma-separated, fields optionally in double quotes ("" inside quotes is a quote).
std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        fields.back() += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      fields.emplace_back();
    } else {
      fields.back() += ch;
    }
  }
  for (auto& f : fields) f = trim(std::move(f));
  return fields;
}

bool is_integer(const std::string& s) {
  return !s.empty() && s.size() <= 18 &&
         std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch); });
}

std::string known_classes(const std::vector<std::string>& classes) {
  constexpr std::size_t kShown = 10;
  const std::vector<std::string> shown(classes.begin(), classes.begin() + std::min(classes.size(), kShown));
  return fmt::format("{}{}", fmt::join(shown, ", "), classes.size() > kShown ? ", ..." : "");
}

// --- per-sample work ---

std::vector<std::uint8_t> read_file(const fs::path& path, const std::string& file) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  BELLOWS_CHECK_DATA(f != nullptr, fmt::format("{}: cannot open: {}", file, std::strerror(errno)),
                     "check that the image exists and is readable");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
  struct stat st {};
  const bool sized = ::fstat(fileno(f), &st) == 0;
  std::vector<std::uint8_t> bytes(sized ? static_cast<std::size_t>(st.st_size) : 0);
  const std::size_t got = std::fread(bytes.data(), 1, bytes.size(), f);
  BELLOWS_CHECK_DATA(sized && got == bytes.size() && !std::ferror(f),
                     fmt::format("{}: read {} of {} bytes: {}", file, got, bytes.size(), std::strerror(errno)),
                     "check the file and the storage it is on");
  return bytes;
}

// Draws for one sample's augmentation: the k-th draw depends only on (seed, k), so neither the worker that
// loads the sample nor the order of loading changes it.
class SampleRandom {
 public:
  explicit SampleRandom(std::uint64_t seed) : seed_(seed) {}
  // Uniform in [0, n].
  std::int64_t uniform(std::int64_t n) {
    const auto wide = static_cast<unsigned __int128>(next()) * static_cast<std::uint64_t>(n + 1);
    return static_cast<std::int64_t>(wide >> 64);
  }
  bool coin() { return (next() >> 63) != 0; }

 private:
  std::uint64_t next() { return mix_seed(seed_, counter_++); }
  std::uint64_t seed_;
  std::uint64_t counter_ = 0;
};

// Output size of `resize` for an image of height x width: [H, W] as given; [S] puts the shorter side at S
// and truncates the longer one (torchvision's rule).
std::pair<std::int64_t, std::int64_t> resized_size(const std::vector<std::int64_t>& resize, std::int64_t height,
                                                   std::int64_t width) {
  if (resize.size() == 2) return {resize[0], resize[1]};
  const std::int64_t s = resize[0];
  if (height <= width) return {s, static_cast<std::int64_t>(static_cast<double>(s) * width / height)};
  return {static_cast<std::int64_t>(static_cast<double>(s) * height / width), s};
}

// ATen resizes uint8 natively: _upsample_bilinear2d_aa has a CPU uint8 kernel (the one torchvision's uint8
// resize has used since PyTorch 2.1), fastest on channels_last input, and an HWC image viewed as [1, C, H, W]
// is exactly channels_last: no copy in, none out. With antialias it matches PIL's bilinear when shrinking.
at::Tensor resize_hwc(const at::Tensor& hwc, std::int64_t height, std::int64_t width) {
  const at::Tensor nchw = hwc.permute({2, 0, 1}).unsqueeze(0);
  const at::Tensor out = at::_upsample_bilinear2d_aa(nchw, {height, width}, /*align_corners=*/false);
  return out.squeeze(0).permute({1, 2, 0});
}

}  // namespace

// --- construction ---

ImageFolderDataset::ImageFolderDataset(ImageFolderOptions options) : options_(std::move(options)) {
  validate(options_);
  const fs::path& root = options_.root;
  std::error_code ec;
  BELLOWS_CHECK_DATA(
      fs::is_directory(root, ec),
      fmt::format("image folder {} {}", root.string(), fs::exists(root, ec) ? "is not a directory" : "does not exist"),
      "set data.path to a folder with one subfolder of images per class");
  if (options_.index.empty()) {
    list_subfolders();
  } else {
    read_index();
  }
  const auto n = static_cast<std::size_t>(options_.channels);
  for (std::size_t c = 0; c < n; ++c) {
    // In double, then rounded once: x * scale + shift is (x / 255 - mean) / std to float precision.
    scale_.push_back(static_cast<float>(1.0 / (255.0 * options_.std[c])));
    shift_.push_back(static_cast<float>(-options_.mean[c] / options_.std[c]));
  }
}

void ImageFolderDataset::list_subfolders() {
  const fs::path& root = options_.root;
  std::vector<std::string> folders;
  try {
    for (const auto& entry : fs::directory_iterator(root)) {
      if (entry.is_directory() && !is_hidden(entry.path())) folders.push_back(entry.path().filename().string());
    }
  } catch (const fs::filesystem_error& e) {
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("cannot list {}: {}", root.string(), e.code().message()),
                 "check that the image folder is readable");
  }
  std::sort(folders.begin(), folders.end());
  BELLOWS_CHECK_DATA(!folders.empty(), fmt::format("image folder {} has no class subfolders", root.string()),
                     "put the images of each class in a subfolder named after it (root/cat/1.png), or give an "
                     "index CSV (data.images.index)");
  classes_ = options_.classes.empty() ? folders : options_.classes;
  for (const std::string& folder : folders) {
    const auto it = std::find(classes_.begin(), classes_.end(), folder);
    BELLOWS_CHECK_DATA(it != classes_.end(),
                       fmt::format("{}: class folder '{}' is not one of the training data's classes", root.string(), folder),
                       fmt::format("known classes: {} (a validation folder takes the training data's)", known_classes(classes_)));
    const std::vector<std::string> images = images_below(root, root / folder);
    BELLOWS_CHECK_DATA(!images.empty(),
                       fmt::format("class folder {} has no images (.png, .jpg, .jpeg)", (root / folder).string()),
                       "add images to it or remove the folder");
    const auto label = static_cast<std::int64_t>(it - classes_.begin());
    for (const std::string& image : images) {
      files_.push_back(image);
      labels_.push_back(label);
    }
  }
}

void ImageFolderDataset::read_index() {
  const fs::path& root = options_.root;
  const std::string index = options_.index.string();
  std::ifstream in(options_.index, std::ios::binary);
  BELLOWS_CHECK_DATA(in.good(), fmt::format("cannot open the image index {}: {}", index, std::strerror(errno)),
                     "set data.images.index to a CSV file with the header path,label");

  // Header: the columns path and label, in either order, nothing else.
  std::string line;
  std::getline(in, line);
  if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 byte order mark
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string> header = split_csv_line(line);
  int path_col = -1, label_col = -1;
  for (std::size_t c = 0; c < header.size(); ++c) {
    int& col = header[c] == "path" ? path_col : header[c] == "label" ? label_col : path_col;
    BELLOWS_CHECK_DATA((header[c] == "path" || header[c] == "label") && col < 0,
                       fmt::format("{} line 1: {} column '{}'", index,
                                   header[c] == "path" || header[c] == "label" ? "repeated" : "unknown", header[c]),
                       "the index's header must be exactly: path,label");
    col = static_cast<int>(c);
  }
  BELLOWS_CHECK_DATA(
      path_col >= 0 && label_col >= 0,
      fmt::format("{} line 1: header '{}' lacks the {} column", index, line, path_col < 0 ? "path" : "label"),
      "the index's header must be exactly: path,label");

  std::vector<std::string> names;
  std::vector<std::int64_t> lines;
  for (std::int64_t number = 2; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    const std::vector<std::string> fields = split_csv_line(line);
    BELLOWS_CHECK_DATA(
        fields.size() == header.size(),
        fmt::format("{} line {}: {} fields, the header has {}", index, number, fields.size(), header.size()),
        "give each image as path,label (quote paths that contain commas)");
    const std::string& path = fields[static_cast<std::size_t>(path_col)];
    std::error_code ec;
    BELLOWS_CHECK_DATA(
        !path.empty() && fs::is_regular_file(root / path, ec),
        fmt::format("{} line {}: image '{}' does not exist under {}", index, number, path, root.string()),
        "paths in the index are relative to the image folder (data.path)");
    BELLOWS_CHECK_DATA(!fields[static_cast<std::size_t>(label_col)].empty(),
                       fmt::format("{} line {}: empty label", index, number), "give a class name or number per image");
    files_.push_back(fs::path(path).generic_string());
    names.push_back(fields[static_cast<std::size_t>(label_col)]);
    lines.push_back(number);
  }
  BELLOWS_CHECK_DATA(!files_.empty(), fmt::format("image index {} lists no images", index),
                     "add lines path,label after the header");

  // Labels: integers are class numbers; otherwise class names, numbered in sorted order. With a configured
  // class list, a label is a class name or, failing that, a class number.
  const bool numbered = std::all_of(names.begin(), names.end(), is_integer);
  classes_ = options_.classes;
  if (classes_.empty() && numbered) {
    std::int64_t top = 0;
    for (const auto& n : names) top = std::max<std::int64_t>(top, std::stoll(n));
    BELLOWS_CHECK_DATA(top < (1 << 20), fmt::format("image index {}: label {} is implausibly large", index, top),
                       "integer labels are class numbers 0..K-1");
    for (std::int64_t k = 0; k <= top; ++k) classes_.push_back(std::to_string(k));
  } else if (classes_.empty()) {
    const std::set<std::string> unique(names.begin(), names.end());
    classes_.assign(unique.begin(), unique.end());
  }
  std::map<std::string, std::int64_t> number_of;
  for (std::size_t k = 0; k < classes_.size(); ++k) number_of.emplace(classes_[k], static_cast<std::int64_t>(k));
  const auto count = static_cast<std::int64_t>(classes_.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto it = number_of.find(names[i]);
    std::int64_t label = it != number_of.end() ? it->second : -1;
    if (label < 0 && is_integer(names[i]) && std::stoll(names[i]) < count) label = std::stoll(names[i]);
    BELLOWS_CHECK_DATA(label >= 0, fmt::format("{} line {}: unknown label '{}'", index, lines[i], names[i]),
                       fmt::format("known classes: {} (a validation index takes the training data's)", known_classes(classes_)));
    labels_.push_back(label);
  }
}

at::Tensor ImageFolderDataset::class_labels() const { return at::tensor(labels_, at::kLong); }

std::shared_ptr<ImageFolderDataset> make_image_folder_dataset(const ImageFolderOptions& options) {
  return std::make_shared<ImageFolderDataset>(options);
}

// --- samples ---

Example ImageFolderDataset::get(std::int64_t index, FetchContext& context) const {
  BELLOWS_CHECK(index >= 0 && index < size(), fmt::format("{}: sample {} out of range [0, {})", name(), index, size()),
                "report this bug");
  const std::string& file = files_[static_cast<std::size_t>(index)];

  auto start = Clock::now();
  const std::vector<std::uint8_t> bytes = read_file(options_.root / file, file);
  context.times.read += seconds_since(start);

  // A resize follows: a JPEG may be decoded at a reduced DCT scale that still covers it.
  start = Clock::now();
  const bool reduce = options_.jpeg_dct_scaling && !options_.resize.empty();
  const int min_h = reduce ? static_cast<int>(options_.resize.front()) : 0;
  const int min_w = reduce ? static_cast<int>(options_.resize.back()) : 0;
  at::Tensor image = decode_image(bytes, file, options_.channels, min_h, min_w);
  context.times.decode += seconds_since(start);

  start = Clock::now();
  at::Tensor x =
      transform(std::move(image), file, mix_seed(context.seed, static_cast<std::uint64_t>(index)), context.train);
  context.times.transform += seconds_since(start);
  return {{"x", std::move(x)}, {"y", at::scalar_tensor(labels_[static_cast<std::size_t>(index)], at::kLong)}};
}

at::Tensor ImageFolderDataset::transform(at::Tensor hwc, const std::string& file, std::uint64_t seed,
                                         bool train) const {
  SampleRandom random(seed);
  if (!options_.resize.empty()) {
    const auto [h, w] = resized_size(options_.resize, hwc.size(0), hwc.size(1));
    if (h != hwc.size(0) || w != hwc.size(1)) hwc = resize_hwc(hwc, h, w);
  }
  if (!options_.crop.empty()) {
    const std::int64_t ch = options_.crop[0], cw = options_.crop[1];
    const std::int64_t h = hwc.size(0), w = hwc.size(1);
    BELLOWS_CHECK_DATA(h >= ch && w >= cw,
                       fmt::format("{}: image is {}x{}{}, smaller than the crop {}x{}", file, h, w,
                                   options_.resize.empty() ? "" : " after resizing", ch, cw),
                       "set data.images.resize to at least the crop size, or lower data.images.crop");
    const bool random_crop = train && options_.random_crop;
    const std::int64_t top = random_crop ? random.uniform(h - ch) : (h - ch) / 2;
    const std::int64_t left = random_crop ? random.uniform(w - cw) : (w - cw) / 2;
    hwc = hwc.narrow(0, top, ch).narrow(1, left, cw);
  }
  at::Tensor chw = hwc.permute({2, 0, 1});
  if (train && options_.hflip && random.coin()) chw = chw.flip({2});
  return chw.contiguous();
}

Batch ImageFolderDataset::get_batch(std::span<const std::int64_t> indices, FetchContext& context) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (const std::int64_t i : indices) examples.push_back(get(i, context));
  // collate() would reject different sizes too, but only here is the fix known.
  const at::Tensor& first = examples.front().at("x");
  for (std::size_t k = 1; k < examples.size(); ++k) {
    const at::Tensor& x = examples[k].at("x");
    BELLOWS_CHECK_DATA(
        x.sizes() == first.sizes(),
        fmt::format("images of one batch differ in size: {} is {}x{}, {} is {}x{} (after transforms)",
                    describe(indices[0]), first.size(1), first.size(2), describe(indices[k]), x.size(1), x.size(2)),
        "set data.images.resize or data.images.crop so that every image comes out the same size "
        "(resize [S] alone keeps each image's aspect ratio)");
  }
  const auto start = Clock::now();
  Batch batch =
      collate(examples, CollateOptions{context.pad_value}, [&](std::size_t k) { return describe(indices[k]); });
  context.times.collate += seconds_since(start);
  return batch;
}

std::string ImageFolderDataset::describe(std::int64_t index) const {
  if (index < 0 || index >= size()) return fmt::format("{} image {}", options_.root.string(), index);
  return (options_.root / files_[static_cast<std::size_t>(index)]).string();
}

std::string ImageFolderDataset::name() const {
  return fmt::format("image folder {} ({} images, {} classes)", options_.root.string(), size(), classes_.size());
}

// --- on the device ---

std::pair<at::Tensor, at::Tensor> ImageFolderDataset::affine_on(c10::Device device) const {
  // Made once per device: a fresh host-to-device copy per batch would wait for the device's queue.
  std::lock_guard<std::mutex> lock(affine_mutex_);
  for (const auto& [d, affine] : affine_) {
    if (d == device) return affine;
  }
  const auto c = static_cast<std::int64_t>(scale_.size());
  at::Tensor scale = at::tensor(at::ArrayRef<float>(scale_)).view({1, c, 1, 1}).to(device);
  at::Tensor shift = at::tensor(at::ArrayRef<float>(shift_)).view({1, c, 1, 1}).to(device);
  affine_.emplace_back(device, std::make_pair(scale, shift));
  return {scale, shift};
}

void ImageFolderDataset::finish_on_device(Batch& batch) const {
  const auto it = batch.tensors.find("x");
  BELLOWS_CHECK(it != batch.tensors.end() && it->second.scalar_type() == at::kByte && it->second.dim() == 4,
                "image batch without a uint8 [B, C, H, W] 'x' in finish_on_device (called twice?)", "report this bug");
  const auto [scale, shift] = affine_on(it->second.device());
  it->second = at::addcmul(shift, it->second.to(at::kFloat), scale);
}

}  // namespace bellows::data
