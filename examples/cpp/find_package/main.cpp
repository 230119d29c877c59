// Uses bellows from an outside project: prints what the hardware probe found and what it recommends.
#include <bellows/hw/hardware_info.h>
#include <bellows/version.h>

#include <iostream>

int main() {
  const auto& hw = bellows::hw::HardwareInfo::get();
  std::cout << "bellows " << BELLOWS_VERSION << " on " << hw.cpu.model_name << "\n"
            << "logical cores: " << hw.cpu.logical_cores << "\n";
  for (const auto& r : hw.recommendations) std::cout << r.key << " = " << r.value << "  (" << r.reason << ")\n";
  return 0;
}
