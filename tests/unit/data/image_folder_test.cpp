// The image-folder dataset: listing, CSV index, transforms, determinism of augmentation, normalisation on the device.
#include "image_fixtures.h"

namespace bellows::data {
namespace image_folder_test {

using namespace image_test;  // image_fixtures.h

// --- the dataset: listing ---

TEST(ImageFolder, SubfolderLayoutNumbersSortedClassesAndSortsFiles) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  const auto ds = make_image_folder_dataset(o);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(ds->files(), (std::vector<std::string>{"cat/a.PNG", "cat/b.png", "dog/sub/y.png", "dog/x.jpg"}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->describe(1), (dir.path() / "cat/b.png").string());
  EXPECT_EQ(ds->name(), "image folder " + dir.path().string() + " (4 images, 2 classes)");

  FetchContext ctx;
  const Example e = ds->get(3, ctx);
  EXPECT_EQ(e.at("x").sizes(), (std::vector<std::int64_t>{3, 8, 10}));
  EXPECT_EQ(e.at("x").scalar_type(), at::kByte);
  EXPECT_EQ(e.at("y").dim(), 0);
  EXPECT_EQ(e.at("y").scalar_type(), at::kLong);
  EXPECT_EQ(e.at("y").item<std::int64_t>(), 1);
  EXPECT_TRUE(at::equal(ds->get(1, ctx).at("x"), chw(pattern(8, 10, 3, 1))));
}

TEST(ImageFolder, CsvIndexGivesTheSameLabelsAsSubfolders) {
  TempDir dir("image_test");
  make_pets(dir.path());
  write_text(dir.path() / "index.csv",
             "path,label\r\ndog/x.jpg,dog\r\n\"cat/b.png\",cat\r\n\r\ncat/a.PNG , cat\r\ndog/sub/y.png,dog\r\n");
  ImageFolderOptions o;
  o.root = dir.path();
  const auto folders = make_image_folder_dataset(o);
  o.index = dir.path() / "index.csv";
  const auto indexed = make_image_folder_dataset(o);
  ASSERT_EQ(indexed->size(), 4);
  EXPECT_EQ(indexed->classes(), folders->classes());
  EXPECT_EQ(indexed->files(), (std::vector<std::string>{"dog/x.jpg", "cat/b.png", "cat/a.PNG", "dog/sub/y.png"}));
  for (std::int64_t i = 0; i < indexed->size(); ++i) {
    const auto& file = indexed->files()[i];
    const auto pos = std::find(folders->files().begin(), folders->files().end(), file) - folders->files().begin();
    EXPECT_EQ(indexed->labels()[i], folders->labels()[pos]) << file;
    FetchContext ctx;
    EXPECT_TRUE(at::equal(indexed->get(i, ctx).at("x"), folders->get(pos, ctx).at("x"))) << file;
  }

  // Integer labels are class numbers; columns may come in either order.
  write_text(dir.path() / "numbers.csv", "label,path\n2,cat/b.png\n0,dog/x.jpg\n");
  o.index = dir.path() / "numbers.csv";
  const auto numbered = make_image_folder_dataset(o);
  EXPECT_EQ(numbered->labels(), (std::vector<std::int64_t>{2, 0}));
  EXPECT_EQ(numbered->classes(), (std::vector<std::string>{"0", "1", "2"}));
}

TEST(ImageFolder, ExplicitClassesFixTheNumberingAndRejectUnknownLabels) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  o.classes = {"bird", "dog", "cat"};
  EXPECT_EQ(make_image_folder_dataset(o)->labels(), (std::vector<std::int64_t>{2, 2, 1, 1}));

  write_text(dir.path() / "index.csv", "path,label\ncat/b.png,cat\ndog/x.jpg,1\ncat/a.PNG,cow\n");
  o.index = dir.path() / "index.csv";
  const Error e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), (dir.path() / "index.csv").string() + " line 4: unknown label 'cow'");
  EXPECT_NE(e.hint().find("bird, dog, cat"), std::string::npos) << e.hint();

  o.index.clear();
  o.classes = {"cat"};
  const Error folder = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(folder.kind(), ErrorKind::kData);
  EXPECT_NE(folder.message().find("class folder 'dog' is not one of the training data's classes"), std::string::npos);
}

TEST(ImageFolder, IndexErrorsNameTheIndexAndLine) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  o.index = dir.path() / "index.csv";
  const std::string index = o.index.string();
  const auto message = [&](const std::string& csv) {
    write_text(o.index, csv);
    const Error e = error_from([&] { make_image_folder_dataset(o); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    return e.message();
  };
  EXPECT_EQ(message("path,label,weight\ncat/b.png,cat,1\n"), index + " line 1: unknown column 'weight'");
  EXPECT_EQ(message("path\ncat/b.png\n"), index + " line 1: header 'path' lacks the label column");
  EXPECT_EQ(message("path,label\ncat/b.png,cat\ncat/zz.png,cat\n"),
            index + " line 3: image 'cat/zz.png' does not exist under " + dir.path().string());
  EXPECT_EQ(message("path,label\ncat/b.png,cat,extra\n"), index + " line 2: 3 fields, the header has 2");
  EXPECT_EQ(message("path,label\n"), "image index " + index + " lists no images");
  o.index = dir.path() / "absent.csv";
  const Error absent = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(absent.kind(), ErrorKind::kData);
  EXPECT_NE(absent.message().find("absent.csv"), std::string::npos);
}

TEST(ImageFolder, MissingOrEmptyFoldersAreDataErrors) {
  TempDir dir("image_test");
  ImageFolderOptions o;
  o.root = dir.path() / "nowhere";
  Error e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "image folder " + o.root.string() + " does not exist");

  o.root = dir.path();
  e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "image folder " + dir.path().string() + " has no class subfolders");

  make_pets(dir.path());
  fs::create_directories(dir.path() / "emu");
  write_text(dir.path() / "emu" / "readme.md", "soon");
  e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "class folder " + (dir.path() / "emu").string() + " has no images (.png, .jpg, .jpeg)");
}

TEST(ImageFolder, BadOptionsAreConfigErrors) {
  TempDir dir("image_test");
  make_pets(dir.path());
  const auto kind_of = [&](const std::function<void(ImageFolderOptions&)>& edit) {
    ImageFolderOptions o;
    o.root = dir.path();
    edit(o);
    return error_from([&] { make_image_folder_dataset(o); }).kind();
  };
  EXPECT_EQ(kind_of([](auto& o) { o.channels = 2; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.channels = 1; }), ErrorKind::kConfig);  // three means for one channel
  EXPECT_EQ(kind_of([](auto& o) { o.mean = {0.5, 0.5}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.std = {0.2, 0.0, 0.2}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {32, 32, 3}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {0}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.crop = {8}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {32, 40}, o.crop = {33, 16}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {32}, o.crop = {16, 40}; }), ErrorKind::kConfig);
}

TEST(ImageFolder, CorruptImagesAreDataErrorsNamingTheRelativePath) {
  TempDir dir("image_test");
  const Bytes png = encode_png(pattern(32, 32, 3));
  const Bytes jpg = encode_jpeg(smooth(32, 32, 3), 90);
  Bytes flipped = png;
  flipped[find(png, {'I', 'D', 'A', 'T'}) + 4 + 20] ^= 0x10;
  write_file(dir.path() / "cats" / "0001.png", Bytes(png.begin(), png.begin() + png.size() / 2));
  write_file(dir.path() / "cats" / "0002.png", flipped);
  write_file(dir.path() / "cats" / "0003.png", Bytes{'j', 'u', 'n', 'k', '!', '!', '!', '!', '!'});
  write_file(dir.path() / "dogs" / "1.jpg", Bytes(jpg.begin(), jpg.begin() + jpg.size() / 2));
  ImageFolderOptions o;
  o.root = dir.path();
  const auto ds = make_image_folder_dataset(o);
  const std::vector<std::string> expected = {"cats/0001.png: truncated PNG", "cats/0002.png: libpng error: IDAT",
                                             "cats/0003.png: not a PNG or JPEG file",
                                             "dogs/1.jpg: truncated JPEG: Premature end of JPEG file"};
  for (std::int64_t i = 0; i < ds->size(); ++i) {
    FetchContext ctx;
    const Error e = error_from([&] { ds->get(i, ctx); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_EQ(e.message().rfind(expected[i], 0), 0u) << e.message();
  }
}

TEST(ImageFolder, StageTimesArePositiveAfterAGet) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  o.resize = {6, 6};
  const auto ds = make_image_folder_dataset(o);
  FetchContext ctx;
  ds->get(0, ctx);
  EXPECT_GT(ctx.times.read, 0);
  EXPECT_GT(ctx.times.decode, 0);
  EXPECT_GT(ctx.times.transform, 0);
  const std::int64_t batch[] = {0, 3};
  ds->get_batch(batch, ctx);
  EXPECT_GT(ctx.times.collate, 0);
}

TEST(ImageFolder, DifferentSizesInABatchAskForResizeOrCrop) {
  TempDir dir("image_test");
  write_file(dir.path() / "a" / "small.png", encode_png(pattern(8, 8, 3)));
  write_file(dir.path() / "a" / "tall.png", encode_png(pattern(12, 8, 3)));
  ImageFolderOptions o;
  o.root = dir.path();
  const auto ds = make_image_folder_dataset(o);
  const std::int64_t batch[] = {0, 1};
  FetchContext ctx;
  const Error e = error_from([&] { ds->get_batch(batch, ctx); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("is 8x8"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("tall.png is 12x8"), std::string::npos) << e.message();
  EXPECT_NE(e.hint().find("set data.images.resize or data.images.crop"), std::string::npos) << e.hint();

  o.crop = {8, 8};
  const Batch b = make_image_folder_dataset(o)->get_batch(batch, ctx);
  EXPECT_EQ(b.at("x").sizes(), (std::vector<std::int64_t>{2, 3, 8, 8}));
  EXPECT_EQ(b.at("y").sizes(), (std::vector<std::int64_t>{2}));

  o.crop = {10, 10};  // larger than the images, and no resize
  const Error small = error_from([&] { make_image_folder_dataset(o)->get(0, ctx); });
  EXPECT_EQ(small.kind(), ErrorKind::kData);
  EXPECT_EQ(small.message(), "a/small.png: image is 8x8, smaller than the crop 10x10");
}

// --- the dataset: transforms ---

TEST(ImageTransforms, CenterCropIsExact) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(9, 12, 3);
  ImageFolderOptions o;
  o.crop = {4, 6};
  o.random_crop = false;
  const auto ds = single(dir, img, o);
  const at::Tensor center = chw(img.narrow(0, 2, 4).narrow(1, 3, 6));  // (9 - 4) / 2, (12 - 6) / 2
  for (const bool train : {true, false}) EXPECT_TRUE(at::equal(get_x(*ds, 0, 5, train), center)) << train;
}

TEST(ImageTransforms, FlipIsDeterministicPerSeedAndMatchesAManualFlip) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(5, 7, 3);
  ImageFolderOptions o;
  o.hflip = true;
  const auto ds = single(dir, img, o);
  const at::Tensor plain = chw(img), flipped = chw(img).flip({2});
  int flips = 0;
  for (std::uint64_t seed = 0; seed < 32; ++seed) {
    const at::Tensor x = get_x(*ds, 0, seed, true);
    EXPECT_TRUE(at::equal(x, get_x(*ds, 0, seed, true))) << seed;  // same (seed, index): same draws
    const bool is_flipped = at::equal(x, flipped);
    EXPECT_TRUE(is_flipped || at::equal(x, plain)) << seed;
    flips += is_flipped;
  }
  EXPECT_GT(flips, 4);
  EXPECT_LT(flips, 28);
  // Another instance of the dataset (as another worker would use) draws the same.
  o.root = dir.path();
  const auto twin = make_image_folder_dataset(o);
  for (std::uint64_t seed = 0; seed < 32; ++seed)
    EXPECT_TRUE(at::equal(get_x(*twin, 0, seed, true), get_x(*ds, 0, seed, true)));
}

TEST(ImageTransforms, RandomCropIsDeterministicAndVaries) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(10, 12, 3);
  ImageFolderOptions o;
  o.crop = {4, 5};
  const auto ds = single(dir, img, o);
  std::set<std::pair<std::int64_t, std::int64_t>> offsets;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    const at::Tensor x = get_x(*ds, 0, seed, true);
    ASSERT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 4, 5}));
    EXPECT_TRUE(at::equal(x, get_x(*ds, 0, seed, true)));
    bool found = false;
    for (std::int64_t top = 0; top <= 6 && !found; ++top)
      for (std::int64_t left = 0; left <= 7 && !found; ++left)
        if (at::equal(x, chw(img.narrow(0, top, 4).narrow(1, left, 5)))) {
          offsets.emplace(top, left);
          found = true;
        }
    EXPECT_TRUE(found) << seed;
  }
  EXPECT_GT(offsets.size(), 8u);
}

TEST(ImageTransforms, EvalModeNeverFlipsAndCropsTheCenter) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(10, 12, 3);
  ImageFolderOptions o;
  o.crop = {4, 6};
  o.hflip = true;
  const auto ds = single(dir, img, o);
  const at::Tensor center = chw(img.narrow(0, 3, 4).narrow(1, 3, 6));
  for (std::uint64_t seed = 0; seed < 32; ++seed) EXPECT_TRUE(at::equal(get_x(*ds, 0, seed, false), center)) << seed;
}

TEST(ImageTransforms, ResizeGivesTheRequestedSizeAndKeepsAConstantImageConstant) {
  TempDir dir("image_test");
  write_file(dir.path() / "a" / "wide.png", encode_png(constant(40, 60, 3, 77)));
  write_file(dir.path() / "a" / "tall.png", encode_png(constant(60, 40, 3, 200)));
  ImageFolderOptions o;
  o.root = dir.path();
  o.resize = {24, 24};
  auto ds = make_image_folder_dataset(o);  // files: tall, wide
  at::Tensor x = get_x(*ds, 1, 0, true);
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 24, 24}));
  EXPECT_TRUE(at::equal(x, at::full_like(x, 77)));
  o.resize = {20};  // shorter side to 20
  ds = make_image_folder_dataset(o);
  EXPECT_EQ(get_x(*ds, 1, 0, true).sizes(), (std::vector<std::int64_t>{3, 20, 30}));
  x = get_x(*ds, 0, 0, true);
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 30, 20}));
  EXPECT_TRUE(at::equal(x, at::full_like(x, 200)));
  o.resize = {80, 90};  // upscaling too
  x = get_x(*make_image_folder_dataset(o), 1, 0, true);
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 80, 90}));
  EXPECT_TRUE(at::equal(x, at::full_like(x, 77)));
}

TEST(ImageTransforms, ResizeOfAJpegUsesDctScalingAndGivesTheResizedSize) {
  TempDir dir("image_test");
  const at::Tensor img = smooth(96, 128, 3);
  write_file(dir.path() / "a" / "p.jpg", encode_jpeg(img, 95));
  ImageFolderOptions o;
  o.root = dir.path();
  o.resize = {24, 32};  // decoded at 2/8 (24x32), then nothing left to resize
  const at::Tensor scaled = get_x(*make_image_folder_dataset(o), 0, 0, true);
  o.jpeg_dct_scaling = false;  // full decode, then antialiased resize
  const at::Tensor full = get_x(*make_image_folder_dataset(o), 0, 0, true);
  EXPECT_EQ(scaled.sizes(), (std::vector<std::int64_t>{3, 24, 32}));
  EXPECT_EQ(full.sizes(), (std::vector<std::int64_t>{3, 24, 32}));
  EXPECT_LT(mean_abs_diff(scaled, full), 6.0);  // DCT scaling filters like a box, the resize like a triangle
}

TEST(ImageTransforms, FinishOnDeviceNormalisesEachChannel) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(3, 4, 3);
  ImageFolderOptions o;
  const auto ds = single(dir, img, o);
  FetchContext ctx;
  const std::int64_t batch_indices[] = {0, 0};
  Batch batch = ds->get_batch(batch_indices, ctx);
  ds->finish_on_device(batch);
  const at::Tensor& x = batch.at("x");
  ASSERT_EQ(x.scalar_type(), at::kFloat);
  ASSERT_EQ(x.sizes(), (std::vector<std::int64_t>{2, 3, 3, 4}));
  const double mean[] = {0.485, 0.456, 0.406}, std[] = {0.229, 0.224, 0.225};
  for (int c = 0; c < 3; ++c) {
    const double v = img[2][1][c].item<std::uint8_t>();
    EXPECT_NEAR(x[1][c][2][1].item<float>(), (v / 255.0 - mean[c]) / std[c], 1e-6) << c;
  }
  // A whole-tensor check against the formula, done the long way in float64.
  const at::Tensor expected = (chw(img).to(at::kDouble) / 255 - at::tensor({0.485, 0.456, 0.406}).view({3, 1, 1})) /
                              at::tensor({0.229, 0.224, 0.225}).view({3, 1, 1});
  EXPECT_LT((x[0].to(at::kDouble) - expected).abs().max().item<double>(), 1e-6);
}

TEST(ImageTransforms, FinishOnDeviceWorksOnTheBatchsDevice) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device";
  TempDir dir("image_test");
  const auto ds = single(dir, pattern(6, 5, 3));
  FetchContext ctx;
  const std::int64_t two[] = {0, 0};
  Batch on_host = ds->get_batch(two, ctx);
  const c10::Device cuda(c10::kCUDA, 0);
  Batch on_device = on_host.to(cuda);
  Batch again = on_host.to(cuda);  // the second batch uses the constants cached on the device
  ds->finish_on_device(on_host);
  ds->finish_on_device(on_device);
  ds->finish_on_device(again);
  EXPECT_TRUE(on_device.at("x").is_cuda());
  EXPECT_LT((on_device.at("x").cpu() - on_host.at("x")).abs().max().item<float>(), 1e-6);
  EXPECT_TRUE(at::equal(again.at("x"), on_device.at("x")));
}

TEST(ImageTransforms, GrayImagesWithOneMeanAndStd) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(4, 4, 1);
  const auto ds = single(dir, img);  // channels 1, mean 0.5, std 0.25
  FetchContext ctx;
  const std::int64_t one[] = {0};
  Batch batch = ds->get_batch(one, ctx);
  EXPECT_TRUE(at::equal(batch.at("x")[0], chw(img)));
  ds->finish_on_device(batch);
  const double v = img[1][2][0].item<std::uint8_t>();
  EXPECT_NEAR(batch.at("x")[0][0][1][2].item<float>(), (v / 255.0 - 0.5) / 0.25, 1e-6);
}

}  // namespace image_folder_test
}  // namespace bellows::data
