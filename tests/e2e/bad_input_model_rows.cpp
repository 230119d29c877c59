// The bad-input catalogue's rows for a user's TorchScript model (model.name: torchscript; bad_input.h): files that
// are not TorchScript, forward() against the configured inputs and the data, outputs and losses that are not
// what the config says, and models bellows cannot train. Exit 2, the file and what was expected.
#include <cstdlib>

#include "bad_input.h"
#include "test_paths.h"

namespace bellows::testing::bad_input {
namespace {

// The models of make_scripted_models.py, written once per test process by the tests' Python (BELLOWS_PYTHON,
// which ctest sets), then copied into each row's directory as {dir}/m/.
const fs::path& scripted_models() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("scripted_models");
    const char* python = std::getenv("BELLOWS_PYTHON");
    const std::string cmd = std::string("'") + (python ? python : "python3") + "' '" + BELLOWS_TEST_SOURCE_DIR +
                            "/e2e/make_scripted_models.py' '" + d.string() + "' >'" + (d / "log").string() + "' 2>&1";
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "could not write the TorchScript models: " << cmd << "\n" << read_bytes(d / "log");
    return d;
  }();
  return dir;
}

void with_models(const fs::path& dir) {
  fs::copy(scripted_models(), dir / "m", fs::copy_options::recursive);
  write_xy(dir);
  write_text(dir / "run.yaml", "name: scripted\nmodel:\n  name: torchscript\n  path: m/good.pt\n");
}

// run.yaml names the model (the embedded demo's model keys are the MLP's); the rows override model.path.
const std::string kScripted = "train '{dir}/run.yaml' data.source=npy data.path='{dir}/x.npy' data.npy.y='{dir}/y.npy' data.batch_size=8 "
                              + kRun;

// Files that are not a TorchScript model: a state_dict, weights alone, damaged, a directory, missing.
std::vector<BadInput> scripted_file_rows() {
  const std::string hint = "torch.jit.script(model).save(\"model.pt\")";
  return {
      {"ScriptedIsStateDict", with_models, kScripted + " model.path='{dir}/m/state_dict.pt'", 2,
       {"model.path {dir}/m/state_dict.pt is an archive written by torch.save (a pickled state_dict or module)", hint}},
      {"ScriptedIsSafetensors", with_models, kScripted + " model.path='{dir}/m/weights.safetensors'", 2,
       {"model.path {dir}/m/weights.safetensors is a safetensors file: weights without the model's code", hint}},
      {"ScriptedTruncated", with_models, kScripted + " model.path='{dir}/m/truncated.pt'", 2,
       {"model.path {dir}/m/truncated.pt is a damaged or truncated zip archive"}},
      {"ScriptedIsDirectory", with_models, kScripted + " model.path='{dir}/m'", 2,
       {"model.path {dir}/m is a directory, expected a TorchScript file"}},
      {"ScriptedMissingFile", with_models, kScripted + " model.path='{dir}/m/nothing.pt'", 2,
       {"model.path {dir}/m/nothing.pt does not exist"}},
      {"ScriptedRelativePathAgainstConfig",
       [](const fs::path& d) {
         with_models(d);
         write_text(d / "cfg" / "run.yaml", "model:\n  name: torchscript\n  path: ../m/nothing.pt\n");
       },
       "train '{dir}/cfg/run.yaml' data.source=npy data.path='{dir}/x.npy' data.npy.y='{dir}/y.npy' data.batch_size=8" + kRun, 2,
       {"{dir}/cfg/run.yaml:3:3: model.path '../m/nothing.pt' does not exist: looked for {dir}/m/nothing.pt (relative to the "
        "directory of {dir}/cfg/run.yaml, {dir}/cfg)"}},
  };
}

// forward() against model.inputs and the data, outputs and losses unlike the config's, models bellows cannot
// train as configured.
std::vector<BadInput> scripted_forward_rows() {
  return {
      {"ScriptedTooManyInputs", with_models, kScripted + " model.path='{dir}/m/good.pt' model.inputs=[x,y]", 2,
       {"model.path {dir}/m/good.pt: forward(x: Tensor) -> Tensor takes 1 input(s) by position, model.inputs passes more"}},
      {"ScriptedUnknownArgument", with_models, kScripted + " model.path='{dir}/m/good.pt' model.inputs=[x,mask=y]", 2,
       {"forward(x: Tensor) -> Tensor has no argument 'mask' (model.inputs names it)", "its arguments are: x"}},
      {"ScriptedInputNotInData", with_models, kScripted + " model.path='{dir}/m/good.pt' model.inputs=[x,feature]", 2,
       {"model.inputs (command line 'model.inputs=[x,feature]') names batch tensor 'feature', but the samples of", "have: x, y"}},
      {"ScriptedInputShape", with_models, kScripted + " model.path='{dir}/m/wide.pt'", 2,
       {"model.path {dir}/m/wide.pt: forward(x: Tensor) -> Tensor failed on the data's first sample (x: Float [1, 4])",
        "make model.inputs give forward() the batch tensors it expects"}},
      {"ScriptedInputDtype",
       [](const fs::path& d) {
         with_models(d);
         data::write_npy(d / "x.npy", features().to(at::kLong));
       },
       kScripted + " model.path='{dir}/m/good.pt'", 2, {"failed on the data's first sample (x: Long [1, 4])"}},
      {"ScriptedLossKeyMissing", with_models,
       kScripted + " model.path='{dir}/m/dict_loss.pt' model.loss=module model.inputs=[x,y] model.loss_key=total", 2,
       {"model.loss_key is 'total', but the model returned a dict with keys loss, mae: it has no entry 'total'"}},
      {"ScriptedOutputOfATensor", with_models, kScripted + " model.path='{dir}/m/good.pt' model.output=logits", 2,
       {"model.output is 'logits', but the model returned a Tensor: a single tensor has no elements"}},
      {"ScriptedLossNotScalar", with_models, kScripted + " model.path='{dir}/m/vector_loss.pt' model.loss=module model.inputs=[x,y]", 2,
       {"model.path {dir}/m/vector_loss.pt: the module's loss (its output) is Float [1, 1], expected a floating scalar"}},
      {"ScriptedNoTrainableParameters", with_models, kScripted + " model.path='{dir}/m/frozen.pt'", 2,
       {"model.path {dir}/m/frozen.pt: the module has no trainable parameters"}},
      {"ScriptedFloat64", with_models, kScripted + " model.path='{dir}/m/double.pt'", 2,
       {"model.path {dir}/m/double.pt: parameter net.0.weight is Double, expected float32", "model.float()"}},
      {"ScriptedPredictMethodMissing", with_models, kScripted + " model.path='{dir}/m/good.pt' model.predict_method=sample", 2,
       {"model.predict_method is 'sample', but {dir}/m/good.pt has no such method", "@torch.jit.export"}},
      {"ScriptedJitOptimizeUnderAutocast", with_models, kScripted + " model.path='{dir}/m/good.pt' model.jit_optimize=true precision=bf16-mixed", 2,
       {"model.jit_optimize is true under a mixed precision: TorchScript's optimised graphs run outside autocast"}},
      {"ScriptedActivationCheckpointing", with_models, kScripted + " model.path='{dir}/m/good.pt' checkpointing=all", 2,
       {"checkpointing: a TorchScript model (model.name: torchscript) runs as one scripted program that bellows cannot split"}},
  };
}

// Data the model does not fit: validation and predict inputs of another width, class labels under
// regression, initial weights of other names.
std::vector<BadInput> scripted_data_rows() {
  return {
      // Issue 44: a validation file of another width ended the run at its first evaluation, after the training steps,
      // as "internal error: The following operation failed in the TorchScript interpreter." (exit 1); every dataset
      // the run feeds the model now takes one evaluation step before the first training step.
      {"ScriptedValidationOfAnotherWidth",
       [](const fs::path& d) {
         with_models(d);
         data::write_npz(d / "data.npz", {{"x", features()}, {"y", features().sum(1, true)}});
         data::write_npz(d / "val.npz", {{"x", at::ones({16, 5})}, {"y", at::ones({16, 1})}});
       },
       "train '{dir}/run.yaml' data.source=npy data.path='{dir}/data.npz' data.val_path='{dir}/val.npz' data.batch_size=8" + kRun, 3,
       {"the validation data (data.val_path command line 'data.val_path={dir}/val.npz': {dir}/val.npz) does not fit the model",
        "an evaluation step on its first 2 sample(s) (x Float [2, 5], y Float [2, 1]) failed",
        "mat1 and mat2 shapes cannot be multiplied", "(model source: File \"", "make_scripted_models.py\", line"}},
      // Issue 44: the same file given to predict was the same one-line internal error.
      {"ScriptedPredictInputOfAnotherWidth",
       [](const fs::path& d) {
         with_models(d);
         const CliResult r = run_cli(expand("train '{dir}/run.yaml' data.source=npy data.path='{dir}/x.npy' data.npy.y='{dir}/y.npy' "
                                            "data.batch_size=8 threads=1 train.max_steps=2 --output-dir '{dir}/src'", d));
         EXPECT_EQ(r.code, 0) << r.err;
         data::write_npy(d / "wide.npy", at::ones({10, 5}));
       },
       "predict '{dir}/src/scripted' --threads 1 --input '{dir}/wide.npy' --output '{dir}/out.npy'", 3,
       {"--input {dir}/wide.npy does not fit the model: the prediction of rows 0..9 (x Float [10, 5]) failed",
        "mat1 and mat2 shapes cannot be multiplied", "give the inputs the model was trained on"},
       false, {"{dir}/out.npy"}},
      // Issue 44: class labels under the default model.task (regression) ended the first step as "internal error:
      // LibTorch: shape '[64, 4]' is invalid for input of size 64"; a configuration error naming model.task now.
      {"ScriptedClassLabelsUnderRegression",
       [](const fs::path& d) {
         with_models(d);
         data::write_npy(d / "y.npy", at::arange(64, at::kLong).remainder(3));
       },
       kScripted + " model.path='{dir}/m/classifier.pt'", 2,
       {"model.task is regression (schema default) but the targets y are Long class labels (1 per sample) and the model gives 3 "
        "outputs per sample ({dir}/m/classifier.pt [1, 3])",
        "set model.task: classification"}},
      {"ScriptedInitWeightsNames", with_models, kScripted + " model.path='{dir}/m/good.pt' init_weights='{dir}/m/other_names.safetensors'", 3,
       {"{dir}/m/other_names.safetensors", "net.0.weight"}},
  };
}

}  // namespace

std::vector<BadInput> model_rows() {
  return joined({scripted_file_rows(), scripted_forward_rows(), scripted_data_rows()});
}

}  // namespace bellows::testing::bad_input
