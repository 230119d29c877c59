// `bellows hw`: the hardware report (text or JSON), optionally with measured peaks.
#include <iostream>

#include "bellows/hw/hardware_info.h"
#include "bellows/hw/peaks.h"
#include "bellows/hw/report.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

struct HwOptions {
  bool json = false;
  bool measure = false;
  hw::MeasureOptions measure_options;
};

}  // namespace

Action register_hw(CLI::App& app) {
  auto opts = std::make_shared<HwOptions>();
  CLI::App* cmd = app.add_subcommand("hw", "Report the CPU, memory, LibTorch build and GPUs, with recommended settings");
  cmd->add_flag("--json", opts->json, "Print one JSON document (schema: docs/hw.schema.json)");
  cmd->add_flag("--measure", opts->measure, "Measure matmul throughput (fp32, bf16, ...) and memory bandwidth");
  cmd->add_option("--matmul-size", opts->measure_options.matmul_size, "Matrix size n for the n x n x n matmul measurement")
      ->check(CLI::Range(16, 16384));
  cmd->add_option("--seconds", opts->measure_options.min_seconds, "Timed seconds per measured figure")
      ->check(CLI::Range(0.01, 60.0));
  return [cmd, opts]() {
    if (!cmd->parsed()) return -1;
    const auto& info = hw::HardwareInfo::get();
    std::vector<hw::PeakMeasurement> peaks;
    if (opts->measure) {
      peaks = hw::measure_peaks(info, opts->measure_options);
      // The runs' MFU divides by the cached peaks (hw/peaks.h), measured one way every time: only the standard
      // measurement replaces them (a quick --matmul-size 64, or longer --seconds, would move every run's MFU).
      if (!hw::store_peaks(info, peaks, opts->measure_options) && !hw::is_standard(opts->measure_options)) {
        const hw::MeasureOptions standard;
        std::cerr << "bellows hw: not cached: the runs' MFU divides by the standard measurement (--seconds " << standard.min_seconds
                  << " --matmul-size " << standard.matmul_size << "), which `bellows hw --measure` without those flags refreshes\n";
      }
    }
    std::cout << (opts->json ? hw::format_json(info, peaks) : hw::format_text(info, peaks));
    return kExitOk;
  };
}

}  // namespace bellows::cli
