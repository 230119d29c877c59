// Reading YAML scalars by YAML 1.2's core schema (yaml-cpp parses the syntax but leaves every plain scalar
// as text, and its own conversions accept yes/on as bools and 010 as octal), and describing values in
// error messages. Private to the config module.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>

namespace bellows::config::detail {

enum class ScalarKind { kNull, kBool, kInt, kDouble, kString, kNotScalar };

// What a node holds: quoted and !!str scalars are always strings; plain ones are read by the core schema.
ScalarKind classify(const YAML::Node& node);
// True for a quoted or !!str-tagged scalar, whose text must stay a string when written back.
bool is_forced_string(const YAML::Node& node);

std::optional<bool> as_bool(const YAML::Node& node);
std::optional<std::int64_t> as_int(const YAML::Node& node);  // nullopt also when out of 64-bit range
std::optional<double> as_double(const YAML::Node& node);     // ints too

// The value as an error message shows it: 1.5, 'abc', "64" (quoted), a list, a mapping, an empty value.
std::string describe(const YAML::Node& node);

// The shortest text that reads back as the same double ("0.1", "0.0003", "1.0").
std::string shortest_double_text(double value);

// Values built in code, like YAML::Node(0.1), hold 17 significant digits ("0.10000000000000001"). Rewrites
// such untagged double scalars (also inside lists and maps) in their shortest form; parsed text, which is
// tagged, is left exactly as written.
void shorten_code_doubles(YAML::Node& node);

}  // namespace bellows::config::detail
