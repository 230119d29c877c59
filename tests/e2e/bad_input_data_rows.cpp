// The bad-input catalogue's data rows (bad_input.h): each data format's corruptions, exit 3 naming the file and the
// line, byte, variable or image.
#include "bad_input.h"

namespace bellows::testing::bad_input {
namespace {

// Paths (exit 3): one rule for every path key (config/paths.h): a config file's relative paths start at its
// directory, the command line's at the working directory; a missing file is named as written, with the path
// looked for and the rule. Issue 44: data.path went by the working directory where model.path went by the file.
std::vector<BadInput> data_path_rows() {
  return {
      {"DataPathRelativeToTheConfigFile",
       [](const fs::path& d) {
         write_xy(d);  // beside the working directory's idea of the config, not beside the config
         write_text(d / "cfg" / "run.yaml", "data:\n  source: npy\n  path: x.npy\n");
       },
       "train '{dir}/cfg/run.yaml' model.in_features=4 data.batch_size=8" + kRun,
       3,
       {"{dir}/cfg/run.yaml:3:3: data.path 'x.npy' does not exist: looked for {dir}/cfg/x.npy (relative to the directory of "
        "{dir}/cfg/run.yaml, {dir}/cfg)",
        "a relative path in a config file starts at that file's directory, on the command line at the working directory"}},
      {"NpyTargetsFileRelativeToTheConfigFile",
       [](const fs::path& d) {
         write_text(d / "cfg" / "run.yaml", "data:\n  source: npy\n  path: x.npy\n  npy: {y: targets/y.npy}\n");
         write_xy(d / "cfg");  // x.npy and y.npy beside the config; targets/ is not there
       },
       "train '{dir}/cfg/run.yaml' model.in_features=4 data.batch_size=8" + kRun,
       3,
       {"{dir}/cfg/run.yaml:4:9: data.npy.y 'targets/y.npy' does not exist: looked for {dir}/cfg/targets/y.npy (relative to the "
        "directory of {dir}/cfg/run.yaml, {dir}/cfg)"}},
      {"DataPathOnTheCommandLineRelativeToTheWorkingDirectory",
       nothing,
       "train data.source=npy data.path=nowhere/x.npy model.in_features=4 data.batch_size=8" + kRun,
       3,
       {"command line 'data.path=nowhere/x.npy': data.path 'nowhere/x.npy' does not exist: looked for /",
        "/nowhere/x.npy (relative to the working directory, /"}},
  };
}

// CSV (exit 3): the file missing, a directory (also to the tools), empty or only a header.
std::vector<BadInput> csv_file_rows() {
  return {
      {"CsvMissingFile", nothing, kCsv, 3, {"command line 'data.path={dir}/table.csv': data.path {dir}/table.csv does not exist"}},
      {"CsvPathIsADirectory", [](const fs::path& d) { fs::create_directories(d / "table.csv"); }, kCsv, 3,
       {"{dir}/table.csv: is a directory, not a CSV file"}},
      // The tools that measure trials of the configured run end with that run's error, code and hint (as train does).
      {"DoctorDataPathIsADirectory", [](const fs::path& d) { fs::create_directories(d / "table.csv"); }, kToolCsv("doctor --budget 4s"), 3,
       {"{dir}/table.csv: is a directory, not a CSV file", "give the path of the CSV/TSV file"}},
      {"PlanDataPathIsADirectory", [](const fs::path& d) { fs::create_directories(d / "table.csv"); },
       kToolCsv("plan --budget 4s --out '{dir}/tuned.json'"), 3, {"{dir}/table.csv: is a directory, not a CSV file"}, false,
       {"{dir}/tuned.json"}},
      {"MatrixDataPathIsADirectory", [](const fs::path& d) { fs::create_directories(d / "table.csv"); },
       kToolCsv("bench --matrix --rounds 1 --trial-seconds 0.5s --out '{dir}/matrix'"), 3,
       {"{dir}/table.csv: is a directory, not a CSV file"}, false, {"{dir}/matrix/matrix.json"}},
      {"CsvEmptyFile",
       [](const fs::path& d) { write_text(d / "table.csv", ""); },
       kCsv,
       3,
       {"{dir}/table.csv: the file is empty"}},
      {"CsvHeaderOnly",
       [](const fs::path& d) { write_text(d / "table.csv", "a,b,y\n"); },
       kCsv,
       3,
       {"{dir}/table.csv: no data rows after the header"}},
  };
}

// CSV (exit 3): the line and the column of a ragged row, a missing column or a bad value; no permission.
std::vector<BadInput> csv_field_rows() {
  return {
      {"CsvRaggedRowShort",
       [](const fs::path& d) { write_text(d / "table.csv", csv_with_line(6, "0.4,0.8")); },
       kCsv,
       3,
       {"{dir}/table.csv line 6: 2 fields, the header has 3"}},
      {"CsvRaggedRowLong",
       [](const fs::path& d) { write_text(d / "table.csv", csv_with_line(7, "0.4,0.8,0.1,0.9")); },
       kCsv,
       3,
       {"{dir}/table.csv line 7: 4 fields, the header has 3"}},
      {"CsvMissingTargetColumn",
       [](const fs::path& d) { write_text(d / "table.csv", csv_table(20)); },
       kCsv + " data.csv.targets=[z]",
       3,
       {"{dir}/table.csv line 1: no column 'z' (named in targets)", "the header has 'a', 'b', 'y'"}},
      {"CsvMissingFeatureColumn",
       [](const fs::path& d) { write_text(d / "table.csv", csv_table(20)); },
       kCsv + " data.csv.features=[a,c]",
       3,
       {"{dir}/table.csv line 1: no column 'c' (named in features)"}},
      {"CsvNonNumericValue",
       [](const fs::path& d) { write_text(d / "table.csv", csv_with_line(8, "0.4,oops,0.1")); },
       kCsv,
       3,
       {"{dir}/table.csv line 8, column 'b': 'oops' is not a number", "list it in data.csv.missing_tokens"}},
      {"CsvNaNValue",
       [](const fs::path& d) { write_text(d / "table.csv", csv_with_line(5, "0.3,nan,1")); },
       kCsv,
       3,
       {"{dir}/table.csv line 5, column 'b': missing value 'nan'"}},
      {"CsvEmptyField",
       [](const fs::path& d) { write_text(d / "table.csv", csv_with_line(5, "0.3,,1")); },
       kCsv,
       3,
       {"{dir}/table.csv line 5, column 'b': missing value (empty field)"}},
      {"CsvUnreadable",
       [](const fs::path& d) {
         write_text(d / "table.csv", csv_table(20));
         ::chmod((d / "table.csv").c_str(), 0);
       },
       kCsv,
       3,
       {"{dir}/table.csv: cannot open: Permission denied", "check the file's permissions"},
       true},
  };
}

// NPY (exit 3): the file missing, empty, truncated or not NPY.
std::vector<BadInput> npy_file_rows() {
  return {
      {"NpyMissingFile", nothing, kNpy, 3, {"data.path {dir}/x.npy does not exist"}},
      {"NpyMissingTargetsFile", [](const fs::path& d) { data::write_npy(d / "x.npy", features()); }, kNpy, 3,
       {"command line 'data.npy.y={dir}/y.npy': data.npy.y {dir}/y.npy does not exist", "give data.npy.y the targets' .npy file"}},
      {"NpyEmptyFile",
       [](const fs::path& d) {
         write_xy(d);
         write_text(d / "x.npy", "");
       },
       kNpy,
       3,
       {"{dir}/x.npy: truncated NPY preamble: 0 bytes"}},
      {"NpyTruncated",
       [](const fs::path& d) {
         write_xy(d);
         fs::resize_file(d / "x.npy", fs::file_size(d / "x.npy") / 2);
       },
       kNpy,
       3,
       {"{dir}/x.npy: header says 64×4 float32 = 1024 bytes of data", "the file is truncated"}},
      {"NpyWrongMagic",
       [](const fs::path& d) {
         write_xy(d);
         replace_once(d / "x.npy", "NUMPY", "NUMPZ");
       },
       kNpy,
       3,
       {"{dir}/x.npy: not an NPY file: bad magic at byte 0"}},
  };
}

// NPY (exit 3): the dtypes bellows does not read.
std::vector<BadInput> npy_dtype_rows() {
  return {
      {"NpyComplexDtype",
       [](const fs::path& d) {
         write_xy(d);
         write_bytes(d / "x.npy", npy_bytes("'<c8'", "(64, 4)", 64 * 4 * 8));
       },
       kNpy,
       3,
       {"{dir}/x.npy: dtype '<c8' is not supported"}},
      {"NpyObjectDtype",
       [](const fs::path& d) {
         write_xy(d);
         write_bytes(d / "x.npy", npy_bytes("'|O'", "(64, 4)", 64 * 4 * 8));
       },
       kNpy,
       3,
       {"{dir}/x.npy: dtype '|O' is not supported: object arrays"}},
      {"NpyStructuredDtype",
       [](const fs::path& d) {
         write_xy(d);
         write_bytes(d / "x.npy", npy_bytes("[('a', '<f4'), ('b', '<f4')]", "(64,)", 64 * 8));
       },
       kNpy,
       3,
       {"{dir}/x.npy: structured dtype (record array)", "is not supported"}},
      {"NpyBigEndian",
       [](const fs::path& d) {
         write_xy(d);
         write_bytes(d / "x.npy", npy_bytes("'>f4'", "(64, 4)", 64 * 4 * 4));
       },
       kNpy,
       3,
       {"{dir}/x.npy: dtype '>f4' is not supported: big-endian data"}},
  };
}

// NPY (exit 3): values that are not finite, x and y of other lengths; no permission.
std::vector<BadInput> npy_value_rows() {
  return {
      // A NaN in the features: the step's gradients are not finite, and with train.on_nonfinite=auto the run stops
      // at the next record naming the step and the first parameter (the data are not scanned for NaN).
      {"NpyNaNInFeatures",
       [](const fs::path& d) {
         at::Tensor x = features();
         x[6][3] = NAN;
         data::write_npy(d / "x.npy", x);
         data::write_npy(d / "y.npy", features().sum(1, true));
       },
       kNpy,
       3,
       {"non-finite gradients: the first at optimizer step 1, in the gradient of layers.0.weight (NaN)",
        "check the data", "optimizer step 2, complete before the error, was saved first"}},
      {"NpyRowCountMismatch",
       [](const fs::path& d) {
         write_xy(d);
         data::write_npy(d / "y.npy", features().sum(1, true).slice(0, 0, 60));
       },
       kNpy,
       3,
       {"{dir}/y.npy", "tensor 'y' has 60 samples, but 'x' has 64"}},
      {"NpyUnreadable",
       [](const fs::path& d) {
         write_xy(d);
         ::chmod((d / "x.npy").c_str(), 0);
       },
       kNpy,
       3,
       {"cannot open {dir}/x.npy: Permission denied"},
       true},
  };
}

// NPZ (exit 3).
std::vector<BadInput> npz_rows() {
  return {
      {"NpzTruncated",
       [](const fs::path& d) {
         data::write_npz(d / "data.npz", {{"x", features()}, {"y", features().sum(1, true)}});
         fs::resize_file(d / "data.npz", fs::file_size(d / "data.npz") / 2);
       },
       kNpz,
       3,
       {"{dir}/data.npz: not a zip archive"}},
      {"NpzNotAZip",
       [](const fs::path& d) { write_text(d / "data.npz", "PK this is not a zip archive at all"); },
       kNpz,
       3,
       {"{dir}/data.npz"}},
      {"NpzMissingArray",
       [](const fs::path& d) {
         data::write_npz(d / "data.npz", {{"x", features()}, {"y", features().sum(1, true)}});
       },
       kNpz + " data.npy.x=feat",
       3,
       {"{dir}/data.npz: no array 'feat' (entry 'feat.npy'); the archive holds: x, y"}},
      {"NpzUnsupportedDtype",
       [](const fs::path& d) {
         // float64 relabelled complex64: the same 8 bytes per item, so only the dtype is wrong.
         data::write_npz(d / "data.npz", {{"x", features().to(at::kDouble)}, {"y", features().sum(1, true)}});
         replace_once(d / "data.npz", "'<f8'", "'<c8'");
       },
       kNpz,
       3,
       {"{dir}/data.npz entry 'x.npy': dtype '<c8' is not supported"}},
      {"NpzRowCountMismatch",
       [](const fs::path& d) {
         data::write_npz(d / "data.npz", {{"x", features()}, {"y", features().sum(1, true).slice(0, 0, 60)}});
       },
       kNpz,
       3,
       {"{dir}/data.npz:y", "tensor 'y' has 60 samples, but 'x' has 64"}},
  };
}

// NetCDF (exit 3).
std::vector<BadInput> netcdf_rows() {
  return {
      {"NetcdfMissingFile", nothing, kNetcdf, 3, {"data.path {dir}/weather.nc does not exist"}},
      {"NetcdfPathIsADirectory", [](const fs::path& d) { fs::create_directories(d / "weather.nc"); }, kNetcdf, 3,
       {"{dir}/weather.nc is a directory, not a NetCDF file", "give data.path the NetCDF file"}},
      {"NetcdfTruncated",
       [](const fs::path& d) {
         write_netcdf(d / "weather.nc");
         fs::resize_file(d / "weather.nc", fs::file_size(d / "weather.nc") / 2);
       },
       kNetcdf,
       3,
       {"{dir}/weather.nc: cannot open as NetCDF", "truncated"}},
      {"NetcdfMissingVariable",
       [](const fs::path& d) { write_netcdf(d / "weather.nc"); },
       kNetcdf + " data.netcdf.variables=[u10]",
       3,
       {"{dir}/weather.nc: no variable 'u10'; the file's variables: t2m", "data.netcdf.variables"}},
      {"NetcdfMissingTarget",
       [](const fs::path& d) { write_netcdf(d / "weather.nc"); },
       kNetcdf + " data.netcdf.targets=[u10]",
       3,
       {"{dir}/weather.nc: no variable 'u10'", "data.netcdf.targets"}},
      {"NetcdfMissingDimension",
       [](const fs::path& d) { write_netcdf(d / "weather.nc"); },
       kNetcdf + " data.netcdf.time_dim=t",
       3,
       {"{dir}/weather.nc: no dimension 't'; the file's dimensions: time, lat, lon", "data.netcdf.time_dim"}},
      {"NetcdfUnreadable",
       [](const fs::path& d) {
         write_netcdf(d / "weather.nc");
         ::chmod((d / "weather.nc").c_str(), 0);
       },
       kNetcdf,
       3,
       {"{dir}/weather.nc: cannot open: Permission denied", "check the file's permissions"},
       true},
  };
}

// Image folders (exit 3): the image, relative to data.path (the loader adds the full path of a batch's first
// image, but these fail earlier: in the batches app::make_loaders fetches to measure the fetch cost).
std::vector<BadInput> image_folder_rows() {
  return {
      {"ImageTruncatedPng",
       [](const fs::path& d) { write_image_folder(d / "img", "bad.png", half(test_image(false))); },
       kImages,
       3,
       {"b/bad.png: truncated PNG"}},
      {"ImageTruncatedJpeg",
       [](const fs::path& d) { write_image_folder(d / "img", "bad.jpg", half(test_image(true))); },
       kImages,
       3,
       {"b/bad.jpg: truncated JPEG"}},
      {"ImageNotAnImage",
       [](const fs::path& d) {
         write_image_folder(d / "img", "bad.png", {'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0, 0, 0});
       },
       kImages,
       3,
       {"b/bad.png: not a PNG or JPEG file"}},
      {"ImageUnreadable",
       [](const fs::path& d) {
         write_image_folder(d / "img", "locked.png", test_image(false));
         ::chmod((d / "img" / "b" / "locked.png").c_str(), 0);
       },
       kImages,
       3,
       {"b/locked.png: cannot open: Permission denied"},
       true},
  };
}

// Text pairs (exit 3).
std::vector<BadInput> text_pair_rows() {
  return {
      {"TextPairsPathIsADirectory", [](const fs::path& d) { fs::create_directories(d / "pairs.tsv"); }, kText, 3,
       {"{dir}/pairs.tsv is a directory, not a text pairs file"}},
      {"TextPairsRaggedRow",
       [](const fs::path& d) {
         write_text(d / "pairs.tsv",
                    "premise\thypothesis\tlabel\na cat sat\ta cat\tyes\na dog ran\tno dog\tno\nthe sun\tit is dark\n");
       },
       kText,
       3,
       {"{dir}/pairs.tsv line 4: 2 tab-separated fields, the header has 3"}},
      {"TextPairsMissingColumn",
       [](const fs::path& d) { write_text(d / "pairs.tsv", "premise\thyp\tlabel\na cat sat\ta cat\tyes\n"); },
       kText,
       3,
       {"{dir}/pairs.tsv line 1: no column 'hypothesis' (data.text.hypothesis)"}},
  };
}

}  // namespace

std::vector<BadInput> data_rows() {
  return joined({data_path_rows(), csv_file_rows(), csv_field_rows(), npy_file_rows(), npy_dtype_rows(),
                 npy_value_rows(), npz_rows(), netcdf_rows(), image_folder_rows(), text_pair_rows()});
}

}  // namespace bellows::testing::bad_input
