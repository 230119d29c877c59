// data.source: image_folder -- PNG/JPEG images in class subfolders or listed by a CSV index; resize, crop and
// flip on uint8, normalised after the device copy. Its class list is the fact a classifier sizes its head by.
#include "bellows/data/image_folder.h"
#include "bellows/data/source_registry.h"

namespace bellows::data {
namespace {

SourceEntry image_folder_source() {
  SourceEntry e;
  e.name = "image_folder";
  e.help = "PNG/JPEG images in class subfolders or a CSV index";
  e.path_hint = "set data.path to the image folder";
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    auto node = [](auto v) { return YAML::Node(v); };
    const YAML::Node empty = YAML::Load("[]");
    s.add("data.images.index", Type::kString, "CSV index (path,label) instead of class subfolders").default_value(node(""));
    s.add("data.images.channels", Type::kInt, "1 (gray) or 3 (RGB)").min(1).max(3).default_value(node(3));
    s.add("data.images.resize", Type::kIntList, "[H, W], or [S] for the shorter side (empty: none)").min(1).default_value(empty);
    s.add("data.images.crop", Type::kIntList, "[h, w] crop: random in training, center in evaluation").min(1).default_value(empty);
    s.add("data.images.random_crop", Type::kBool, "random crop in training (false: center)").default_value(node(true));
    s.add("data.images.hflip", Type::kBool, "random horizontal flip in training").default_value(node(false));
    s.add("data.images.mean", Type::kDoubleList, "per-channel mean on [0, 1] values").default_value(YAML::Load("[0.485, 0.456, 0.406]"));
    s.add("data.images.std", Type::kDoubleList, "per-channel std on [0, 1] values").min(1e-12).default_value(YAML::Load("[0.229, 0.224, 0.225]"));
  };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    using namespace config;
    const Config& c = *r.config;
    ImageFolderOptions o;
    o.root = r.path;
    o.index = get_string(c, "data.images.index");
    o.channels = static_cast<int>(get_int(c, "data.images.channels"));
    o.resize = get_int_list(c, "data.images.resize");
    o.crop = get_int_list(c, "data.images.crop");
    o.random_crop = get_bool(c, "data.images.random_crop");
    o.hflip = get_bool(c, "data.images.hflip");
    o.mean = get_double_list(c, "data.images.mean");
    o.std = get_double_list(c, "data.images.std");
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
