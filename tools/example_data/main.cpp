// bellows_example_data NAME DIR [--quick] [--seed N]: writes one example's data (see generators.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <map>

#include "bellows/util/error.h"
#include "generators.h"

int main(int argc, char** argv) {
  using namespace bellows::example_data;
  const std::map<std::string, std::string (*)(const GenOptions&)> generators = {
      {"weather-gnn", generate_weather_gnn},   {"cape-resnet", generate_cape_resnet}, {"icon-diffusion", generate_icon_diffusion},
      {"temporal", generate_temporal},         {"nli-encoder", generate_nli_encoder}};
  CLI::App app{"Writes the data of one bellows example (examples/NAME) into DIR, deterministically.", "bellows_example_data"};
  std::string name;
  GenOptions options;
  std::vector<std::string> names;
  for (const auto& [n, _] : generators) names.push_back(n);
  app.add_option("name", name, "example")->required()->check(CLI::IsMember(names));
  app.add_option("dir", options.out, "output directory")->required();
  app.add_flag("--quick", options.quick, "a small data set for a shortened schedule");
  app.add_option("--seed", options.seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    std::cout << generators.at(name)(options) << "\n";
    return 0;
  } catch (const bellows::Error& e) {
    std::cerr << "bellows_example_data: " << e.message() << "\n";
    if (!e.hint().empty()) std::cerr << "---> HINT: " << e.hint() << "\n";
    return e.kind() == bellows::ErrorKind::kData ? 3 : 1;
  } catch (const std::exception& e) {
    std::cerr << "bellows_example_data: " << e.what() << "\n";
    return 1;
  }
}
