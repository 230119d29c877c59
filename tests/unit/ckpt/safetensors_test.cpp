// safetensors: the file the Python library wrote (tests/golden/gen_safetensors.py) read exactly and rewritten
// byte for byte, bellows' files read back by the Python library (check_safetensors.py), round trips mapped and
// read, the header alone, writing refused and streamed. Every corrupt-input error: safetensors_corrupt_test.cpp.
#include "bellows/ckpt/safetensors.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bellows/util/error.h"
#include "file_bytes.h"
#include "safetensors_fixture.h"  // defines: le64, assemble, SafetensorsTest
#include "test_util.h"
#include "test_paths.h"

namespace bellows::ckpt {
namespace {

using safetensors_fixture::assemble;
using safetensors_fixture::le64;
using safetensors_fixture::SafetensorsTest;
using test_support::mapped_file_at;
using test_support::slurp;
using test_support::spit;
using test_support::error_from;

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(BELLOWS_TEST_DATA_DIR) / ".." / "golden";
const fs::path kAllDtypes = kGolden / "safetensors" / "all_dtypes.safetensors";
const fs::path kNoMetadata = kGolden / "safetensors" / "no_metadata.safetensors";

// The tensors and metadata of gen_safetensors.py, stated again here.
std::map<std::string, at::Tensor> golden_tensors() {
  const auto a = [](std::int64_t n, at::ScalarType type = at::kLong) { return at::arange(n, type); };
  return {
      {"f64", (a(6, at::kDouble) / 4).reshape({2, 3})},
      {"f32", (a(12, at::kFloat) * 0.5 - 2).reshape({3, 4})},
      {"f16", (a(8, at::kFloat) * 0.25 - 1).to(at::kHalf)},
      {"bf16", (a(8, at::kFloat) * 0.5 - 2).to(at::kBFloat16)},
      {"i64", (a(5) - 2) * 1'000'000'000'000},
      {"i32", (a(6) * 1000 - 3000).to(at::kInt).reshape({2, 3})},
      {"i16", (a(4) * 300 - 600).to(at::kShort)},
      {"i8", (a(5) * 50 - 100).to(at::kChar)},
      {"u8", (a(10) * 25).to(at::kByte)},
      {"bool", a(5).remainder(2) == 0},
      {"f8_e4m3", (a(8, at::kFloat) * 0.5 - 2).to(at::kFloat8_e4m3fn)},
      {"f8_e5m2", (a(8, at::kFloat) * 0.5 - 2).to(at::kFloat8_e5m2)},
      {"scalar", at::scalar_tensor(3.25, at::kFloat)},
      {"step", at::scalar_tensor(42, at::kLong)},
      {"empty", at::zeros({0, 3}, at::kFloat)},
  };
}

const std::map<std::string, std::string> kGoldenMetadata = {
    {"format", "pt"},
    {"producer", "tests/golden/gen_safetensors.py"},
    {"note", "caf\xc3\xa9 \xe2\x9c\x93 \"quoted\" back\\slash\nnew line\ttab \x01 a/b"},
};

// Same dtype, shape and bytes: exact for every dtype, fp8 included.
::testing::AssertionResult same(const at::Tensor& got, const at::Tensor& want) {
  if (got.scalar_type() != want.scalar_type() || got.sizes() != want.sizes()) {
    return ::testing::AssertionFailure() << "got " << got.scalar_type() << " " << got.sizes() << ", want "
                                         << want.scalar_type() << " " << want.sizes();
  }
  const at::Tensor g = got.contiguous(), w = want.contiguous();
  if (g.nbytes() > 0 && std::memcmp(g.data_ptr(), w.data_ptr(), g.nbytes()) != 0) {
    return ::testing::AssertionFailure() << "values differ: got " << got.to(at::kDouble) << ", want "
                                         << want.to(at::kDouble);
  }
  return ::testing::AssertionSuccess();
}

void expect_golden(const std::map<std::string, at::Tensor>& got) {
  const auto want = golden_tensors();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_TRUE(same(got.at(name), t)) << name;
  }
  // A few values spelled out, so that the test does not only agree with ATen's own conversions.
  EXPECT_EQ(got.at("f32")[2][3].item<float>(), 3.5f);
  EXPECT_EQ(got.at("f64")[1][2].item<double>(), 1.25);
  EXPECT_EQ(got.at("i64")[0].item<std::int64_t>(), -2'000'000'000'000);
  EXPECT_EQ(got.at("i8")[0].item<std::int8_t>(), -100);
  EXPECT_EQ(got.at("u8")[9].item<std::uint8_t>(), 225);
  EXPECT_EQ(got.at("bf16")[7].item<float>(), 1.5f);
  EXPECT_EQ(got.at("f16")[1].item<float>(), -0.75f);
  EXPECT_TRUE(at::equal(got.at("f8_e4m3").to(at::kFloat), at::arange(8, at::kFloat) * 0.5 - 2));
  EXPECT_TRUE(at::equal(got.at("f8_e5m2").to(at::kFloat), at::arange(8, at::kFloat) * 0.5 - 2));
  EXPECT_EQ(got.at("f8_e4m3").view(at::kByte)[0].item<std::uint8_t>(), 0xc0);  // -2 in e4m3fn
  EXPECT_EQ(got.at("f8_e5m2").view(at::kByte)[0].item<std::uint8_t>(), 0xc0);  // -2 in e5m2
  EXPECT_EQ(got.at("scalar").dim(), 0);
  EXPECT_EQ(got.at("scalar").item<float>(), 3.25f);
  EXPECT_EQ(got.at("step").item<std::int64_t>(), 42);
  EXPECT_EQ(got.at("empty").sizes(), at::IntArrayRef({0, 3}));
  EXPECT_EQ(got.at("bool")[1].item<bool>(), false);
}

using SafetensorsGolden = SafetensorsTest;
using SafetensorsRoundTrip = SafetensorsTest;
using SafetensorsWrite = SafetensorsTest;
using SafetensorsPython = SafetensorsTest;

// --- files written by Python ---

// Found by fuzzing (tests/data/fuzz/README.md): a header number too large for a double is nlohmann::json's
// out_of_range, not a parse_error, and escaped as an internal error.
TEST(Safetensors, AHeaderNumberTooLargeIsADataError) {
  const auto path = std::filesystem::path(BELLOWS_TEST_DATA_DIR) / "fuzz" / "safetensors_number_overflow.safetensors";
  try {
    read_safetensors(path);
    ADD_FAILURE() << "read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(e.message().find("safetensors_number_overflow.safetensors: the safetensors header (bytes 8 to 96) cannot be read"),
              std::string::npos) << e.message();
  }
}

TEST_F(SafetensorsGolden, ReadsEveryDtypeWrittenByPython) {
  for (bool mmap : {false, true}) {
    std::map<std::string, std::string> metadata;
    SCOPED_TRACE(mmap ? "mmap" : "read");
    expect_golden(read_safetensors(kAllDtypes, &metadata, mmap));
    EXPECT_EQ(metadata, kGoldenMetadata);
  }
  std::map<std::string, std::string> metadata = {{"stale", "x"}};
  const auto t = read_safetensors(kNoMetadata, &metadata);
  EXPECT_TRUE(metadata.empty());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_TRUE(same(t.at("x"), golden_tensors().at("f32")));
}

// Python orders tensors by descending dtype rank (I64 F64 F32 I32 BF16 F16 I16 F8_E4M3 F8_E5M2 I8 U8 BOOL),
// then by name, and writes compact JSON padded with spaces to 8 bytes; bellows does the same. The metadata's
// key order in Python's header is a Rust HashMap's (random); gen_safetensors.py saves until it is sorted.
TEST_F(SafetensorsGolden, WritesTheSameBytesAsPython) {
  const std::string python = slurp(kAllDtypes);
  ASSERT_FALSE(python.empty()) << kAllDtypes;
  EXPECT_EQ(safetensors_bytes(golden_tensors(), kGoldenMetadata), python);
  std::map<std::string, std::string> metadata;
  EXPECT_EQ(safetensors_bytes(read_safetensors(kAllDtypes, &metadata), metadata), python);
  EXPECT_EQ(safetensors_bytes({{"x", golden_tensors().at("f32")}}), slurp(kNoMetadata));
}

TEST_F(SafetensorsGolden, ReadsTheHeaderAlone) {
  const SafetensorsHeader h = read_safetensors_header(kAllDtypes);
  EXPECT_EQ(h.metadata, kGoldenMetadata);
  EXPECT_EQ(h.data_offset, 8u + 1056u);
  EXPECT_EQ(h.data_offset + h.tensors.back().end, fs::file_size(kAllDtypes));
  std::vector<std::string> names;
  for (const auto& t : h.tensors) names.push_back(t.name);
  // Data order: by offset (zero-size "empty" sorts before "f32" at the same offset).
  EXPECT_EQ(names, (std::vector<std::string>{"i64", "step", "f64", "empty", "f32", "scalar", "i32", "bf16", "f16",
                                             "i16", "f8_e4m3", "f8_e5m2", "i8", "u8", "bool"}));
  const TensorInfo& i64 = h.tensors[0];
  EXPECT_EQ(i64.dtype, at::kLong);
  EXPECT_EQ(i64.shape, std::vector<std::int64_t>{5});
  EXPECT_EQ(i64.begin, 0u);
  EXPECT_EQ(i64.end, 40u);
  const TensorInfo& step = h.tensors[1];
  EXPECT_TRUE(step.shape.empty());
  EXPECT_EQ(step.end - step.begin, 8u);
  const TensorInfo& empty = h.tensors[3];
  EXPECT_EQ(empty.shape, (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(empty.begin, empty.end);
  EXPECT_EQ(h.tensors[10].dtype, at::kFloat8_e4m3fn);
  EXPECT_EQ(h.tensors[14].dtype, at::kBool);
}

// --- files written by bellows, read by Python ---

TEST_F(SafetensorsPython, PythonReadsWhatBellowsWrites) {
  const char* python = std::getenv("BELLOWS_PYTHON");
  if (python == nullptr || *python == '\0') {
    GTEST_SKIP() << "BELLOWS_PYTHON is not set (scripts/setup.sh exports it; run through scripts/dev.sh test)";
  }
  const fs::path written = dir_ / "written.safetensors", from_bytes = dir_ / "from_bytes.safetensors";
  write_safetensors(written, golden_tensors(), kGoldenMetadata);
  spit(from_bytes, safetensors_bytes(golden_tensors(), kGoldenMetadata));
  EXPECT_EQ(slurp(written), slurp(from_bytes));
  const fs::path checker = kGolden / "check_safetensors.py";
  for (const auto& file : {written, from_bytes}) {
    const std::string command = fmt::format("'{}' '{}' '{}'", python, checker.string(), file.string());
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << command;
    EXPECT_EQ(WEXITSTATUS(status), 0) << command << " found differences (printed above)";
  }
}

// --- round trips ---

TEST_F(SafetensorsRoundTrip, EveryDtypeMappedAndRead) {
  const fs::path p = dir_ / "all.safetensors";
  write_safetensors(p, golden_tensors(), kGoldenMetadata);
  for (bool mmap : {false, true}) {
    SCOPED_TRACE(mmap ? "mmap" : "read");
    std::map<std::string, std::string> metadata;
    expect_golden(read_safetensors(p, &metadata, mmap));
    EXPECT_EQ(metadata, kGoldenMetadata);
  }
}

TEST_F(SafetensorsRoundTrip, ShapesViewsAndRandomBits) {
  const auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor base = at::randn({6, 5}, gen);
  const std::map<std::string, at::Tensor> tensors = {
      {"randn", at::randn({1000, 17}, gen)},
      {"transposed", base.t()},                         // not contiguous
      {"column", base.select(1, 2)},                    // strided view
      {"slice", base.to(at::kDouble).narrow(0, 2, 3)},  // storage offset
      {"empty_bool", at::empty({0}, at::kBool)},
      {"empty_3d", at::empty({2, 0, 4}, at::kHalf)},
      {"scalar_bool", at::scalar_tensor(true, at::kBool)},
      {"a.b/c d", at::ones({1})},  // any UTF-8 name
      {"caf\xc3\xa9", at::ones({2}, at::kInt)},
  };
  const fs::path p = dir_ / "t.safetensors";
  write_safetensors(p, tensors);
  for (bool mmap : {false, true}) {
    std::map<std::string, std::string> metadata = {{"stale", "x"}};
    const auto r = read_safetensors(p, &metadata, mmap);
    EXPECT_TRUE(metadata.empty());
    ASSERT_EQ(r.size(), tensors.size());
    for (const auto& [name, t] : tensors) EXPECT_TRUE(same(r.at(name), t)) << name << (mmap ? " mmap" : " read");
  }
}

TEST_F(SafetensorsRoundTrip, EmptyDictAndMetadataOnly) {
  const std::string bytes = safetensors_bytes({});
  EXPECT_EQ(bytes, assemble("{}      ", ""));  // padded to 8
  const fs::path p = dir_ / "empty.safetensors";
  write_safetensors(p, {}, {{"k", "v"}});
  for (bool mmap : {false, true}) {
    std::map<std::string, std::string> metadata;
    EXPECT_TRUE(read_safetensors(p, &metadata, mmap).empty());
    EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"k", "v"}}));
  }
}

TEST_F(SafetensorsRoundTrip, MmapViewsTheFileAndOutlivesIt) {
  const fs::path p = dir_ / "big.safetensors";
  write_safetensors(p, {{"w", at::arange(1 << 16, at::kFloat).reshape({256, 256})}, {"b", at::ones({3}, at::kByte)}});
  at::Tensor mapped = read_safetensors(p, nullptr, true).at("w");
  EXPECT_EQ(mapped_file_at(mapped.data_ptr()), fs::canonical(p).string());
  const at::Tensor read = read_safetensors(p, nullptr, false).at("w");
  EXPECT_EQ(mapped_file_at(read.data_ptr()), "");
  at::Tensor row = mapped[200];
  mapped.reset();
  fs::remove(p);  // the mapping stays valid, held by the view
  EXPECT_EQ(row[3].item<float>(), 200 * 256 + 3);
  EXPECT_TRUE(at::equal(row, read[200]));
}

// Other writers may leave the header unpadded: mapped data that are not aligned to their item size are copied.
TEST_F(SafetensorsRoundTrip, UnpaddedHeaderIsReadCorrectly) {
  const at::Tensor t = at::arange(4, at::kFloat) + 0.5;
  const std::string header = R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";  // 55 bytes
  ASSERT_NE(header.size() % 4, 0u);
  const fs::path p = dir_ / "unpadded.safetensors";
  spit(p, assemble(header, std::string(static_cast<const char*>(t.data_ptr()), 16)));
  for (bool mmap : {false, true}) {
    const at::Tensor r = read_safetensors(p, nullptr, mmap).at("t");
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.data_ptr()) % 4, 0u);
    EXPECT_TRUE(at::equal(r, t)) << mmap;
  }
}

TEST_F(SafetensorsRoundTrip, CudaTensorsAreMovedToTheCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device";
  const at::Tensor t = at::arange(10, at::kFloat).to(at::kCUDA).to(at::kBFloat16);
  const fs::path p = dir_ / "cuda.safetensors";
  write_safetensors(p, {{"t", t}});
  const at::Tensor r = read_safetensors(p).at("t");
  EXPECT_TRUE(r.device().is_cpu());
  EXPECT_TRUE(same(r, t.cpu()));
}

// --- writing refusals ---

TEST_F(SafetensorsWrite, RefusesWhatTheFormatCannotHold) {
  const at::Tensor ok = at::ones({2});
  const std::vector<std::tuple<std::string, at::Tensor, std::string>> cases = {
      {"", ok, "empty name"},
      {"__metadata__", ok, "'__metadata__'"},
      {"undef", at::Tensor(), "tensor 'undef' is undefined"},
      {"sp", at::eye(3).to_sparse(), "tensor 'sp' is not dense"},
      {"q", at::quantize_per_tensor(at::ones({2}), 0.1, 0, at::kQUInt8), "tensor 'q' is quantized"},
      {"z", at::ones({2}, at::kComplexFloat), "tensor 'z' has dtype ComplexFloat"},
      {"u16", at::empty({2}, at::kUInt16), "tensor 'u16' has dtype UInt16"},
      {"bad\xff", ok, "UTF-8"},
  };
  for (const auto& [name, t, part] : cases) {
    const fs::path p = dir_ / "never.safetensors";
    Error e = error_from([&] { safetensors_bytes({{"fine", ok}, {name, t}}); });
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.message();
    EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
    e = error_from([&] { write_safetensors(p, {{"fine", ok}, {name, t}}); });
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.message();
    EXPECT_FALSE(fs::exists(p)) << "refused before the file is created";
  }
  const Error e = error_from([&] { safetensors_bytes({{"x", ok}}, {{"k", "bad\xff"}}); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("UTF-8"), std::string::npos) << e.message();
}

TEST_F(SafetensorsWrite, UnwritableDirectoryIsAResourceError) {
  const Error e = error_from([&] { write_safetensors(dir_ / "absent" / "x.safetensors", {{"x", at::ones({1})}}); });
  EXPECT_EQ(e.kind(), ErrorKind::kResource);
  EXPECT_NE(e.message().find("absent/x.safetensors"), std::string::npos) << e.message();
}

TEST_F(SafetensorsWrite, LayoutFollowsDtypeRankThenName) {
  const std::string bytes = safetensors_bytes({{"a_u8", at::ones({3}, at::kByte)},
                                               {"b_f32", at::ones({1})},
                                               {"c_i64", at::ones({1}, at::kLong)},
                                               {"a_f32", at::ones({2})}},
                                              {{"z", "1"}, {"a", "2"}});
  const std::string json = R"({"__metadata__":{"a":"2","z":"1"},)"
                           R"("c_i64":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                           R"("a_f32":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                           R"("b_f32":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},)"
                           R"("a_u8":{"dtype":"U8","shape":[3],"data_offsets":[20,23]}})";
  const std::uint64_t n = (json.size() + 7) / 8 * 8;  // padded with spaces
  ASSERT_EQ(bytes.size(), 8 + n + 23);
  EXPECT_EQ(bytes.substr(0, 8), le64(n));
  EXPECT_EQ(bytes.substr(8, n), json + std::string(n - json.size(), ' '));
}

// --- streamed: one tensor at a time ---

using SafetensorsStreamed = SafetensorsTest;

std::vector<TensorSpec> specs_of(const std::map<std::string, at::Tensor>& tensors) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  return specs;
}

// Every dtype, a 0-dim and an empty tensor, the specs in reverse name order: the same bytes as write_safetensors and
// safetensors_bytes (so Python's), each tensor loaded once, in the file's data order, the previous one released first.
TEST_F(SafetensorsStreamed, WritesTheBytesOfWriteSafetensorsOneTensorAtATime) {
  const auto tensors = golden_tensors();
  std::vector<TensorSpec> specs = specs_of(tensors);
  std::reverse(specs.begin(), specs.end());
  const fs::path streamed = dir_ / "streamed.safetensors", whole = dir_ / "whole.safetensors";
  std::vector<std::string> loaded;
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> previous;
  write_safetensors_streamed(streamed, specs, kGoldenMetadata, [&](const TensorSpec& s) {
    EXPECT_TRUE(!previous || previous->expired()) << "loading " << s.name << " while " << loaded.back() << " is alive";
    loaded.push_back(s.name);
    at::Tensor t = tensors.at(s.name).clone();  // fresh memory that only the writer holds
    previous.emplace(t.getIntrusivePtr());
    return t;
  });
  write_safetensors(whole, tensors, kGoldenMetadata);
  EXPECT_EQ(slurp(streamed), slurp(whole));
  EXPECT_EQ(slurp(streamed), safetensors_bytes(tensors, kGoldenMetadata));
  std::vector<std::string> order;
  for (const auto& t : read_safetensors_header(streamed).tensors) order.push_back(t.name);
  EXPECT_EQ(loaded, order);
  // No tensors: the metadata alone, as write_safetensors writes it.
  write_safetensors_streamed(streamed, {}, {{"format", "pt"}},
                             [](const TensorSpec&) -> at::Tensor { throw std::logic_error("no tensor"); });
  EXPECT_EQ(slurp(streamed), safetensors_bytes({}, {{"format", "pt"}}));
}

TEST_F(SafetensorsStreamed, RefusesBadSpecsBeforeTheFileAndALoaderThatBreaksItsWordAfter) {
  const fs::path p = dir_ / "never.safetensors";
  const auto ones = [](const TensorSpec& s) { return at::ones(s.shape, at::TensorOptions().dtype(s.dtype)); };
  const std::vector<std::tuple<std::vector<TensorSpec>, std::string>> cases = {
      {{{"", at::kFloat, {2}}}, "empty name"},
      {{{"__metadata__", at::kFloat, {2}}}, "'__metadata__'"},
      {{{"x", at::kFloat, {2}}, {"x", at::kLong, {1}}}, "the tensor 'x' is listed twice"},
      {{{"z", at::kComplexFloat, {2}}}, "tensor 'z' has dtype ComplexFloat"},
      {{{"neg", at::kFloat, {2, -1}}}, "tensor 'neg' has the shape [2, -1]"},
  };
  for (const auto& [specs, part] : cases) {
    const Error e = error_from([&] { write_safetensors_streamed(p, specs, {}, ones); });
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.message();
    EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
    EXPECT_FALSE(fs::exists(p)) << "refused before the file is created";
  }
  // A loaded tensor unlike its spec, or a loader that fails: the error, and no file (nor a temporary one) left.
  const std::vector<TensorSpec> specs = {{"a", at::kFloat, {2, 3}}, {"b", at::kLong, {4}}};
  Error e = error_from([&] {
    write_safetensors_streamed(p, specs, {}, [](const TensorSpec&) { return at::ones({3, 2}); });
  });
  EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.message();
  EXPECT_NE(e.message().find("tensor 'b' was announced as I64 [4] but loaded as Float [3, 2]"), std::string::npos)
      << e.message();
  e = error_from([&] {
    write_safetensors_streamed(p, specs, {}, [&](const TensorSpec& s) -> at::Tensor {
      if (s.name == "a") throw Error(ErrorKind::kData, "cannot read a", "hint");
      return ones(s);
    });
  });
  EXPECT_EQ(e.message(), "cannot read a");
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::is_empty(dir_)) << "no temporary file left";
}

// One tensor read alone from the offsets of its header: what read_safetensors reads; a file cut short since is a
// data error naming the tensor.
TEST_F(SafetensorsRoundTrip, OneTensorReadAlone) {
  const fs::path p = dir_ / "all.safetensors";
  write_safetensors(p, golden_tensors(), kGoldenMetadata);
  const SafetensorsHeader h = read_safetensors_header(p);
  for (const TensorInfo& t : h.tensors)
    EXPECT_TRUE(same(read_safetensors_tensor(p, h, t), golden_tensors().at(t.name))) << t.name;
  fs::resize_file(p, h.data_offset + h.tensors.back().end - 1);
  const Error e = error_from([&] { read_safetensors_tensor(p, h, h.tensors.back()); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find(p.string() + ": tensor 'bool' at bytes"), std::string::npos) << e.message();
}
}  // namespace
}  // namespace bellows::ckpt
