// Renders the hardware report: a human-readable text and one JSON document (schema: docs/hw.schema.json).
#pragma once

#include <string>
#include <vector>

#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo
#include "bellows/hw/peaks.h"          // defines: PeakMeasurement

namespace bellows::hw {

std::string format_text(const HardwareInfo& info, const std::vector<PeakMeasurement>& peaks = {});
std::string format_json(const HardwareInfo& info, const std::vector<PeakMeasurement>& peaks = {},
                        int indent = 2);

}  // namespace bellows::hw
