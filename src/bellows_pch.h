// Precompiled header for bellows' own translation units: LibTorch's ATen headers dominate compile time on
// small machines, so they are parsed once per target. Only stable third-party and standard headers here.
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
