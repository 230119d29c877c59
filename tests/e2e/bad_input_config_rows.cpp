// The bad-input catalogue's configuration rows (bad_input.h): each a key, a value and where it was set, exit 2.
#include "bad_input.h"

namespace bellows::testing::bad_input {
namespace {

// Unknown keys and hardware profiles, other tools' names for a key.
std::vector<BadInput> config_key_rows() {
  return {
      {"ConfigUnknownKey",
       nothing,
       "train optim.lrr=0.1" + kRun,
       2,
       {"command line 'optim.lrr=0.1': unknown key 'optim.lrr'; did you mean 'optim.lr'?"}},
      {"ConfigUnknownHardwareProfile",
       nothing,
       "train --hardware-profile gpu-99gb" + kRun,
       2,
       {"command line: hardware_profile 'gpu-99gb' is not a shipped profile", "cpu, gpu-12gb, gpu-24gb, gpu-48gb, gpu-80gb, hopper"}},
      {"ConfigUnknownHardwareProfileInFile",
       [](const fs::path& d) { write_text(d / "run.yaml", "name: x\nhardware_profile: tpu-v5\n"); },
       "train '{dir}/run.yaml'" + kRun,
       2,
       {"{dir}/run.yaml:2:1: hardware_profile 'tpu-v5' is not a shipped profile"}},
      // Other tools' names for a key, wherever they appear (the table in src/app/schema.cpp).
      {"ConfigUnknownKeyByAnotherToolsName",
       nothing,
       "train optim.learning_rate=0.01 trainer.max_epochs=3 num_workers=2" + kRun,
       2,
       {"command line 'optim.learning_rate=0.01': unknown key 'optim.learning_rate'; did you mean 'optim.lr'?",
        "command line 'trainer.max_epochs=3': unknown key 'trainer.max_epochs'; did you mean 'train.epochs'?",
        "command line 'num_workers=2': unknown key 'num_workers'; did you mean 'data.workers'?"}},
  };
}

// Tuned plans (--plan) and the tools' usage.
std::vector<BadInput> config_plan_and_usage_rows() {
  return {
      {"ConfigTunedPlanMissing",
       nothing,
       "train --plan '{dir}/nothing.json'" + kRun,
       2,
       {"tuned plan {dir}/nothing.json: cannot open it", "bellows plan CONFIG --out FILE"}},
      {"ConfigTunedPlanIsARunsPlan",
       [](const fs::path& d) { write_text(d / "plan.json", "{\"device\": \"cpu\", \"precision\": \"fp32\"}\n"); },
       "train --plan '{dir}/plan.json'" + kRun,
       2,
       {"{dir}/plan.json is not a tuned plan", "a run directory's plan.json records a run's plan"}},
      {"ConfigTunedPlanUnknownKey",
       [](const fs::path& d) {
         write_text(d / "tuned.json", "{\"format\": \"bellows-tuned-plan\", \"version\": 1, \"overrides\": [\"optim.lrr=0.1\"]}\n");
       },
       "train --plan '{dir}/tuned.json'" + kRun,
       2,
       {"tuned plan {dir}/tuned.json 'optim.lrr=0.1': unknown key 'optim.lrr'"}},
      {"ConfigPlanAllowUnknown",
       nothing,
       "plan plan.allow=[precision,speed] --out '{dir}/p.json'",
       2,
       {"plan.allow: 'speed' is not a setting the tuner may change", "precision, batch_size"},
       false,
       {"{dir}/p.json"}},
      {"UsageBenchWithoutWhat", nothing, "bench threads=1", 2, {"bellows bench needs what to measure: data, or CONFIG --matrix"}},
      {"ConfigCompileUnknown", nothing, "train compile=jit" + kRun, 2, {"'compile' must be one of [auto, cuda_graph, off], got 'jit'"}},
      {"UsageSelftestUnknownDevice", nothing, "selftest --device tpu", 2, {"--device: tpu not in {cpu,cuda,auto}"}},
  };
}

// Keys and values: unknown, of the wrong type, out of range, not a choice, empty; an unknown flag.
std::vector<BadInput> config_value_rows() {
  return {
      {"ConfigUnknownKeyInFile",
       [](const fs::path& d) { write_text(d / "run.yaml", "name: x\ntrain:\n  epoch: 3\n"); },
       "train '{dir}/run.yaml'" + kRun,
       2,
       {"{dir}/run.yaml:3:3: unknown key 'train.epoch'; did you mean 'train.epochs'?"}},
      {"ConfigWrongTypeInFile",
       [](const fs::path& d) { write_text(d / "run.yaml", "name: x\ntrain:\n  epochs: many\n"); },
       "train '{dir}/run.yaml'" + kRun,
       2,
       {"{dir}/run.yaml:3:3: 'train.epochs' expects an integer, got 'many'"}},
      {"ConfigWrongTypeOnCommandLine",
       nothing,
       "train model.hidden=abc" + kRun,
       2,
       {"command line 'model.hidden=abc': 'model.hidden' expects a list of integers, got 'abc'"}},
      {"ConfigOutOfRange",
       nothing,
       "train data.batch_size=0" + kRun,
       2,
       {"'data.batch_size' is out of range: expected a value >= 1, got 0"}},
      {"ConfigNotOneOfTheChoices",
       nothing,
       "train optim.type=adamx" + kRun,
       2,
       {"'optim.type' must be one of [adamw, adam, sgd], got 'adamx'; did you mean 'adamw'?"}},
      // An empty value clears a key that can be empty (data.val_path=); one that cannot says what it takes.
      {"ConfigEmptyValueOfANumber",
       nothing,
       "train optim.lr=" + kRun,
       2,
       {"command line 'optim.lr=': 'optim.lr' cannot be empty: it takes a number >= 0 (default 0.001)",
        "an empty value (key=) clears only a key that can be empty"}},
      {"ConfigEmptyValueOfAStringWithADefault",
       nothing,
       "train device=" + kRun,
       2,
       {"command line 'device=': 'device' cannot be empty: it takes a string (default auto); an empty string is "
        "written 'device=\"\"'"}},
      {"ConfigUnknownFlag", nothing, "train --batch-sise 8" + kRun, 2, {"--batch-sise", "--batch-size"}},
  };
}

// Config files: malformed, missing, unreadable.
std::vector<BadInput> config_file_rows() {
  return {
      {"ConfigMalformedYaml",
       [](const fs::path& d) { write_text(d / "run.yaml", "name: x\ntrain:\n  epochs: 3\n   max_steps: 2\n"); },
       "train '{dir}/run.yaml'" + kRun,
       2,
       {"{dir}/run.yaml:4:13: illegal map value"}},
      {"ConfigMissingFile",
       nothing,
       "train '{dir}/nope.yaml'" + kRun,
       2,
       {"config file {dir}/nope.yaml does not exist"}},
      // Found by this catalogue: an unreadable config file was "{dir}/run.yaml:0:0: bad file: {dir}/run.yaml" (yaml-cpp's
      // BadFile) with the hint "fix the YAML syntax".
      {"ConfigUnreadableFile",
       [](const fs::path& d) {
         write_text(d / "run.yaml", "name: x\n");
         ::chmod((d / "run.yaml").c_str(), 0);
       },
       "train '{dir}/run.yaml'" + kRun,
       2,
       {"{dir}/run.yaml", "Permission denied"},
       true},
  };
}

}  // namespace

std::vector<BadInput> configuration_rows() {
  return joined({config_key_rows(), config_plan_and_usage_rows(), config_value_rows(), config_file_rows()});
}

}  // namespace bellows::testing::bad_input
