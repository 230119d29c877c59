// Fuzzes the run-config reader: YAML text through config::Config::parse (composition with included files),
// key=value overrides through Config::apply_override and app::resolve_config_text (run schema, validation), the
// typed getters of a validated config, and the to_yaml() round trip that checkpoints and `bellows predict` use.
//
// Input: YAML text; optionally a NUL byte, then one override per line ("optim.lr=3e-4", "--batch-size=64").
// The scratch directory holds base.yaml and profiles/gpu.yaml, so `experiment: base.yaml` composes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bellows/app/schema.h"
#include "bellows/config/config.h"
#include "bellows/config/schema.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;

constexpr std::size_t kMaxOverrides = 32;

constexpr const char* kBaseYaml = R"(# an experiment file the fuzzed configs may compose
seed: 1
data:
  source: synthetic
  kind: regression
  samples: 64
  features: 4
  batch_size: 8
model:
  name: mlp
  in_features: 4
  hidden: [8]
  out_features: 1
optim:
  lr: 0.01
)";

constexpr const char* kProfileYaml = R"(# a hardware profile the fuzzed configs may compose
precision: fp32
threads: 1
data:
  workers: 0
)";

struct Input {
  std::string yaml;
  std::vector<std::string> overrides;
};

Input split(std::string_view all) {
  Input in;
  const auto nul = all.find('\0');
  in.yaml = std::string(all.substr(0, nul));
  if (nul == std::string_view::npos) return in;
  std::string_view rest = all.substr(nul + 1);
  while (!rest.empty() && in.overrides.size() < kMaxOverrides) {
    const auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) in.overrides.emplace_back(line);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return in;
}

// Whether `text` is valid UTF-8 made only of YAML's printable characters (tab, LF, CR, x20-x7E, x85, xA0-xD7FF,
// xE000-xFFFD, x10000-x10FFFF). The round-trip checks apply only then: for other bytes (which YAML does not allow,
// though the parser passes many through) the emitter's escaping makes differences that are not worth a finding.
bool printable_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    std::uint32_t cp = p[i];
    std::size_t len = 1;
    if (cp >= 0xF0 && cp <= 0xF4) {
      len = 4, cp &= 0x07;
    } else if (cp >= 0xE0) {
      len = cp <= 0xEF ? 3 : 0, cp &= 0x0F;
    } else if (cp >= 0xC2) {
      len = 2, cp &= 0x1F;
    } else if (cp >= 0x80) {
      return false;  // a continuation byte, or an overlong lead
    }
    if (len == 0 || i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    const bool printable = cp == 0x09 || cp == 0x0A || cp == 0x0D || (cp >= 0x20 && cp <= 0x7E) || cp == 0x85 ||
                           (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
    if (overlong || !printable) return false;
    i += len;
  }
  return true;
}

// to_yaml() of any config must parse back to the same tree: the same leaf keys, each of the same node type and
// (for scalars) the same text. A to_yaml() that throws (the emitter refusing the tree) is a rejection.
void check_round_trip(const config::Config& c, const std::string& name) {
  std::string text;
  try {
    text = c.to_yaml();
  } catch (const Error& e) {
    fz::rejected(e);
    return;
  }
  config::Config back;
  try {
    back = config::Config::parse(text, name);
  } catch (const Error& e) {
    if (fz::invariants_enabled()) fz::violated(std::string("to_yaml() does not parse back: ") + e.what() + "\n--- to_yaml():\n" + text);
    return;
  }
  const auto keys = c.leaf_keys();
  fz::expect(back.leaf_keys() == keys, "to_yaml() round trip changed the leaf keys\n--- to_yaml():\n" + text);
  if (back.leaf_keys() != keys) return;
  for (const auto& key : keys) {
    const YAML::Node a = c.node(key), b = back.node(key);
    fz::expect(a.Type() == b.Type(), "to_yaml() round trip changed the node type of '" + key + "'\n--- to_yaml():\n" + text);
    if (a.IsScalar() && b.IsScalar()) {
      fz::expect(a.Scalar() == b.Scalar(), "to_yaml() round trip changed the value of '" + key + "': '" + a.Scalar() +
                                               "' became '" + b.Scalar() + "'\n--- to_yaml():\n" + text);
    }
  }
  std::string again;
  try {
    again = back.to_yaml();
  } catch (const Error& e) {
    if (fz::invariants_enabled()) fz::violated(std::string("to_yaml() of a parsed to_yaml() throws: ") + e.what());
    return;
  }
  fz::expect(again == text, "to_yaml() is not idempotent\n--- first:\n" + text + "--- second:\n" + again);
}

// Every key of the schema that the validated config holds, read with the getter of its type. A validated
// config promises typed access, so a throw here is a finding.
void read_every_key(const config::Config& c, const config::Schema& schema) {
  for (const auto& [key, spec] : schema.keys()) {
    if (!c.has(key)) continue;
    try {
      switch (spec.type) {
        case config::Type::kBool: (void)config::get_bool(c, key); break;
        case config::Type::kInt: (void)config::get_int(c, key); break;
        case config::Type::kDouble: (void)config::get_double(c, key); break;
        case config::Type::kString: (void)config::get_string(c, key); break;
        case config::Type::kStringList: (void)config::get_string_list(c, key); break;
        case config::Type::kIntList: (void)config::get_int_list(c, key); break;
        case config::Type::kDoubleList: (void)config::get_double_list(c, key); break;
      }
    } catch (const Error& e) {
      if (fz::invariants_enabled()) fz::violated("typed getter of validated key '" + key + "' throws: " + e.what());
    }
  }
}

std::string model_of(const config::Config& c) {
  return c.has("model.name") && c.node("model.name").IsScalar() ? c.node("model.name").Scalar() : "mlp";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  fz::init();
  std::error_code ec;
  fz::fs::create_directories(fz::scratch_dir() / "profiles", ec);
  fz::write_file(fz::scratch_dir() / "base.yaml", std::string_view(kBaseYaml));
  fz::write_file(fz::scratch_dir() / "profiles" / "gpu.yaml", std::string_view(kProfileYaml));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!fz::take(size)) return 0;
  const Input in = split(fz::as_text(data, size));
  bool printable = printable_utf8(in.yaml);
  for (const auto& o : in.overrides) printable = printable && printable_utf8(o);
  // Includes resolve relative to the directory part of the name: the scratch directory.
  const std::string name = (fz::scratch_dir() / "fuzz.yaml").string();

  // 1. The raw tree: parse, each override on its own, the round trip.
  try {
    config::Config c = config::Config::parse(in.yaml, name);
    if (printable) check_round_trip(c, name);
    for (const auto& o : in.overrides) {
      try {
        c.apply_override(o);
      } catch (const Error& e) {
        fz::rejected(e);
      }
    }
    (void)c.sources();
    for (const auto& key : c.leaf_keys()) {
      (void)c.node(key);
      (void)c.origin(key).str();
    }
    if (printable) check_round_trip(c, name);
  } catch (const Error& e) {
    fz::rejected(e);
  }

  // 2. What a run does: overrides and alias flags, the model's schema, validation; then typed access, and the
  // config stored in a checkpoint read back and validated again, as `bellows predict` does.
  try {
    const config::Config c = app::resolve_config_text(in.yaml, name, in.overrides);
    const config::Schema schema = app::run_schema(model_of(c));
    read_every_key(c, schema);
    if (!printable) return 0;
    check_round_trip(c, name);
    const std::string stored = c.to_yaml();
    config::Config back = config::Config::parse(stored, name);
    try {
      app::validate_run_config(back);
    } catch (const Error& e) {
      if (fz::invariants_enabled()) fz::violated(std::string("a resolved config does not validate after to_yaml(): ") + e.what() + "\n--- to_yaml():\n" + stored);
    }
    read_every_key(back, schema);
  } catch (const Error& e) {
    return fz::rejected(e);
  }
  return 0;
}
