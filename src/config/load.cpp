// Loading configuration files and composing them: `experiment: FILE` < `hardware_profile: FILE` < the file's
// own keys, recursively, with cycle detection. yaml-cpp parses; this file turns its nodes into a Config whose
// every key carries file:line:column, and its exceptions into kConfig errors naming the file.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "bellows/config/config.h"
#include "bellows/util/check.h"
#include "config/internal.h"
#include "config/scalar.h"

namespace bellows::config {
namespace {

namespace fs = std::filesystem;

constexpr std::array<const char*, 2> kIncludeKeys = {kExperimentKey, kHardwareProfileKey};  // in merge order
constexpr const char* kIncludeHint =
    "check the path; files named by 'experiment:' and 'hardware_profile:' are relative to the file that names them";

// Which file named the one being loaded, for messages about it.
struct IncludeSite {
  std::string key;
  Origin origin;
};

// The files being loaded, outermost first: a file that names one of these makes a cycle.
struct Chain {
  std::vector<std::string> ids;       // weakly canonical paths
  std::vector<std::string> displays;  // as the user wrote them
};

struct Composed {
  Config config;
  std::vector<std::string> sources;
  std::optional<ProfileChoice> profile;  // the hardware profile composed (the outermost file's wins)
};

Origin origin_at(const std::string& file, const YAML::Mark& mark) {
  if (mark.is_null()) return Origin::in_file(file);
  return Origin::in_file(file, mark.line + 1, mark.column + 1);
}

std::string named_by(const IncludeSite* site) {
  return site ? fmt::format(" (named by '{}' at {})", site->key, site->origin.str()) : std::string();
}

std::string file_id(const fs::path& path) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(path, ec);
  return ec ? path.lexically_normal().string() : canonical.string();
}

YAML::Node parse_text(const std::string& text, const std::string& display, const IncludeSite* site) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    BELLOWS_FAIL(ErrorKind::kConfig,
                 fmt::format("{}: YAML syntax error: {}{}", origin_at(display, e.mark).str(), e.msg, named_by(site)),
                 "fix the YAML at that line and column (indentation, a missing ':' or an unclosed bracket)");
  }
}

bool is_include_key(const std::string& name) {
  return std::find(kIncludeKeys.begin(), kIncludeKeys.end(), name) != kIncludeKeys.end();
}

// Adds the keys of `map` below `prefix` to `layer`, each with the origin of its key; the include keys at the
// top level are left to compose(). Structural problems (duplicate keys, dotted keys) go to `problems`.
void add_entries(Config& layer, const YAML::Node& map, const std::string& prefix, const std::string& file,
                 std::vector<std::string>& problems) {
  std::map<std::string, Origin> seen;
  for (const auto& entry : map) {
    const Origin origin = origin_at(file, entry.first.Mark());
    if (!entry.first.IsScalar()) {
      problems.push_back(fmt::format("{}: a key must be a name, got {}", origin.str(), detail::describe(entry.first)));
      continue;
    }
    const std::string& name = entry.first.Scalar();
    const std::string key = detail::join_key(prefix, name);
    if (const auto first = seen.find(name); first != seen.end()) {
      problems.push_back(
          fmt::format("{}: duplicate key '{}' (first set at {})", origin.str(), key, first->second.str()));
      continue;
    }
    seen.emplace(name, origin);
    if (prefix.empty() && is_include_key(name)) continue;
    if (name.empty() || name.find('.') != std::string::npos) {
      problems.push_back(
          fmt::format("{}: key '{}' contains '.' or is empty; nest it instead (a: {{b: ...}})", origin.str(), key));
      continue;
    }
    if (entry.second.IsMap()) {
      layer.set(key, YAML::Node(YAML::NodeType::Map), origin);
      add_entries(layer, entry.second, key, file, problems);
    } else {
      layer.set(key, entry.second, origin);
    }
  }
}

Composed load_file(const fs::path& path, const IncludeSite* site, Chain& chain, const ProfileResolver& profiles);

// The config of one parsed document, its includes merged below its own keys.
Composed compose(const YAML::Node& doc, const std::string& display, const fs::path& dir, Chain& chain, const ProfileResolver& profiles) {
  Composed result;
  if (doc.IsNull()) {  // an empty file is an empty config
    result.sources.push_back(display);
    return result;
  }
  BELLOWS_CHECK_CONFIG(doc.IsMap(),
                       fmt::format("{}: expected a mapping of keys at the top level, got {}",
                                   origin_at(display, doc.Mark()).str(), detail::describe(doc)),
                       "a config file is a YAML mapping, like 'optim: {lr: 0.001}'");
  for (const char* include_key : kIncludeKeys) {
    for (const auto& entry : doc) {
      if (!entry.first.IsScalar() || entry.first.Scalar() != include_key) continue;
      const IncludeSite site{include_key, origin_at(display, entry.first.Mark())};
      const YAML::Node& value = entry.second;
      BELLOWS_CHECK_CONFIG(value.IsScalar() && !value.Scalar().empty(),
                           fmt::format("{}: '{}' must name a YAML file, got {}", site.origin.str(), include_key,
                                       detail::describe(value)),
                           fmt::format("write '{}: path/to/file.yaml'", include_key));
      const std::string& named = value.Scalar();
      fs::path file = dir / named;
      const bool is_profile = std::string(include_key) == kHardwareProfileKey;
      if (is_profile) {  // a shipped profile's name, auto or none, through the resolver; else a path
        BELLOWS_CHECK_CONFIG(static_cast<bool>(profiles) || is_profile_path(named),
                             fmt::format("{}: 'hardware_profile: {}' names a shipped profile, which only a run's loading resolves",
                                         site.origin.str(), named),
                             "name a file instead (a path with '/' or ending in .yaml)");
        if (profiles) {
          if (std::optional<fs::path> found = profiles(named, site.origin)) file = *found;
        }
        result.profile = ProfileChoice{named, site.origin, file};
      }
      if (file.empty()) break;  // hardware_profile: none
      Composed included = load_file(file, &site, chain, profiles);
      if (!is_profile && included.profile) result.profile = included.profile;  // an experiment's profile, unless this file names one
      result.config.merge(included.config);
      result.sources.insert(result.sources.end(), included.sources.begin(), included.sources.end());
      break;  // a duplicate include key is reported by add_entries
    }
  }
  Config own;
  std::vector<std::string> problems;
  add_entries(own, doc, "", display, problems);
  BELLOWS_CHECK_CONFIG(problems.empty(), detail::problem_list(problems),
                       "each key may appear once per mapping, as a plain name without dots");
  result.config.merge(own);
  result.sources.push_back(display);
  return result;
}

std::string read_file(const fs::path& path, const std::string& display, const IncludeSite* site) {
  std::error_code ec;
  BELLOWS_CHECK_CONFIG(fs::exists(path, ec), fmt::format("config file '{}' not found{}", display, named_by(site)),
                       kIncludeHint);
  BELLOWS_CHECK_CONFIG(fs::is_regular_file(path, ec),
                       fmt::format("config file '{}' is not a regular file{}", display, named_by(site)), kIncludeHint);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  BELLOWS_CHECK_CONFIG(in.good() || in.eof(), fmt::format("cannot read config file '{}'{}", display, named_by(site)),
                       "check the file's permissions");
  return text.str();
}

Composed load_file(const fs::path& path, const IncludeSite* site, Chain& chain, const ProfileResolver& profiles) {
  const std::string display = path.lexically_normal().string();
  const std::string text = read_file(path, display, site);
  const std::string id = file_id(path);
  if (std::find(chain.ids.begin(), chain.ids.end(), id) != chain.ids.end()) {
    BELLOWS_FAIL(ErrorKind::kConfig,
                 fmt::format("{}: include cycle: {} -> {}", site ? site->origin.str() : display,
                             fmt::join(chain.displays, " -> "), display),
                 "remove one of the 'experiment:'/'hardware_profile:' keys that make the cycle");
  }
  chain.ids.push_back(id);
  chain.displays.push_back(display);
  const YAML::Node doc = parse_text(text, display, site);
  Composed composed = compose(doc, display, path.parent_path(), chain, profiles);
  chain.ids.pop_back();
  chain.displays.pop_back();
  return composed;
}

}  // namespace

Config Config::load(const std::filesystem::path& path, const ProfileResolver& profiles) {
  Chain chain;
  Composed composed = load_file(path, nullptr, chain, profiles);
  composed.config.name_ = path.lexically_normal().string();
  composed.config.sources_ = std::move(composed.sources);
  composed.config.profile_ = std::move(composed.profile);
  return std::move(composed.config);
}

Config Config::parse(const std::string& yaml_text, const std::string& name, const ProfileResolver& profiles) {
  Chain chain{{file_id(name)}, {name}};
  const YAML::Node doc = parse_text(yaml_text, name, nullptr);
  Composed composed = compose(doc, name, fs::path(name).parent_path(), chain, profiles);
  composed.config.name_ = name;
  composed.config.sources_ = std::move(composed.sources);
  composed.config.profile_ = std::move(composed.profile);
  return std::move(composed.config);
}

}  // namespace bellows::config
