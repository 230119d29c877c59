// NumPy arrays: .npy round trips for every dtype (mapped and read), .npz archives as numpy writes them (stored
// with ZIP64 local headers, DEFLATE) and as bellows writes them (aligned, ZIP64 on request), the memory map,
// every corrupt-input error with the file and offset in the message, and the dataset over arrays.
#include "bellows/data/npy.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bellows/data/npy_dataset.h"  // defines: make_npy_dataset
#include "bellows/util/error.h"
#include "file_bytes.h"
#include "test_util.h"
#include "test_paths.h"

namespace bellows::data {
namespace {

using test_support::mapped_file_at;
using test_support::slurp;
using test_support::spit;
using test_support::error_from;

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(BELLOWS_TEST_DATA_DIR) / "npy";




bool is_mapped(const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const std::string want = fs::canonical(file).string();
  while (std::getline(maps, line))
    if (line.size() >= want.size() && line.compare(line.size() - want.size(), want.size(), want) == 0) return true;
  return false;
}

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("bellows_npy_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

using NpzTest = NpyTest;
using NpyDatasetTest = NpyTest;

// a[i, j] = (4 i + j) / 2 and friends: the arrays of tests/golden/gen_npy_fixtures.py.
void expect_fixture_arrays(const std::map<std::string, at::Tensor>& arrays) {
  ASSERT_EQ(arrays.size(), 4u);
  EXPECT_TRUE(at::equal(arrays.at("a"), at::arange(12, at::kFloat).reshape({3, 4}) * 0.5));
  EXPECT_TRUE(at::equal(arrays.at("b"), at::arange(5, at::kLong) - 2));
  EXPECT_TRUE(at::equal(arrays.at("c"), at::tensor({1, 0, 1}).to(at::kBool)));
  EXPECT_TRUE(at::equal(arrays.at("d"), at::arange(6, at::kDouble).reshape({2, 3}) / 3));
}

// --- .npy round trips ---

TEST_F(NpyTest, RoundTripEveryDtypeMappedAndRead) {
  const at::Tensor base = at::arange(24, at::kLong).reshape({2, 3, 4}) - 7;
  const std::vector<at::Tensor> tensors = {
      base.to(at::kFloat) / 3, base.to(at::kDouble) / 7, base.to(at::kHalf) / 4, base,
      base.to(at::kInt),       base.to(at::kShort),      base.to(at::kChar),     (base + 7).to(at::kByte),
      base.remainder(3) == 0,
  };
  for (const auto& t : tensors) {
    const fs::path p = dir_ / fmt::format("{}.npy", c10::toString(t.scalar_type()));
    write_npy(p, t);
    for (bool mmap : {true, false}) {
      const at::Tensor r = read_npy(p, {.mmap = mmap});
      EXPECT_EQ(r.scalar_type(), t.scalar_type()) << p;
      EXPECT_EQ(r.sizes(), t.sizes()) << p;
      EXPECT_TRUE(at::equal(r, t)) << p << " mmap=" << mmap;
    }
  }
}

TEST_F(NpyTest, RoundTripShapesAndRandomBits) {
  const auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  for (const at::Tensor& t : {at::randn({1000, 17}, gen), at::randn({5}, gen).to(at::kDouble), at::scalar_tensor(2.5),
                              at::empty({0, 4}), at::randn({3, 1, 2}, gen).transpose(0, 2)}) {
    const fs::path p = dir_ / "t.npy";
    write_npy(p, t);
    EXPECT_EQ(fs::file_size(p) % 64, t.numel() * t.element_size() % 64);  // header padded to 64 bytes
    for (bool mmap : {true, false}) {
      const at::Tensor r = read_npy(p, {.mmap = mmap});
      EXPECT_EQ(r.sizes(), t.sizes());
      EXPECT_TRUE(at::equal(r, t.contiguous()));
    }
  }
}

TEST_F(NpyTest, MmapViewsTheFileAndUnmapsWithTheLastView) {
  const fs::path p = dir_ / "big.npy";
  write_npy(p, at::arange(1 << 16, at::kFloat).reshape({256, 256}));
  {
    at::Tensor mapped = read_npy(p);
    EXPECT_EQ(mapped_file_at(mapped.data_ptr()), fs::canonical(p).string());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(mapped.data_ptr()) % 4096, 128u);  // no copy: right after the header
    const at::Tensor read = read_npy(p, {.mmap = false});
    EXPECT_EQ(mapped_file_at(read.data_ptr()), "");
    at::Tensor row = mapped[200];
    mapped.reset();
    EXPECT_TRUE(is_mapped(p));  // the view keeps the mapping alive
    EXPECT_EQ(row[3].item<float>(), 200 * 256 + 3);
  }
  EXPECT_FALSE(is_mapped(p));
}

TEST_F(NpyTest, ReadsHeaderVersions2And3WrittenByNumpy) {
  const at::Tensor a = at::arange(12, at::kFloat).reshape({3, 4}) * 0.5;
  for (const char* name : {"v2.npy", "v3.npy"})
    for (bool mmap : {true, false}) EXPECT_TRUE(at::equal(read_npy(kFixtures / name, {.mmap = mmap}), a)) << name;
}

// --- .npy refusals and corrupt input ---

TEST_F(NpyTest, RefusesFortranBigEndianObjectAndStringArrays) {
  Error e = error_from([] { read_npy(kFixtures / "fortran.npy"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("fortran.npy"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("Fortran"), std::string::npos) << e.message();
  EXPECT_NE(e.hint().find("np.ascontiguousarray"), std::string::npos) << e.hint();

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bigendian.npy", "'>f4'"}, {"object.npy", "'|O'"}, {"unicode.npy", "'<U3'"}};
  for (const auto& [file, dtype] : cases) {
    e = error_from([&] { read_npy(kFixtures / file); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(e.message().find(file), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("dtype " + dtype), std::string::npos) << e.message();
  }
}

TEST_F(NpyTest, MissingFile) {
  const Error e = error_from([&] { read_npy(dir_ / "absent.npy"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("absent.npy: no such file"), std::string::npos) << e.message();
}

TEST_F(NpyTest, BadMagic) {
  const fs::path p = dir_ / "x.npy";
  write_npy(p, at::ones({3, 4}));
  std::string bytes = slurp(p);
  bytes[1] = 'X';
  spit(p, bytes);
  Error e = error_from([&] { read_npy(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("x.npy: not an NPY file: bad magic at byte 0 (found 93 58 55"), std::string::npos)
      << e.message();

  write_npz(dir_ / "z.npz", {{"a", at::ones({2})}});  // a zip given as .npy: the hint says so
  e = error_from([&] { read_npy(dir_ / "z.npz"); });
  EXPECT_NE(e.hint().find("zip archive"), std::string::npos) << e.hint();
}

TEST_F(NpyTest, TruncatedAtEveryStage) {
  const fs::path good = dir_ / "good.npy";
  write_npy(good, at::ones({3, 4}));  // 128-byte header + 48 bytes of data
  const std::string bytes = slurp(good);
  ASSERT_EQ(bytes.size(), 176u);
  const std::vector<std::pair<std::size_t, std::string>> cases = {
      {0, "truncated NPY preamble: 0 bytes"},
      {4, "truncated NPY preamble: 4 bytes"},
      {9, "truncated NPY preamble: 9 bytes"},
      {60, "truncated header: the header dict runs from byte 10 to byte 128, the data have 60 bytes"},
      {128, "header says 3×4 float32 = 48 bytes of data after offset 128, the file has 128"},
      {175, "header says 3×4 float32 = 48 bytes of data after offset 128, the file has 175"},
  };
  for (const auto& [size, expected] : cases) {
    const fs::path p = dir_ / "cut.npy";
    spit(p, bytes.substr(0, size));
    for (bool mmap : {true, false}) {
      const Error e = error_from([&] { read_npy(p, {.mmap = mmap}); });
      EXPECT_EQ(e.kind(), ErrorKind::kData);
      EXPECT_NE(e.message().find("cut.npy"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(expected), std::string::npos) << size << ": " << e.message();
    }
  }
}

TEST_F(NpyTest, UnparseableHeaderUnsupportedDtypeAndFortranFlag) {
  const fs::path p = dir_ / "h.npy";
  write_npy(p, at::ones({3, 4}));
  const std::string bytes = slurp(p);
  const auto patched = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    const auto at = b.find(from);
    EXPECT_NE(at, std::string::npos);
    b.replace(at, from.size(), to);  // same length: the header length stays right
    spit(p, b);
  };
  patched("'shape': (3, 4)", "'shape': [3; 4)");
  Error e = error_from([&] { read_npy(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("h.npy: cannot parse the NPY header dict at byte 62: expected ',' or ']'"),
            std::string::npos)
      << e.message();

  patched("'descr': '<f4'", "'descr': '<c8'");
  e = error_from([&] { read_npy(p); });
  EXPECT_NE(e.message().find("h.npy: dtype '<c8' is not supported"), std::string::npos) << e.message();

  patched("'fortran_order': False", "'fortran_order': True ");
  e = error_from([&] { read_npy(p); });
  EXPECT_NE(e.message().find("Fortran (column-major) order"), std::string::npos) << e.message();

  patched("'shape'", "'shapf'");
  e = error_from([&] { read_npy(p); });
  EXPECT_NE(e.message().find("bad NPY header dict at byte 10: no 'shape' key"), std::string::npos) << e.message();
}

// --- .npz: as numpy writes them ---

TEST_F(NpzTest, ReadsSavezAndSavezCompressedFromNumpy) {
  for (const char* name : {"savez.npz", "savez_compressed.npz"}) {
    for (bool mmap : {true, false}) {
      SCOPED_TRACE(fmt::format("{} mmap={}", name, mmap));
      expect_fixture_arrays(read_npz(kFixtures / name, {.mmap = mmap}));
    }
    EXPECT_EQ(list_npz(kFixtures / name), (std::vector<std::string>{"a", "b", "c", "d"}));
    EXPECT_TRUE(at::equal(read_npz_array(kFixtures / name, "b"), at::arange(5, at::kLong) - 2));
  }
}

TEST_F(NpzTest, MissingArrayListsTheNames) {
  const Error e = error_from([] { read_npz_array(kFixtures / "savez.npz", "x"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("savez.npz: no array 'x' (entry 'x.npy'); the archive holds: a, b, c, d"),
            std::string::npos)
      << e.message();
}

// --- .npz: as bellows writes them ---

TEST_F(NpzTest, WriteNpzRoundTripAndMapsAlignedEntries) {
  const std::map<std::string, at::Tensor> arrays = {{"x", at::randn({33, 7}).to(at::kDouble)},
                                                    {"y", at::arange(33, at::kLong)},
                                                    {"m", at::ones({3}, at::kBool)},
                                                    {"h", at::randn({5, 5}).to(at::kHalf)}};
  const fs::path p = dir_ / "w.npz";
  write_npz(p, arrays);
  for (bool mmap : {true, false}) {
    const auto back = read_npz(p, {.mmap = mmap});
    ASSERT_EQ(back.size(), arrays.size());
    for (const auto& [name, t] : arrays) {
      EXPECT_TRUE(at::equal(back.at(name), t)) << name;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(back.at(name).data_ptr()) % 64, 0u) << name;
      EXPECT_EQ(mapped_file_at(back.at(name).data_ptr()), mmap ? fs::canonical(p).string() : "") << name;
    }
  }
  EXPECT_NE(slurp(p).find("PK\x05\x06"), std::string::npos);
  EXPECT_EQ(slurp(p).find("PK\x06\x06"), std::string::npos);  // no ZIP64 needed
}

TEST_F(NpzTest, Zip64RecordsAreRead) {
  const std::map<std::string, at::Tensor> arrays = {{"a", at::arange(10, at::kFloat)},
                                                    {"b", at::ones({2, 2}, at::kInt)}};
  const fs::path p = dir_ / "z64.npz";
  write_npz(p, arrays, {.force_zip64 = true});
  const std::string bytes = slurp(p);
  EXPECT_NE(bytes.find("PK\x06\x06"), std::string::npos);  // ZIP64 end of central directory
  EXPECT_NE(bytes.find("PK\x06\x07"), std::string::npos);  // and its locator
  for (bool mmap : {true, false}) {
    const auto back = read_npz(p, {.mmap = mmap});
    EXPECT_TRUE(at::equal(back.at("a"), arrays.at("a")));
    EXPECT_TRUE(at::equal(back.at("b"), arrays.at("b")));
  }
}

// --- .npz: corrupt archives, built here with zlib so that every byte is known ---

struct ZipPart {
  std::string name;
  std::string data;
  bool deflate = false;
};

void put16(std::string& s, std::uint32_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& s, std::uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}

std::string raw_deflate(const std::string& in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A plain zip (no ZIP64) of `parts`; `offsets` receives each entry's local header offset.
std::string build_zip(const std::vector<ZipPart>& parts, std::vector<std::size_t>* data_offsets = nullptr) {
  std::string zip, dir;
  for (const auto& p : parts) {
    const std::string stored = p.deflate ? raw_deflate(p.data) : p.data;
    const auto crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(p.data.data()), p.data.size()));
    std::string head;
    put16(head, 20), put16(head, 0), put16(head, p.deflate ? 8 : 0), put16(head, 0), put16(head, 0x21);
    put32(head, crc), put32(head, static_cast<std::uint32_t>(stored.size())),
        put32(head, static_cast<std::uint32_t>(p.data.size()));
    put16(head, static_cast<std::uint32_t>(p.name.size())), put16(head, 0);
    const auto offset = static_cast<std::uint32_t>(zip.size());
    zip += std::string("PK\x03\x04", 4) + head + p.name;
    if (data_offsets) data_offsets->push_back(zip.size());
    zip += stored;
    dir += std::string("PK\x01\x02", 4);
    put16(dir, 20);
    dir += head;
    put16(dir, 0), put16(dir, 0), put16(dir, 0), put32(dir, 0), put32(dir, offset);
    dir += p.name;
  }
  const auto dir_offset = static_cast<std::uint32_t>(zip.size());
  zip += dir;
  zip += std::string("PK\x05\x06", 4);
  put16(zip, 0), put16(zip, 0), put16(zip, static_cast<std::uint32_t>(parts.size())),
      put16(zip, static_cast<std::uint32_t>(parts.size()));
  put32(zip, static_cast<std::uint32_t>(dir.size())), put32(zip, dir_offset), put16(zip, 0);
  return zip;
}

class NpzCorruptTest : public NpyTest {
 protected:
  void SetUp() override {
    NpyTest::SetUp();
    write_npy(dir_ / "a.npy", at::arange(1000, at::kFloat));
    write_npy(dir_ / "b.npy", at::arange(6, at::kLong).reshape({2, 3}));
    a_ = slurp(dir_ / "a.npy");
    b_ = slurp(dir_ / "b.npy");
  }
  std::string zip(std::vector<std::size_t>* offsets = nullptr) {
    return build_zip({{"a.npy", a_, true}, {"b.npy", b_, false}}, offsets);
  }
  Error read_error(const std::string& bytes, bool mmap = true) {
    const fs::path p = dir_ / "bad.npz";
    spit(p, bytes);
    Error e = error_from([&] { read_npz(p, {.mmap = mmap}); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(e.message().find("bad.npz"), std::string::npos) << e.message();
    return e;
  }
  std::string a_, b_;
};

TEST_F(NpzCorruptTest, ZlibBuiltArchiveReads) {
  const fs::path p = dir_ / "ok.npz";
  spit(p, zip());
  const auto arrays = read_npz(p);
  EXPECT_TRUE(at::equal(arrays.at("a"), at::arange(1000, at::kFloat)));
  EXPECT_TRUE(at::equal(arrays.at("b"), at::arange(6, at::kLong).reshape({2, 3})));
}

TEST_F(NpzCorruptTest, NoEndRecord) {
  const std::string z = zip();
  const Error e = read_error(z.substr(0, z.size() - 10));
  EXPECT_NE(e.message().find("not a zip archive (no end-of-central-directory record"), std::string::npos)
      << e.message();
  const Error npy = error_from([&] { read_npz(dir_ / "a.npy"); });
  EXPECT_NE(npy.hint().find("this is an .npy file"), std::string::npos) << npy.hint();
}

TEST_F(NpzCorruptTest, BadCentralDirectory) {
  std::string z = zip();
  const auto dir = z.find("PK\x01\x02");
  z[dir + 2] = 9;
  Error e = read_error(z);
  EXPECT_NE(e.message().find(fmt::format(
                "corrupt zip archive: central directory entry 0 at byte {} is missing or has a bad signature", dir)),
            std::string::npos)
      << e.message();

  z = zip();
  const auto end = z.rfind("PK\x05\x06");
  z[end + 19] = 0x7f;  // directory offset far past the end
  e = read_error(z);
  EXPECT_NE(e.message().find("does not fit before the end record at byte"), std::string::npos) << e.message();
}

TEST_F(NpzCorruptTest, TruncatedArchiveAtSeveralPoints) {
  const std::string z = zip();
  for (std::size_t size : {std::size_t{0}, std::size_t{21}, std::size_t{100}, z.size() / 2, z.size() - 1}) {
    const Error e = read_error(z.substr(0, size));
    EXPECT_NE(e.message().find("not a zip archive"), std::string::npos) << size << ": " << e.message();
  }
}

TEST_F(NpzCorruptTest, CrcMismatch) {
  std::vector<std::size_t> offsets;
  std::string z = zip(&offsets);
  const auto dir = z.find("PK\x01\x02");
  z[dir + 16] ^= 0x55;  // the CRC of the deflated entry
  Error e = read_error(z);
  EXPECT_NE(
      e.message().find(fmt::format("bad.npz: entry 'a.npy' fails its CRC-32 check (directory at byte {} says", dir)),
      std::string::npos)
      << e.message();

  z = zip(&offsets);
  z[offsets[1] + 128 + 8 + 3] ^= 1;  // a data byte of the stored entry: caught when read, not when mapped
  e = read_error(z, /*mmap=*/false);
  EXPECT_NE(e.message().find("entry 'b.npy' fails its CRC-32 check"), std::string::npos) << e.message();
  EXPECT_EQ(read_npz(dir_ / "bad.npz").at("b")[0][1].item<std::int64_t>(), 1 + (1 << 24));
}

TEST_F(NpzCorruptTest, InflateErrors) {
  std::vector<std::size_t> offsets;
  std::string z = zip(&offsets);
  z[offsets[0]] = static_cast<char>(0xff);  // an invalid DEFLATE block type
  Error e = read_error(z);
  EXPECT_NE(e.message().find(fmt::format("bad.npz entry 'a.npy': inflate error after 1 of", offsets[0])),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find(fmt::format("(entry data at byte {})", offsets[0])), std::string::npos) << e.message();

  // The entry's compressed size cut short in both directory records: the stream ends early.
  const std::string deflated = raw_deflate(a_);
  std::string cut = build_zip({{"a.npy", a_, true}});
  for (std::size_t at : {std::size_t{18}, cut.find("PK\x01\x02") + 20}) {
    const auto shorter = static_cast<std::uint32_t>(deflated.size() / 2);
    std::string v;
    put32(v, shorter);
    cut.replace(at, 4, v);
  }
  e = read_error(cut);
  EXPECT_NE(e.message().find("the compressed data end early"), std::string::npos) << e.message();
}

TEST_F(NpzCorruptTest, EntryDataPastTheEnd) {
  std::string z = zip();
  const auto dir = z.find("PK\x01\x02");
  z.replace(dir + 20, 4, std::string("\xff\xff\xff\x7f", 4));  // compressed size of a.npy
  const Error e = read_error(z);
  EXPECT_NE(e.message().find("entry 'a.npy': 2147483647 bytes of data at byte 35 run past the end"), std::string::npos)
      << e.message();
}

// --- the dataset ---

TEST_F(NpyDatasetTest, BatchesFromNpyAndNpz) {
  const at::Tensor x = at::arange(30, at::kDouble).reshape({10, 3}) / 4;
  const at::Tensor y = at::arange(10, at::kLong) * 3;
  write_npy(dir_ / "x.npy", x);
  write_npz(dir_ / "xy.npz", {{"y", y}, {"x2", x.to(at::kFloat)}});
  for (const auto& arrays : std::vector<std::map<std::string, std::string>>{
           {{"x", (dir_ / "x.npy").string()}, {"y", (dir_ / "xy.npz:y").string()}},
           {{"x", (dir_ / "xy.npz:x2").string()}, {"y", (dir_ / "xy.npz").string()}}}) {
    const auto ds = make_npy_dataset(arrays);
    ASSERT_EQ(ds->size(), 10);
    FetchContext ctx;
    const std::vector<std::int64_t> idx = {7, 1, 7};
    const Batch b = ds->get_batch(idx, ctx);
    EXPECT_EQ(b.size, 3);
    EXPECT_EQ(b.at("x").scalar_type(), at::kFloat);  // float64 arrays arrive as float32
    EXPECT_TRUE(at::equal(b.at("x"), x.index_select(0, at::tensor(idx)).to(at::kFloat)));
    EXPECT_TRUE(at::equal(b.at("y"), at::tensor({21L, 3L, 21L})));
    const Example e = ds->get(4, ctx);
    EXPECT_TRUE(at::equal(e.at("x"), x[4].to(at::kFloat)));
    EXPECT_EQ(e.at("y").item<std::int64_t>(), 12);
    EXPECT_EQ(ds->describe(4), fmt::format("{} index 4", arrays.at("x").substr(0, arrays.at("x").find(':'))));
    EXPECT_NE(ds->name().find("10 samples"), std::string::npos) << ds->name();
  }
}

TEST_F(NpyDatasetTest, MismatchedLengthsAndMissingArray) {
  write_npy(dir_ / "x.npy", at::zeros({10, 3}));
  write_npy(dir_ / "y.npy", at::zeros({9}));
  Error e = error_from([&] { make_npy_dataset({{"x", (dir_ / "x.npy").string()}, {"y", (dir_ / "y.npy").string()}}); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("'y' has 9 samples"), std::string::npos) << e.message();

  write_npz(dir_ / "d.npz", {{"x", at::zeros({4})}});
  e = error_from([&] { make_npy_dataset({{"x", (dir_ / "d.npz").string()}, {"y", (dir_ / "d.npz").string()}}); });
  EXPECT_NE(e.message().find("no array 'y'"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace bellows::data
