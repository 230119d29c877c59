// `bellows ckpt inspect PATH [--json]` and `bellows ckpt export PATH --to FILE [--ema]` (see ckpt/inspect.h), for
// either layout.
// inspect exits 3 when the checkpoint does not verify, after describing what it could read.
#include <iostream>

#include "bellows/ckpt/inspect.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {

Action register_ckpt(CLI::App& app) {
  CLI::App* ckpt = app.add_subcommand("ckpt", "Inspect and export checkpoints");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* inspect = ckpt->add_subcommand(
      "inspect",
      "Files and checksums, versions, counters, config and every tensor (name, dtype, shape, content digest; "
      "sharded: its shard and rank) of a checkpoint (or the newest valid one in a directory)");
  inspect->add_option("PATH", *path, "step-XXXXXXXXX directory, checkpoints/ or the run directory")->required();
  inspect->add_flag("--json", *json, "One JSON document");
  auto export_path = std::make_shared<std::string>();
  auto to = std::make_shared<std::string>();
  auto ema = std::make_shared<bool>(false);
  CLI::App* exp = ckpt->add_subcommand(
      "export", "Write a checkpoint's weights (whole or sharded) as one safetensors file, one tensor at a time");
  exp->add_option("PATH", *export_path, "step-XXXXXXXXX directory, checkpoints/ or the run directory")->required();
  exp->add_option("--to", *to, "Destination .safetensors file")->required();
  exp->add_flag("--ema", *ema, "Export the EMA weights instead of the raw ones");
  ckpt->require_subcommand(1);
  return [=]() {
    if (inspect->parsed()) {
      const auto checkpoint = ckpt::resolve_checkpoint(*path);
      const nlohmann::json j = ckpt::inspect_checkpoint(checkpoint);
      std::cout << (*json ? j.dump(2) + "\n" : ckpt::format_inspection(j));
      if (!j["valid"].get<bool>()) {
        std::cerr << "bellows: input data error: checkpoint " << checkpoint.string() << " is not usable: "
                  << j["problem"].get<std::string>() << "\n";
        return kExitData;
      }
      return kExitOk;
    }
    if (exp->parsed()) {
      const auto checkpoint = ckpt::resolve_checkpoint(*export_path);
      const std::size_t n = ckpt::export_weights(checkpoint, *to, *ema);
      std::cout << "wrote " << n << " tensors (" << (*ema ? "EMA" : "raw") << " weights of " << checkpoint.string() << ") to " << *to << "\n";
      return kExitOk;
    }
    return -1;
  };
}

}  // namespace bellows::cli
