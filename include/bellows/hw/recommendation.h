// Settings derived from the hardware facts, each with the reason that led to it. The plan (plan/) starts
// from these; `bellows hw` prints them.
#pragma once

#include <string>
#include <vector>

namespace bellows::hw {

struct HardwareInfo;

struct Recommendation {
  std::string key;     // a config key: "precision", "device", "threads.intra_op", ...
  std::string value;
  std::string reason;
};

std::vector<Recommendation> recommend(const HardwareInfo& info);

struct CpuInfo;
struct GpuInfo;
// The precision a device computes best in, with the reason: one decision shared by `bellows hw` and the plan.
Recommendation recommend_precision(const CpuInfo& cpu);
Recommendation recommend_precision(const GpuInfo& gpu);

}  // namespace bellows::hw
