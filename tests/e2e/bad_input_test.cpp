// The bad-input catalogue: one row per way a user's input can be wrong (each kind of configuration error, each
// data format's corruptions, data/model shape mismatches, missing files, permission denied, checkpoints of
// another model or another format version, sharded checkpoints missing a shard or mixing two steps' shards). Every row
// runs the real `bellows` and checks the exit code, the fragments of stderr that name the offending file, key, line or
// value, and that nothing half-written is left: no ".tmp"/".old-" entry anywhere in the scratch directory and no
// checkpoint in the output directory. Rows that say "found by this catalogue" are regression tests of the defects it
// found.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "bad_input.h"

namespace bellows::testing::bad_input {

namespace {

// A row on the demo's sharded checkpoint (train_sharded_demo_checkpoint) broken by `breakage`, with an input for
// predict beside it: exit 3, "checkpoint <step 4> is not usable: <problem>", and no `absent` file written.
BadInput sharded_row(const std::string& name, void (*breakage)(const fs::path&), const std::string& args,
                     const std::string& problem, const std::string& absent = "") {
  return {name,
          [breakage](const fs::path& d) {
            breakage(train_sharded_demo_checkpoint(d));
            data::write_npy(d / "x.npy", at::ones({10, 64}));  // the demo's 64 features
          },
          args,
          3,
          {"checkpoint " + kCheckpoint + " is not usable: " + problem},
          false,
          absent.empty() ? std::vector<std::string>{} : std::vector<std::string>{absent}};
}

// The data against the model: features, targets and class labels the model does not take; predict's input.
std::vector<BadInput> data_against_model_rows() {
  return {
      {"ModelInFeaturesDiffersFromData",
       [](const fs::path& d) { write_text(d / "table.csv", csv_table(20)); },
       kCsv + " model.in_features=3",
       2,
       {"model.in_features is 3 (command line 'model.in_features=3')", "samples have 2 features", "{dir}/table.csv"}},
      // Found by this catalogue: targets 4 wide for model.out_features=1 failed in the regression task's view_as as
      // "internal error: LibTorch: shape '[8, 1]' is invalid for input of size 32" (exit 1); app::check_data_against_model
      // now checks the targets' width before training.
      {"ModelOutFeaturesDiffersFromTargets",
       [](const fs::path& d) {
         data::write_npy(d / "x.npy", features());
         data::write_npy(d / "y.npy", features());
       },
       kNpy,
       2,
       {"model.out_features", "{dir}/y.npy"}},
      // Found by this catalogue: class labels 0..4 for a classifier of model.out_features=3 failed in the loss as
      // "internal error: LibTorch: Target 3 is out of bounds." (exit 1); the labels are now checked before training.
      {"ClassLabelsBeyondOutFeatures",
       [](const fs::path& d) { write_text(d / "table.csv", class_table(20, 5)); },
       kCsv + " data.csv.integer=[y] model.task=classification model.out_features=3",
       2,
       {"model.out_features is 3", "labels up to 4", "{dir}/table.csv"}},
      // Issue 44: integer class labels under model.task regression named only model.out_features.
      {"ClassLabelsUnderRegression",
       [](const fs::path& d) { write_text(d / "table.csv", class_table(20, 3)); },
       kCsv + " data.csv.integer=[y] model.out_features=3",
       2,
       {"model.out_features is 3", "the targets are integers: for class labels set model.task: classification (model.task is regression, "
                                   "schema default)"}},
      {"PredictInputOfAnotherWidth",
       [](const fs::path& d) {
         write_xy(d);
         const CliResult r =
             run_cli("train data.source=npy data.path='" + (d / "x.npy").string() + "' data.npy.y='" +
                     (d / "y.npy").string() + "' model.in_features=4 model.hidden=[8] data.batch_size=16 threads=1 " +
                     "train.max_steps=2 --output-dir '" + (d / "src").string() + "'");
         EXPECT_EQ(r.code, 0) << r.err;
         data::write_npy(d / "wide.npy", at::ones({10, 5}));
       },
       "predict '{dir}/src/demo' --threads 1 --input '{dir}/wide.npy' --output '{dir}/out.npy'",
       3,
       {"--input {dir}/wide.npy has shape [10, 5], the model expects [rows, 4] (model.in_features"},
       false,
       {"{dir}/out.npy"}},
  };
}

// Resuming from a checkpoint of another model or format version, missing or corrupt (exit 3).
std::vector<BadInput> resume_checkpoint_rows() {
  return {
      // Found by this catalogue: "the checkpoint does not fit the model" did not name the checkpoint (which
      // --resume auto chooses); the error now starts "resuming from <checkpoint>".
      {"ResumeFromAnotherModel",
       [](const fs::path& d) { train_demo_checkpoint(d); },
       "train --output-dir '{dir}/runs' train.max_steps=6 model.hidden=[16]" + std::string(kDemoData) + " --resume '" +
           kCheckpoint + "'",
       3,
       {"the checkpoint does not fit the model (3 differences)",
        "layers.0.weight: shape [8, 64] in the checkpoint, [16, 64] in the model", "step-000000004"}},
      {"ResumeFromAnotherFormatVersion",
       [](const fs::path& d) {
         edit_manifest(train_demo_checkpoint(d), [](nlohmann::json& m) {
           m["format_version"] = 999;
           m["bellows_version"] = "99.0.0";
         });
       },
       kResume + "'" + kCheckpoint + "'",
       3,
       {"checkpoint " + kCheckpoint +
        " is not usable: format version 999: written by a newer bellows (this bellows, "}},
      {"ResumeFromAMissingCheckpoint", nothing, kResume + "'{dir}/nowhere'", 3, {"{dir}/nowhere does not exist"}},
      {"ResumeFromACorruptCheckpoint",
       [](const fs::path& d) {
         replace_once(train_demo_checkpoint(d) / "model.safetensors", "layers.0.weight", "layers.0.weighT");
       },
       kResume + "'" + kCheckpoint + "'",
       3,
       {"checkpoint " + kCheckpoint + " is not usable: model.safetensors: checksum mismatch"}},
      // The manifest agrees with the bytes (checksums recomputed), the safetensors header does not make sense.
      {"ResumeFromACorruptSafetensorsHeader",
       [](const fs::path& d) {
         const fs::path c = train_demo_checkpoint(d);
         std::string bytes = read_bytes(c / "model.safetensors");
         for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = i == 5 ? '\x01' : '\0';  // a length of 2^40
         std::ofstream(c / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
         edit_manifest(c,
                       [&](nlohmann::json& m) { m["files"]["model.safetensors"]["sha256"] = ckpt::sha256_hex(bytes); });
       },
       kResume + "'" + kCheckpoint + "'",
       3,
       {kCheckpoint + "/model.safetensors: the header length at byte 0 says"}},
  };
}

// ckpt inspect of a truncated checkpoint, another format version, a malformed manifest (exit 3).
std::vector<BadInput> ckpt_inspect_rows() {
  return {
      {"CkptInspectTruncated",
       [](const fs::path& d) {
         const fs::path c = train_demo_checkpoint(d);
         fs::resize_file(c / "state.bin", fs::file_size(c / "state.bin") - 1);
       },
       "ckpt inspect '" + kCheckpoint + "'",
       3,
       {"checkpoint " + kCheckpoint + " is not usable: state.bin has", "(truncated?)"}},
      {"CkptInspectAnotherFormatVersion",
       [](const fs::path& d) {
         edit_manifest(train_demo_checkpoint(d), [](nlohmann::json& m) { m["format_version"] = 999; });
       },
       "ckpt inspect '" + kCheckpoint + "'",
       3,
       {"checkpoint " + kCheckpoint + " is not usable: format version 999"}},
      {"CkptInspectMalformedManifest",
       [](const fs::path& d) {
         write_text(train_demo_checkpoint(d) / "manifest.json", "{\"format\": \"bellows-checkpoint\", ");
       },
       "ckpt inspect '" + kCheckpoint + "'",
       3,
       {kCheckpoint + "/manifest.json: malformed manifest"}},
  };
}

// Sharded checkpoints (exit 3; issue 45): the checkpoint and the shard named, and why.
std::vector<BadInput> sharded_checkpoint_rows() {
  return {
      sharded_row("ResumeFromAShardedCheckpointMissingAShard", remove_shard, kResume + "'" + kCheckpoint + "'",
                  kShard + " is missing"),
      sharded_row("ResumeFromAShardedCheckpointWithAWrongChecksum", corrupt_shard, kResume + "'" + kCheckpoint + "'",
                  kShard + ": checksum mismatch (SHA-256 differs from the manifest)"),
      sharded_row("ResumeFromShardsOfTwoSteps", shard_of_another_step, kResume + "'" + kCheckpoint + "'",
                  kShard + " belongs to step 2, the manifest to step 4 (shards of two checkpoints mixed)"),
      sharded_row("ResumeFromAShardedCheckpointOfANewerBellows", manifest_of_a_newer_bellows,
                  kResume + "'" + kCheckpoint + "'", "format version 3: written by a newer bellows (this bellows, "),
      sharded_row("CkptInspectShardsOfTwoSteps", shard_of_another_step, "ckpt inspect '" + kCheckpoint + "'",
                  kShard + " belongs to step 2"),
      sharded_row("CkptExportAShardedCheckpointMissingAShard", remove_shard,
                  "ckpt export '" + kCheckpoint + "' --to '{dir}/weights.safetensors'", kShard + " is missing",
                  "{dir}/weights.safetensors"),
      sharded_row("PredictFromAShardedCheckpointWithAWrongChecksum", corrupt_shard,
                  "predict '" + kCheckpoint + "' --threads 1 --input '{dir}/x.npy' --output '{dir}/out.npy'",
                  kShard + ": checksum mismatch", "{dir}/out.npy"),
  };
}

// Resources (exit 4).
std::vector<BadInput> resource_rows() {
  return {
      {"OutputDirUnwritable",
       [](const fs::path& d) {
         write_xy(d);
         fs::create_directories(d / "locked");
         ::chmod((d / "locked").c_str(), 0555);
       },
       "train data.source=npy data.path='{dir}/x.npy' data.npy.y='{dir}/y.npy' model.in_features=4 data.batch_size=8 "
       "threads=1 "
       "train.max_steps=2 --output-dir '{dir}/locked'",
       4,
       {"cannot create run directory {dir}/locked/demo: Permission denied"},
       true},
  };
}

}  // namespace

std::vector<BadInput> run_rows() {
  return joined({data_against_model_rows(), resume_checkpoint_rows(), ckpt_inspect_rows(), sharded_checkpoint_rows(),
                 resource_rows()});
}

// The row's name, not its bytes, in gtest's messages (beside BadInput, for argument-dependent lookup).
void PrintTo(const BadInput& row, std::ostream* os) {
  *os << row.name;
}

namespace {

const std::vector<BadInput>& rows() {
  static const std::vector<BadInput> table = joined({configuration_rows(), data_rows(), run_rows(), model_rows()});
  return table;
}

class Catalogue : public ::testing::TestWithParam<BadInput> {};

TEST_P(Catalogue, Row) {
  const BadInput& row = GetParam();
  std::string prefix;
  if (row.unprivileged) {
    if (!unprivileged_prefix()) {
      GTEST_SKIP() << "running as root, and neither setpriv without CAP_DAC_OVERRIDE nor the user nobody is denied a "
                      "read here: file permissions cannot be tested";
    }
    prefix = *unprivileged_prefix();
  }
  const fs::path dir = scratch_dir("bad_input_" + row.name);
  // Usable by nobody, where the unprivileged run is that user (what the row locks, it locks itself).
  ::chmod(dir.c_str(), row.unprivileged ? 0777 : 0755);
  row.setup(dir);
  if (HasFailure()) return;
  const CliResult r = run_cli(expand(row.args, dir), prefix);
  EXPECT_EQ(r.code, row.code) << r.err << r.out;
  for (const auto& fragment : row.fragments)
    EXPECT_NE(r.err.find(expand(fragment, dir)), std::string::npos) << expand(fragment, dir) << "\nin\n" << r.err;
  EXPECT_EQ(r.out.find("run finished"), std::string::npos) << r.out;
  // Nothing half-written anywhere, nothing trained into the output directory but the completed step that an error
  // between steps saves first (the error names it; issue 44: no finished work is lost).
  for (const auto& p : entries_named(dir, {".tmp", ".old-"})) ADD_FAILURE() << "left behind: " << p;
  for (const auto& p : checkpoints_under(dir / "runs")) {
    const bool named = r.err.find(fs::path(p).string() + " (resume=auto continues from it)") != std::string::npos &&
                       r.err.find("was saved first") != std::string::npos;
    if (!named) ADD_FAILURE() << "a checkpoint of a failed run: " << p;
  }
  for (const auto& p : checkpoints_under(dir / "locked")) ADD_FAILURE() << "a checkpoint of a failed run: " << p;
  for (const auto& a : row.absent) EXPECT_FALSE(fs::exists(expand(a, dir))) << expand(a, dir);
  // Leave the scratch directory removable by the next run's cleanup.
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    ::chmod(it->path().c_str(), it->is_directory() ? 0755 : 0644);
  }
}

INSTANTIATE_TEST_SUITE_P(BadInput, Catalogue, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

}  // namespace
}  // namespace bellows::testing::bad_input
