// The console's plain line (not a terminal) carries the numbers a person reads, and metrics.jsonl every field of
// the same record: a classification run's record as the recorder makes it (the memory breakdown by category,
// resident memory, FLOP/s, MFU, the phases), which on the console once made a line of about 450 characters.
#include "bellows/obs/console_sink.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "bellows/obs/jsonl_sink.h"

namespace bellows::obs {
namespace {

StepRecord classification_record() {
  StepRecord r{.step = 40, .epoch = 0, .batch_in_epoch = 40, .batches_per_epoch = 231, .samples_per_s = 228.6, .step_time_ms = 252.6, .lr = 1e-3};
  r.values = {{"loss", 1.4159},      {"accuracy", 0.2374},      {"pixels_per_s", 58521.6}, {"grad_norm", 0.2647},
              {"skipped_steps", 0},  {"mem_mb", 0.2216},        {"mem_peak_mb", 1.089},    {"mem_weights_mb", 0.0016},
              {"mem_grads_mb", 0},   {"mem_optim_mb", 0.0029},  {"mem_ema_mb", 0},         {"rss_mb", 450.0439},
              {"rss_peak_mb", 450.0439}, {"gflops", 7.902e-4}, {"mfu", 4.102e-6}};
  r.task_values = 2;  // loss, accuracy
  r.phase_ms = {{"data", 0.5}, {"copy", 0.1}, {"forward", 150}, {"backward", 80}, {"optimizer", 15}, {"other", 7}};
  r.phase_mem_mb = {{"forward", 1.0}, {"backward", 1.089}};
  return r;
}

// What the console prints for the record, in a run of 3 epochs, after its header.
std::string console_line(const StepRecord& r) {
  std::FILE* out = std::tmpfile();
  ConsoleSink sink(out, /*tty=*/0);
  RunStart start;
  start.epochs = 3;
  sink.on_run_start(start);
  const long header = std::ftell(out);
  sink.on_step(r);
  std::fseek(out, header, SEEK_SET);
  std::string text;
  for (int c; (c = std::fgetc(out)) != EOF;) text.push_back(static_cast<char>(c));
  std::fclose(out);
  return text;
}

TEST(ConsoleSink, APlainLineCarriesWhatAPersonReadsAndMetricsJsonlEveryField) {
  const StepRecord r = classification_record();
  const std::string line = console_line(r);
  EXPECT_EQ(line,
            "epoch 1/3 batch 40/231 step 40 loss 1.4159 accuracy 0.2374 lr 0.0010 228.6 samples/s 252.6 ms/step grad_norm 0.2647 "
            "mem_peak_mb 1.1\n");
  EXPECT_LT(line.size(), 140u);
  for (const char* left_out : {"mem_mb", "mem_weights_mb", "mem_optim_mb", "rss_", "gflops", "mfu", "skipped_steps", "forward", "pixels"}) {
    EXPECT_EQ(line.find(left_out), std::string::npos) << left_out << " in " << line;
  }
  // Without tensor memory counted, the process's resident peak is the memory number.
  StepRecord no_tensor_memory = r;
  std::erase_if(no_tensor_memory.values, [](const auto& kv) { return kv.first.rfind("mem_", 0) == 0; });
  EXPECT_NE(console_line(no_tensor_memory).find(" rss_peak_mb 450.0\n"), std::string::npos) << console_line(no_tensor_memory);

  // metrics.jsonl keeps every field of the same record.
  const auto path = std::filesystem::path(::testing::TempDir()) / ("console_" + std::to_string(getpid()) + ".jsonl");
  {
    JsonlSink jsonl(path);
    jsonl.on_step(r);
  }
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  const auto j = nlohmann::json::parse(first);
  for (const auto& [key, value] : r.values) {
    ASSERT_TRUE(j.contains(key)) << key << " missing from " << first;
    EXPECT_DOUBLE_EQ(j[key].get<double>(), value) << key;
  }
  for (const char* key : {"time_forward_ms", "time_forward_frac", "mem_backward_peak_mb", "samples_per_s", "step_time_ms", "lr"}) {
    EXPECT_TRUE(j.contains(key)) << key << " missing from " << first;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace bellows::obs
