// The deterministic data generators of the examples in examples/: each writes its example's data, in the
// format the real pipeline reads, into a directory. `bellows_example_data NAME DIR [--quick]` runs one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace bellows::example_data {

struct GenOptions {
  std::filesystem::path out;  // created if missing
  bool quick = false;         // a smaller data set for the CI's shortened schedules
  std::uint64_t seed = 0;
};

// Each returns a one-line summary of what it wrote; errors are bellows::Error.
std::string generate_weather_gnn(const GenOptions& options);     // NetCDF regional grid (seed 000)
std::string generate_cape_resnet(const GenOptions& options);     // PNG image folder (seed 001)
std::string generate_icon_diffusion(const GenOptions& options);  // NPZ context/fine pairs (seed 002)
std::string generate_temporal(const GenOptions& options);        // CSV features + NPY series (seed 003)
std::string generate_nli_encoder(const GenOptions& options);     // TSV sentence pairs (seed 004)

}  // namespace bellows::example_data
