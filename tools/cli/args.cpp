// Argument helpers shared by the subcommands; see command.h.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <csignal>

#include "bellows/util/check.h"
#include "command.h"

namespace bellows::cli {
namespace {

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");
extern "C" void on_stop_requested(int) { g_stop_requested.store(true); }

}  // namespace

const std::atomic<bool>* stop_on_signals() {
  std::signal(SIGINT, on_stop_requested);
  std::signal(SIGTERM, on_stop_requested);
  return &g_stop_requested;
}

std::pair<std::optional<std::filesystem::path>, std::vector<std::string>> split_config_args(const std::vector<std::string>& args) {
  if (!args.empty() && args[0].find('=') == std::string::npos && args[0].rfind("-", 0) != 0) {
    return {std::filesystem::path(args[0]), std::vector<std::string>(args.begin() + 1, args.end())};
  }
  return {std::nullopt, args};
}

double parse_duration(const std::string& flag, const std::string& text) {
  double v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const std::string unit(p, text.data() + text.size());
  double scale = 0;
  if (unit.empty() || unit == "s" || unit == "sec") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60;
  else if (unit == "h") scale = 3600;
  BELLOWS_CHECK_USAGE(ec == std::errc{} && scale > 0 && v > 0 && std::isfinite(v),
                      fmt::format("{} '{}' is not a positive duration", flag, text), fmt::format("write e.g. {} 60s, {} 2m", flag, flag));
  return v * scale;
}

std::optional<std::string> take_flag_value(std::vector<std::string>& args, const std::string& flag) {
  std::optional<std::string> value;
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag) {
      BELLOWS_CHECK_USAGE(i + 1 < args.size(), fmt::format("{} needs a value", flag), fmt::format("write {} VALUE", flag));
      value = args[++i];
    } else if (args[i].rfind(flag + "=", 0) == 0) {
      value = args[i].substr(flag.size() + 1);
    } else {
      rest.push_back(args[i]);
    }
  }
  args = std::move(rest);
  return value;
}

bool take_flag(std::vector<std::string>& args, const std::string& flag) {
  const auto end = std::remove(args.begin(), args.end(), flag);
  const bool found = end != args.end();
  args.erase(end, args.end());
  return found;
}

}  // namespace bellows::cli
