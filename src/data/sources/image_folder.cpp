// data.source: image_folder -- PNG/JPEG images in class subfolders or listed by a CSV index; resize, crop and
// flip on uint8, normalised after the device copy. Its class list is the fact a classifier sizes its head by.
#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/config/paths.h"    // defines: check_path_exists
#include "bellows/data/image_folder.h"
#include "bellows/data/source_registry.h"

namespace bellows::data {
namespace {

// The data.images.* keys of ImageFolderOptions, bound once (config/binding.h).
const config::Binding<ImageFolderOptions>& image_folder_binding() {
  using O = ImageFolderOptions;
  return config::bound<O>("data.images.", [](config::Binding<O>& b) {
    b.key("index", &O::index,
          "CSV index (path,label) instead of class subfolders; its image paths are relative to data.path")
        .file_path();
    b.key("channels", &O::channels, "1 (gray) or 3 (RGB)").min(1).max(3);
    b.key("resize", &O::resize, "[H, W], or [S] for the shorter side (empty: none)").min(1);
    b.key("crop", &O::crop, "[h, w] crop: random in training, center in evaluation").min(1);
    b.key("random_crop", &O::random_crop, "random crop in training (false: center)");
    b.key("hflip", &O::hflip, "random horizontal flip in training");
    b.key("mean", &O::mean, "per-channel mean on [0, 1] values");
    b.key("std", &O::std, "per-channel std on [0, 1] values").min(1e-12);
  });
}

SourceEntry image_folder_source() {
  SourceEntry e;
  e.name = "image_folder";
  e.help = "PNG/JPEG images in class subfolders or a CSV index";
  e.path_hint = "set data.path to the image folder";
  e.add_keys = [](config::Schema& s) { image_folder_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    ImageFolderOptions o = image_folder_binding().read(*r.config);
    o.root = r.path;
    if (!o.index.empty()) {
      config::check_path_exists(*r.config, "data.images.index", o.index, ErrorKind::kData,
                                "set data.images.index to a CSV file with the header path,label");
    }
    // Gray images with the RGB (ImageNet) defaults: their channel average.
    if (o.channels == 1 && o.mean == std::vector<double>{0.485, 0.456, 0.406}) o.mean = {0.449};
    if (o.channels == 1 && o.std == std::vector<double>{0.229, 0.224, 0.225}) o.std = {0.226};
    // A validation folder numbers its classes as training does, even when it lacks one of them.
    if (const auto* train = dynamic_cast<const ImageFolderDataset*>(r.like)) o.classes = train->classes();
    return make_image_folder_dataset(o);
  };
  e.facts = [](const Dataset& d) {
    DataFacts f;
    if (const auto* images = dynamic_cast<const ImageFolderDataset*>(&d)) f.classes = images->classes();
    return f;
  };
  return e;
}

const SourceRegistrar kImageFolderRegistered(image_folder_source());

}  // namespace
}  // namespace bellows::data
