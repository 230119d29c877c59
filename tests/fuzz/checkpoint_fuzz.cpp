// Fuzzes the checkpoint directory readers of include/bellows/ckpt/checkpoint.h and inspect.h: a temp
// step-000000001/ directory holding manifest.json, model.safetensors and state.bin cut from the input goes through
// ckpt::verify_checkpoint, read_manifest, load_checkpoint, inspect_checkpoint + format_inspection,
// resolve_checkpoint and export_weights.
//
// Input (a small container; tests/fuzz/make_corpus.py writes it):
//   byte 0, flags: bit 0: rewrite the manifest's "files" entries of model.safetensors and state.bin with their real
//                         SHA-256 and size (so that mutated files get past the checksums to the parsers)
//                  bit 1: load_checkpoint with mmap       bit 2: export_weights with ema
//                  bit 3: leave state.bin out             bit 4: leave model.safetensors out
//   then three records, manifest.json, model.safetensors, state.bin: a u32 little-endian length and that many
//   bytes (a length past the end takes the rest; a missing record is an empty file).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/checksum.h"
#include "bellows/ckpt/inspect.h"
#include "bellows/ckpt/safetensors.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;
namespace fs = std::filesystem;

struct Container {
  std::uint8_t flags = 0;
  std::string_view manifest, model, state;
};

std::string_view take_record(std::string_view& rest) {
  if (rest.size() < 4) {
    rest = {};
    return {};
  }
  const auto* p = reinterpret_cast<const unsigned char*>(rest.data());
  const std::uint32_t n = std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
  rest.remove_prefix(4);
  const std::size_t len = std::min<std::size_t>(n, rest.size());
  const std::string_view record = rest.substr(0, len);
  rest.remove_prefix(len);
  return record;
}

Container parse_container(std::string_view all) {
  Container c;
  if (all.empty()) return c;
  c.flags = static_cast<std::uint8_t>(all[0]);
  all.remove_prefix(1);
  c.manifest = take_record(all);
  c.model = take_record(all);
  c.state = take_record(all);
  return c;
}

// The manifest with correct "files" entries for the files written, when it is a JSON object; else as it is.
std::string fixed_manifest(std::string_view text, const Container& c) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::string(text);
  nlohmann::json& files = j["files"];
  if (!files.is_object()) files = nlohmann::json::object();
  if (!(c.flags & 0x10)) files[ckpt::kModelFile] = {{"sha256", ckpt::sha256_hex(c.model)}, {"bytes", c.model.size()}};
  if (!(c.flags & 0x08)) files[ckpt::kStateFile] = {{"sha256", ckpt::sha256_hex(c.state)}, {"bytes", c.state.size()}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!fz::take(size)) return 0;
  const Container c = parse_container(fz::as_text(data, size));
  const fs::path parent = fz::scratch_dir() / "checkpoints";
  const fs::path dir = parent / ckpt::checkpoint_name(1);
  static const bool made = [&] {
    std::error_code ec;
    fs::create_directories(dir, ec);
    return !ec;
  }();
  if (!made) fz::violated("cannot create " + dir.string());

  const std::string manifest = (c.flags & 0x01) ? fixed_manifest(c.manifest, c) : std::string(c.manifest);
  fz::write_file(dir / ckpt::kManifestFile, manifest);
  ::unlink((dir / ckpt::kModelFile).c_str());
  ::unlink((dir / ckpt::kStateFile).c_str());
  if (!(c.flags & 0x10)) fz::write_file(dir / ckpt::kModelFile, c.model);
  if (!(c.flags & 0x08)) fz::write_file(dir / ckpt::kStateFile, c.state);
  const bool mmap = c.flags & 0x02, ema = c.flags & 0x04;

  ckpt::Verification v;
  try {
    v = ckpt::verify_checkpoint(dir);
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    (void)ckpt::read_manifest(dir);
  } catch (const Error& e) {
    fz::expect(!v.ok, "verify_checkpoint passes a checkpoint whose manifest read_manifest rejects");
    fz::rejected(e);
  }
  try {
    const ckpt::Checkpoint loaded = ckpt::load_checkpoint(dir, mmap);
    fz::expect(v.ok, "load_checkpoint loads a checkpoint that verify_checkpoint rejects");
    for (const auto& [name, t] : loaded.model) fz::touch(t);
    for (const auto& [name, t] : loaded.state) fz::touch(t);
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    const nlohmann::json inspection = ckpt::inspect_checkpoint(dir);
    (void)ckpt::format_inspection(inspection);
    (void)inspection.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    const fs::path resolved = ckpt::resolve_checkpoint(parent);
    fz::expect(resolved == dir, "resolve_checkpoint chose " + resolved.string());
  } catch (const Error& e) {
    fz::rejected(e);
  }
  if (!v.ok) return 0;
  try {
    const fs::path to = fz::scratch_dir() / "export.safetensors";
    const std::size_t n = ckpt::export_weights(dir, to, ema);
    try {
      const auto back = ckpt::read_safetensors(to);
      fz::expect(back.size() == n, "export_weights wrote another tensor count than it reports");
    } catch (const Error& e) {
      if (fz::invariants_enabled()) fz::violated(std::string("bellows cannot read the weights export_weights wrote: ") + e.what());
    }
  } catch (const Error& e) {
    return fz::rejected(e);
  }
  return 0;
}
