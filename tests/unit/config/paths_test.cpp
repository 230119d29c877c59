// The one rule for paths in a config (config/paths.h): validation makes every file_path() key absolute against the
// directory of the file that set it (an included file's own), and the command line's, the defaults' and a text
// without a file's against the working directory; a value that names no file (resume's auto) and the part after
// a file (an .npz's array) stay as written; a missing file is named as written, where it was looked for and by which
// rule.
#include "bellows/config/paths.h"

#include <gtest/gtest.h>

#include <fstream>

#include "bellows/config/schema.h"
#include "config_test_util.h"

namespace bellows::config {
namespace {

namespace fs = std::filesystem;
using bellows::test_support::TempDir;
using test_support::error_from;

// Keys shaped like the run's: files to read and to write, a word that is no path, a file with an array after it.
Schema path_schema() {
  Schema s;
  s.add("name", Type::kString, "not a path").default_value(YAML::Node("run"));
  s.add("data.path", Type::kString, "data file").default_value(YAML::Node("")).file_path();
  s.add("output_dir", Type::kString, "outputs").default_value(YAML::Node("runs")).file_path();
  s.add("resume", Type::kString, "auto or a checkpoint")
      .default_value(YAML::Node(""))
      .file_path([](const Config&, const std::string& v) { return v == "auto" ? std::size_t{0} : v.size(); });
  s.add("data.y", Type::kString, "file.npz:array")
      .default_value(YAML::Node(""))
      .file_path([](const Config&, const std::string& v) {
        const std::size_t npz = v.rfind(".npz:");
        return npz == std::string::npos ? v.size() : npz + 4;
      });
  s.alias("--data", "data.path");
  return s;
}

fs::path write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
  return file;
}

Config validated(Config c) {
  path_schema().validate(c);
  return c;
}

TEST(ConfigPaths, AFileValueIsRelativeToThatFilesDirectory) {
  TempDir dir("paths");
  const fs::path yaml =
      write(dir.path() / "exp" / "run.yaml", "name: data/x\ndata:\n  path: data/x.npy\noutput_dir: ../out\n");
  const Config c = validated(Config::load(yaml));
  EXPECT_EQ(get_string(c, "data.path"), (dir.path() / "exp" / "data" / "x.npy").string());
  EXPECT_EQ(get_string(c, "output_dir"), (dir.path() / "out").string());  // an output follows the same rule
  EXPECT_EQ(get_string(c, "name"), "data/x");                             // not a path key
  EXPECT_EQ(c.origin("data.path").written_path, "data/x.npy");
  EXPECT_EQ(c.origin("data.path").str(), yaml.string() + ":3:3");
}

TEST(ConfigPaths, AnIncludedFilesValueIsRelativeToTheIncludedFile) {
  TempDir dir("paths");
  write(dir.path() / "base" / "common.yaml", "data:\n  path: x.npy\n");
  const fs::path yaml = write(dir.path() / "exp" / "run.yaml", "experiment: ../base/common.yaml\nname: e\n");
  EXPECT_EQ(get_string(validated(Config::load(yaml)), "data.path"), (dir.path() / "base" / "x.npy").string());
}

TEST(ConfigPaths, TheCommandLineTheDefaultsAndTheEmbeddedDemoAreRelativeToTheWorkingDirectory) {
  TempDir dir("paths");
  const fs::path cwd = fs::current_path();
  Config c = Config::load(write(dir.path() / "exp" / "run.yaml", "data:\n  path: data/x.npy\n"));
  c.apply_override("data.path=other/y.npy");
  c = validated(c);
  EXPECT_EQ(get_string(c, "data.path"), (cwd / "other" / "y.npy").string());
  EXPECT_EQ(c.origin("data.path").written_path, "other/y.npy");
  EXPECT_EQ(get_string(c, "output_dir"), (cwd / "runs").string());  // the default

  Config flag = Config::load(dir.path() / "exp" / "run.yaml");
  flag.apply_arguments({"--data", "z.npy"}, path_schema().aliases());
  EXPECT_EQ(get_string(validated(flag), "data.path"), (cwd / "z.npy").string());

  // YAML text without a file of its own: the embedded demo, the C API's config text.
  for (const char* name : {"<embedded demo>", "<config text>"}) {
    EXPECT_EQ(get_string(validated(Config::parse("data: {path: a.npy}\n", name)), "data.path"),
              (cwd / "a.npy").string())
        << name;
  }
}

TEST(ConfigPaths, AbsolutePathsWordsAndArrayNamesStayAsWritten) {
  TempDir dir("paths");
  const fs::path yaml =
      write(dir.path() / "exp" / "run.yaml",
            "data:\n  path: /abs/x.npy\n  y: t/targets.npz:y\nresume: auto\noutput_dir: " + dir.path().string() + "\n");
  const Config c = validated(Config::load(yaml));
  EXPECT_EQ(get_string(c, "data.path"), "/abs/x.npy");
  EXPECT_EQ(c.origin("data.path").written_path, "");  // nothing rewritten
  EXPECT_EQ(get_string(c, "data.y"), (dir.path() / "exp" / "t" / "targets.npz").string() + ":y");
  EXPECT_EQ(get_string(c, "resume"), "auto");
  EXPECT_EQ(get_string(c, "output_dir"), dir.path().string());

  Config checkpoint = Config::load(yaml);
  checkpoint.apply_override("resume=runs/e/checkpoints");
  EXPECT_EQ(get_string(validated(checkpoint), "resume"), (fs::current_path() / "runs" / "e" / "checkpoints").string());
}

// Validation runs more than once on some paths (a pipeline's stage, a checkpoint's config): an absolute value stays.
TEST(ConfigPaths, ValidatingAgainChangesNothing) {
  TempDir dir("paths");
  const Config once =
      validated(Config::load(write(dir.path() / "exp" / "run.yaml", "data:\n  path: ./data/../x.npy\n")));
  const Config twice = validated(once);
  EXPECT_EQ(get_string(twice, "data.path"), (dir.path() / "exp" / "x.npy").string());
  EXPECT_EQ(twice.to_yaml(), once.to_yaml());
  EXPECT_EQ(twice.origin("data.path").written_path, "./data/../x.npy");
}

TEST(ConfigPaths, AMissingFileIsNamedAsWrittenWithWhereItWasLookedForAndTheRule) {
  TempDir dir("paths");
  const fs::path yaml = write(dir.path() / "exp" / "run.yaml", "data:\n  path: data/x.npy\n");
  const fs::path exp = dir.path() / "exp";
  const Config c = validated(Config::load(yaml));
  Error e = error_from(
      [&] { check_path_exists(c, "data.path", get_string(c, "data.path"), ErrorKind::kData, "give the data file"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), yaml.string() + ":2:3: data.path 'data/x.npy' does not exist: looked for " +
                             (exp / "data" / "x.npy").string() + " (relative to the directory of " + yaml.string() +
                             ", " + exp.string() + ")");
  EXPECT_EQ(
      e.hint(),
      "give the data file; a relative path in a config file starts at that file's directory, on the command line at "
      "the working directory");

  Config cli = Config::load(yaml);
  cli.apply_override("data.path=x.npy");
  cli = validated(cli);
  e = error_from([&] {
    check_path_exists(cli, "data.path", get_string(cli, "data.path"), ErrorKind::kConfig, "give the data file");
  });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "command line 'data.path=x.npy': data.path 'x.npy' does not exist: looked for " +
                             (fs::current_path() / "x.npy").string() + " (relative to the working directory, " +
                             fs::current_path().string() + ")");

  Config absolute = Config::load(yaml);
  absolute.apply_override("data.path=/nowhere/x.npy");
  absolute = validated(absolute);
  e = error_from(
      [&] { check_path_exists(absolute, "data.path", "/nowhere/x.npy", ErrorKind::kData, "give the data file"); });
  EXPECT_EQ(e.message(), "command line 'data.path=/nowhere/x.npy': data.path /nowhere/x.npy does not exist");

  write(exp / "data" / "x.npy", "");  // there now: no error
  check_path_exists(c, "data.path", get_string(c, "data.path"), ErrorKind::kData, "give the data file");
}

}  // namespace
}  // namespace bellows::config
