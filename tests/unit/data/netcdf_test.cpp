// NetCDF datasets over a small file written here with the netCDF C API (time 6, level 2, lat 4, lon 5; a
// surface variable and a packed one with levels, coordinates): shapes, exact values, channel names, horizon,
// normalisation against a hand computation, the statistics cache, the per-sample (streamed) path, and errors.
#include "bellows/data/netcdf_dataset.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netcdf.h>

#include <tuple>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bellows/util/error.h"
#include "test_util.h"
#include "test_paths.h"

namespace bellows::data {
namespace {

using test_support::error_from;

namespace fs = std::filesystem;

constexpr int kT = 6, kL = 2, kLat = 4, kLon = 5;
const std::vector<double> kLevels = {850, 500};

// The values written: t2m in kelvin, u packed as short with scale 0.5 and offset 10.
double t2m(int t, int i, int j) {
  return 280 + t + 0.25 * i + 0.125 * j + (t % 2 ? 0.5 * i * j : 0);
}
std::int16_t u_raw(int t, int l, int i, int j) {
  return static_cast<std::int16_t>(t * 100 - l * 40 + i * 5 + j * j);
}
double u(int t, int l, int i, int j) {
  return u_raw(t, l, i, j) * 0.5 + 10;
}


void ok(int status) {
  ASSERT_EQ(status, NC_NOERR) << nc_strerror(status);
}

struct FileOptions {
  int format = NC_NETCDF4;
  float fill_at_t = -1;  // >= 0: t2m gets a _FillValue and holds it at this time step
};

void write_weather(const fs::path& path, const FileOptions& o = {}) {
  int nc = -1;
  ok(nc_create(path.c_str(), NC_CLOBBER | o.format, &nc));
  int d_time, d_level, d_lat, d_lon;
  ok(nc_def_dim(nc, "time", NC_UNLIMITED, &d_time));
  ok(nc_def_dim(nc, "level", kL, &d_level));
  ok(nc_def_dim(nc, "lat", kLat, &d_lat));
  ok(nc_def_dim(nc, "lon", kLon, &d_lon));
  int v_time, v_level, v_lat, v_lon, v_t2m, v_u, v_mask;
  ok(nc_def_var(nc, "time", NC_DOUBLE, 1, &d_time, &v_time));
  ok(nc_def_var(nc, "level", NC_INT, 1, &d_level, &v_level));
  ok(nc_def_var(nc, "lat", NC_FLOAT, 1, &d_lat, &v_lat));
  ok(nc_def_var(nc, "lon", NC_FLOAT, 1, &d_lon, &v_lon));
  const int dims3[] = {d_time, d_lat, d_lon}, dims4[] = {d_time, d_level, d_lat, d_lon}, dims2[] = {d_lat, d_lon};
  ok(nc_def_var(nc, "t2m", NC_FLOAT, 3, dims3, &v_t2m));
  ok(nc_def_var(nc, "u", NC_SHORT, 4, dims4, &v_u));
  ok(nc_def_var(nc, "mask", NC_BYTE, 2, dims2, &v_mask));
  const double scale = 0.5, offset = 10;
  ok(nc_put_att_double(nc, v_u, "scale_factor", NC_DOUBLE, 1, &scale));
  ok(nc_put_att_double(nc, v_u, "add_offset", NC_DOUBLE, 1, &offset));
  const float fill = -999;
  if (o.fill_at_t >= 0) ok(nc_put_att_float(nc, v_t2m, "_FillValue", NC_FLOAT, 1, &fill));
  ok(nc_enddef(nc));

  std::vector<double> times;
  for (int t = 0; t < kT; ++t) times.push_back(6.0 * t);
  const int levels[] = {850, 500};
  const float lats[] = {40, 40.5, 41, 41.5}, lons[] = {-5, -4, -3, -2, -1};
  std::size_t start1 = 0, count1 = kT;
  ok(nc_put_vara_double(nc, v_time, &start1, &count1, times.data()));
  ok(nc_put_var_int(nc, v_level, levels));
  ok(nc_put_var_float(nc, v_lat, lats));
  ok(nc_put_var_float(nc, v_lon, lons));
  std::vector<float> tv;
  std::vector<std::int16_t> uv;
  for (int t = 0; t < kT; ++t)
    for (int i = 0; i < kLat; ++i)
      for (int j = 0; j < kLon; ++j)
        tv.push_back(t == o.fill_at_t && i == 2 && j == 3 ? fill : static_cast<float>(t2m(t, i, j)));
  for (int t = 0; t < kT; ++t)
    for (int l = 0; l < kL; ++l)
      for (int i = 0; i < kLat; ++i)
        for (int j = 0; j < kLon; ++j) uv.push_back(u_raw(t, l, i, j));
  const std::size_t start3[] = {0, 0, 0}, count3[] = {kT, kLat, kLon};
  const std::size_t start4[] = {0, 0, 0, 0}, count4[] = {kT, kL, kLat, kLon};
  ok(nc_put_vara_float(nc, v_t2m, start3, count3, tv.data()));
  ok(nc_put_vara_short(nc, v_u, start4, count4, uv.data()));
  const std::vector<signed char> mask(kLat * kLon, 1);
  ok(nc_put_var_schar(nc, v_mask, mask.data()));
  ok(nc_close(nc));
}

// Channel c of the file at time t, as written: c 0 is t2m, 1 and 2 are u at levels 850 and 500.
at::Tensor expected_channel(int c, int t) {
  at::Tensor out = at::empty({kLat, kLon}, at::kDouble);
  for (int i = 0; i < kLat; ++i)
    for (int j = 0; j < kLon; ++j) out[i][j] = c == 0 ? t2m(t, i, j) : u(t, c - 1, i, j);
  return out;
}

at::Tensor expected_state(int t) {
  return at::stack({expected_channel(0, t), expected_channel(1, t), expected_channel(2, t)}).to(at::kFloat);
}

// Mean and population std of channel c over the whole file, by hand in float64.
std::pair<double, double> hand_stats(int c) {
  double sum = 0, n = 0;
  for (int t = 0; t < kT; ++t)
    for (int i = 0; i < kLat; ++i)
      for (int j = 0; j < kLon; ++j, ++n) sum += c == 0 ? static_cast<float>(t2m(t, i, j)) : u(t, c - 1, i, j);
  const double mean = sum / n;
  double ss = 0;
  for (int t = 0; t < kT; ++t)
    for (int i = 0; i < kLat; ++i)
      for (int j = 0; j < kLon; ++j) {
        const double v = c == 0 ? static_cast<float>(t2m(t, i, j)) : u(t, c - 1, i, j);
        ss += (v - mean) * (v - mean);
      }
  return {mean, std::sqrt(ss / n)};
}

class NetcdfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("bellows_nc_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "weather.nc";
    write_weather(file_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  NetcdfOptions raw() const {
    NetcdfOptions o;
    o.path = file_;
    o.normalize = false;
    return o;
  }
  fs::path dir_, file_;
};

TEST_F(NetcdfTest, ShapesChannelsCoordinatesAndExactValues) {
  const auto ds = make_netcdf_dataset(raw());
  EXPECT_TRUE(ds->in_memory());
  EXPECT_EQ(ds->size(), kT - 1);
  EXPECT_EQ(ds->time_steps(), kT);
  EXPECT_EQ(ds->input_channels(), (std::vector<std::string>{"t2m", "u@850", "u@500"}));
  EXPECT_EQ(ds->target_channels(), ds->input_channels());
  EXPECT_EQ(ds->lat(), (std::vector<double>{40, 40.5, 41, 41.5}));
  EXPECT_EQ(ds->lon(), (std::vector<double>{-5, -4, -3, -2, -1}));
  EXPECT_EQ(ds->levels(), kLevels);
  EXPECT_TRUE(ds->input_stats().empty());

  FetchContext ctx;
  const Example e = ds->get(3, ctx);
  ASSERT_EQ(e.at("x").sizes(), (std::vector<std::int64_t>{3, kLat, kLon}));
  EXPECT_EQ(e.at("x").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(e.at("x"), expected_state(3)));  // u unpacked: raw * 0.5 + 10
  EXPECT_TRUE(at::equal(e.at("y"), expected_state(4)));
  EXPECT_EQ(ds->describe(3), fmt::format("{} time index 3 (target 4)", file_.string()));
  EXPECT_NE(ds->name().find("5 samples, 3 -> 3 channels, 4×5 grid, in memory"), std::string::npos) << ds->name();
}

TEST_F(NetcdfTest, HorizonAndTargets) {
  NetcdfOptions o = raw();
  o.horizon = 0;
  FetchContext ctx;
  auto ds = make_netcdf_dataset(o);
  EXPECT_EQ(ds->size(), kT);
  EXPECT_TRUE(at::equal(ds->get(5, ctx).at("y"), expected_state(5)));

  o.horizon = 3;
  o.variables = {"u"};
  o.targets = {"t2m"};
  ds = make_netcdf_dataset(o);
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->input_channels(), (std::vector<std::string>{"u@850", "u@500"}));
  EXPECT_EQ(ds->target_channels(), (std::vector<std::string>{"t2m"}));
  const Example e = ds->get(2, ctx);
  EXPECT_TRUE(at::equal(e.at("x"), expected_state(2).narrow(0, 1, 2)));
  EXPECT_TRUE(at::equal(e.at("y"), expected_state(5).narrow(0, 0, 1)));
  const std::vector<std::int64_t> idx = {2, 0};
  const Batch b = ds->get_batch(idx, ctx);
  EXPECT_TRUE(at::equal(b.at("x"), at::stack({expected_state(2), expected_state(0)}).narrow(1, 1, 2)));
  EXPECT_TRUE(at::equal(b.at("y"), at::stack({expected_state(5), expected_state(3)}).narrow(1, 0, 1)));

  o.horizon = kT;
  const Error err = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_EQ(err.kind(), ErrorKind::kConfig);
  EXPECT_NE(err.message().find("horizon is 6, but the file has 6 time steps"), std::string::npos) << err.message();
}

TEST_F(NetcdfTest, NormalisationMatchesAHandComputation) {
  NetcdfOptions o = raw();
  o.normalize = true;
  const auto ds = make_netcdf_dataset(o);
  const auto stats = ds->input_stats();
  ASSERT_EQ(stats.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    const auto [mean, std] = hand_stats(c);
    EXPECT_EQ(stats[c].name, ds->input_channels()[c]);
    EXPECT_NEAR(stats[c].mean, mean, 1e-12 * std::abs(mean)) << c;
    EXPECT_NEAR(stats[c].std, std, 1e-12 * std) << c;
  }
  // Every time step of the file: x of samples 0..4 and y of the last one. Per channel mean 0, std 1.
  FetchContext ctx;
  std::vector<at::Tensor> states;
  for (int t = 0; t < kT - 1; ++t) states.push_back(ds->get(t, ctx).at("x"));
  states.push_back(ds->get(kT - 2, ctx).at("y"));
  const at::Tensor all = at::stack(states).to(at::kDouble);  // [T, C, lat, lon]
  for (int c = 0; c < 3; ++c) {
    const at::Tensor ch = all.select(1, c);
    EXPECT_NEAR(ch.mean().item<double>(), 0, 1e-6) << c;
    EXPECT_NEAR(ch.std(/*unbiased=*/false).item<double>(), 1, 1e-6) << c;
    const auto [mean, std] = hand_stats(c);
    EXPECT_TRUE(at::allclose(ch[4], (expected_channel(c, 4) - mean) / std, 1e-5, 1e-5)) << c;
  }
}

TEST_F(NetcdfTest, StreamedSamplesEqualInMemoryOnes) {
  NetcdfOptions o = raw();
  o.normalize = true;
  const auto memory = make_netcdf_dataset(o);
  o.memory_limit_bytes = 0;
  const auto streamed = make_netcdf_dataset(o);
  EXPECT_TRUE(memory->in_memory());
  EXPECT_FALSE(streamed->in_memory());
  EXPECT_NE(streamed->name().find("read per sample"), std::string::npos);
  FetchContext ctx;
  const std::vector<std::int64_t> idx = {4, 0, 2, 2};
  const Batch a = memory->get_batch(idx, ctx), b = streamed->get_batch(idx, ctx);
  EXPECT_TRUE(at::allclose(a.at("x"), b.at("x"), 1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(a.at("y"), b.at("y"), 1e-6, 1e-6));
  EXPECT_TRUE(at::equal(memory->get(2, ctx).at("x"), a.at("x")[2]));
  EXPECT_GT(ctx.times.read, 0);

  // Loader workers call get() concurrently; the library is used under one lock.
  std::vector<std::thread> workers;
  std::atomic<int> mismatches = 0;
  for (int w = 0; w < 4; ++w)
    workers.emplace_back([&, w] {
      FetchContext c;
      for (int k = 0; k < 20; ++k) {
        const std::int64_t t = (w + k) % streamed->size();
        if (!at::allclose(streamed->get(t, c).at("y"), memory->get(t, c).at("y"), 1e-6, 1e-6)) ++mismatches;
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(mismatches, 0);
}

TEST_F(NetcdfTest, StatsCacheIsWrittenReusedAndRecomputedWhenStale) {
  NetcdfOptions o = raw();
  o.normalize = true;
  const fs::path cache = fs::path(file_.string() + ".stats.json");
  const double mean0 = hand_stats(0).first;
  {
    const auto ds = make_netcdf_dataset(o);
    EXPECT_EQ(ds->stats_cache_path(), cache);
    ASSERT_TRUE(fs::exists(cache));
  }
  // Proof that the cache is read: change a mean in it.
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cache));
  j["mean"][0] = 1000.0;
  std::ofstream(cache) << j.dump();
  EXPECT_EQ(make_netcdf_dataset(o)->input_stats()[0].mean, 1000.0);

  // Another variable list: a different key, so recomputed (and the cache rewritten for it).
  o.variables = {"t2m"};
  EXPECT_NEAR(make_netcdf_dataset(o)->input_stats()[0].mean, mean0, 1e-9);
  j = nlohmann::json::parse(std::ifstream(cache));
  EXPECT_EQ(j["key"]["variables"], nlohmann::json::array({"t2m"}));

  // The file changed (new mtime): stale, recomputed.
  j["mean"][0] = 1000.0;
  std::ofstream(cache) << j.dump();
  EXPECT_EQ(make_netcdf_dataset(o)->input_stats()[0].mean, 1000.0);
  fs::last_write_time(file_, fs::last_write_time(file_) + std::chrono::seconds(10));
  EXPECT_NEAR(make_netcdf_dataset(o)->input_stats()[0].mean, mean0, 1e-9);

  // A garbage cache is recomputed and overwritten.
  std::ofstream(cache) << "{not json";
  EXPECT_NEAR(make_netcdf_dataset(o)->input_stats()[0].mean, mean0, 1e-9);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(cache))["version"], 1);
}

TEST_F(NetcdfTest, ExplicitStatsCachePath) {
  NetcdfOptions o = raw();
  o.normalize = true;
  o.stats_cache = dir_ / "sub" / "stats.json";
  const auto ds = make_netcdf_dataset(o);
  EXPECT_EQ(ds->stats_cache_path(), o.stats_cache);
  EXPECT_TRUE(fs::exists(o.stats_cache));
  EXPECT_FALSE(fs::exists(file_.string() + ".stats.json"));
  const auto files = std::distance(fs::directory_iterator(dir_ / "sub"), fs::directory_iterator());
  EXPECT_EQ(files, 1);  // no temporary file left behind
}

TEST_F(NetcdfTest, ClassicFormatFile) {
  const fs::path classic = dir_ / "classic.nc";
  write_weather(classic, {.format = NC_64BIT_OFFSET});
  NetcdfOptions o = raw();
  o.path = classic;
  FetchContext ctx;
  EXPECT_TRUE(at::equal(make_netcdf_dataset(o)->get(1, ctx).at("y"), expected_state(2)));
}

// --- errors ---

TEST_F(NetcdfTest, MissingGarbageAndTruncatedFiles) {
  NetcdfOptions o = raw();
  o.path = dir_ / "absent.nc";
  Error e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("absent.nc: no such file"), std::string::npos) << e.message();

  o.path = dir_ / "garbage.nc";
  std::ofstream(o.path) << std::string(3000, 'x');
  e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("garbage.nc: cannot open as NetCDF: NetCDF: Unknown file format"), std::string::npos)
      << e.message();

  for (const int format : {NC_NETCDF4, NC_64BIT_OFFSET}) {
    const fs::path whole = dir_ / "whole.nc";
    write_weather(whole, {.format = format});
    o.path = dir_ / "cut.nc";
    for (const double fraction : {0.1, 0.5, 0.9}) {
      fs::copy_file(whole, o.path, fs::copy_options::overwrite_existing);
      fs::resize_file(o.path, static_cast<std::uintmax_t>(static_cast<double>(fs::file_size(whole)) * fraction));
      e = error_from([&] { make_netcdf_dataset(o); });
      EXPECT_EQ(e.kind(), ErrorKind::kData);
      EXPECT_NE(e.message().find("cut.nc: "), std::string::npos) << e.message();
      // netCDF-4 (HDF5) truncation is the library's error; a classic file's is found from its header: cut inside
      // the header (10%), the header's walk says so before libnetcdf reads it; cut in the data, the header says
      // where the data end.
      const bool classic = format == NC_64BIT_OFFSET;
      const char* expected = !classic ? "NetCDF: "
                             : fraction > 0.2 ? "cut.nc: truncated: its header places data up to byte"
                                              : "cut.nc: not a valid NetCDF classic header: the header ends early";
      EXPECT_NE(e.message().find(expected), std::string::npos) << format << " " << fraction << ": " << e.message();
    }
  }
}

// Found by fuzzing (tests/fuzz): classic headers that libnetcdf 4.9 does not survive are rejected before it
// parses them: a dimension name longer than NC_MAX_NAME (nc_inq_dimname wrote past bellows' name buffer) and a
// CDF-5 header of 31 bytes claiming 536,870,916 dimensions (nc_open crashed or exhausted memory).
TEST_F(NetcdfTest, HeadersLibnetcdfDoesNotSurviveAreRejectedFirst) {
  const auto be32 = [](std::string& s, std::uint32_t v) {
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  std::string long_name = "CDF\x01";
  be32(long_name, 0);           // numrecs
  be32(long_name, 0x0a);        // NC_DIMENSION (the classic format's tag; not in netcdf.h)
  be32(long_name, 1);           // one dimension
  be32(long_name, 261);         // its name: 261 bytes
  long_name += std::string(264, 'a');
  be32(long_name, 3);           // its length
  for (int i = 0; i < 4; ++i) be32(long_name, 0);  // no attributes, no variables
  const std::string dims = std::string("CDF\x05", 4) + std::string("\0\0\0\0\0\0\0\0\0\0\0\x0a\0\0\0\0\x20\0\0\x04\0\0\0\0\0\0\0", 27);
  ASSERT_EQ(dims.size(), 31u);
  for (const auto& [file, bytes, expected] : {std::tuple{"long_name.nc", long_name, "a name of 261 bytes at byte 16 (the format allows 256)"},
                                              std::tuple{"dims.nc", dims, "536870916 dimensions at byte 24, more than the file's 31 bytes can hold"}}) {
    NetcdfOptions o = raw();
    o.path = dir_ / file;
    std::ofstream(o.path, std::ios::binary) << bytes;
    const Error e = error_from([&] { make_netcdf_dataset(o); });
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.message();
    EXPECT_NE(e.message().find(std::string(file) + ": not a valid NetCDF classic header: " + expected), std::string::npos) << e.message();
  }
  // A second dimension named "time\0" (libnetcdf reads it as another "time"): the coordinate variable of the
  // second, read by the first's length, overran bellows' buffer (found under valgrind from the fuzz corpus).
  NetcdfOptions o = raw();
  o.path = fs::path(BELLOWS_TEST_DATA_DIR) / "fuzz" / "netcdf_duplicate_dimension.nc";
  const Error e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData) << e.message();
  EXPECT_NE(e.message().find("netcdf_duplicate_dimension.nc: not a valid NetCDF classic header: a name with a NUL byte at byte 32"), std::string::npos)
      << e.message();
}

TEST_F(NetcdfTest, AStreamingRecordCountIsADataError) {
  // numrecs 0xffffffff (STREAMING: a file still being written): libnetcdf 4.9 reports 2^32 - 1 time steps for this
  // 926-byte file, and reading the time coordinate asked for 32 GiB (found by a 10-minute fuzzing run).
  NetcdfOptions o = raw();
  o.path = fs::path(BELLOWS_TEST_DATA_DIR) / "fuzz" / "netcdf_streaming_records.nc";
  const Error e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData) << e.message();
  EXPECT_NE(e.message().find("netcdf_streaming_records.nc: not a valid NetCDF classic header: the record count is STREAMING "
                             "(0xffffffff): a file still being written, not a finished one"),
            std::string::npos)
      << e.message();
  // The reader itself refuses it too, before any allocation.
  const Error direct = error_from([&] { NetcdfFile(o.path, {}); });
  EXPECT_EQ(direct.kind(), ErrorKind::kData) << direct.message();
}

TEST_F(NetcdfTest, UnknownVariableSuggestsTheClosest) {
  NetcdfOptions o = raw();
  o.variables = {"t2n"};
  Error e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("weather.nc: no variable 't2n' (did you mean 't2m'?); the file's variables: time, level, "
                             "lat, lon, t2m, u, mask"),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.hint().find("data.netcdf.variables"), std::string::npos) << e.hint();

  o.variables = {"u"};
  o.targets = {"v"};
  e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_NE(e.hint().find("data.netcdf.targets"), std::string::npos) << e.hint();
}

TEST_F(NetcdfTest, VariableWithoutTheGridDims) {
  NetcdfOptions o = raw();
  o.variables = {"t2m", "mask"};
  Error e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find(
                "variable 'mask' has dims (lat, lon), but bellows reads (time, lat, lon) or (time, level, lat, lon)"),
            std::string::npos)
      << e.message();

  o.variables = {};
  o.time_dim = "valid_time";
  e = error_from([&] { make_netcdf_dataset(o); });
  EXPECT_NE(e.message().find("no dimension 'valid_time'; the file's dimensions: time, level, lat, lon"),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.hint().find("data.netcdf.time_dim"), std::string::npos) << e.hint();
}

TEST_F(NetcdfTest, MissingValuesNameTheVariableAndTimeIndex) {
  write_weather(file_, {.fill_at_t = 4});
  NetcdfOptions o = raw();
  for (const std::int64_t limit : {std::int64_t{2} << 30, std::int64_t{0}}) {
    o.memory_limit_bytes = limit;
    const Error e = error_from([&] {
      const auto ds = make_netcdf_dataset(o);  // streamed without normalisation: found when the sample is read
      FetchContext ctx;
      for (std::int64_t t = 0; t < ds->size(); ++t) ds->get(t, ctx);
    });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(
        e.message().find("variable 't2m' has a missing value (NaN, _FillValue or missing_value: -999) at time index 4, "
                         "lat index 2, lon index 3"),
        std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace bellows::data
