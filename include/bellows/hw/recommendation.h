// Settings derived from the hardware facts, each with the reason that led to it. The plan (plan/) starts
// from these; `bellows hw` prints them.
#pragma once

#include <string>
#include <vector>

#include "bellows/precision/registry.h"  // defines: DeviceFacts

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
// What a precision policy needs to know of a device (precision/registry.h), from its hardware facts.
precision::DeviceFacts device_facts(const CpuInfo& cpu);
precision::DeviceFacts device_facts(const GpuInfo& gpu);
// The precision a device computes best in, with the reason (precision::auto_precision over the registered
// policies): one decision shared by `bellows hw` and the plan.
Recommendation recommend_precision(const CpuInfo& cpu);
Recommendation recommend_precision(const GpuInfo& gpu);

}  // namespace bellows::hw
