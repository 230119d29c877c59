// Fuzzes the CSV/TSV table reader, data::read_csv (include/bellows/data/csv.h), over a temp file: once with the
// default options, once with options chosen by the first input byte (delimiter, missing-value policy, a target,
// categorical and integer column, a tiny read chunk), and checks the shapes of what it returns.
//
// Input: one options byte, then the file's bytes.
//   bit 0: the file is t.tsv (tab-delimited), else t.csv        bits 1-2: missing = error | drop | zero | mean
//   bit 3: targets = [y]    bit 4: categorical = [c]    bit 5: integer = [i]
//   bit 6: chunk_bytes = 7 (lines carried over between reads)   bit 7: explicit delimiter ';'
#include <cstddef>
#include <cstdint>
#include <string>

#include "bellows/data/csv.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;

void check_table(const data::CsvTable& t, const data::CsvOptions& o) {
  const auto x = t.tensors.find("x");
  fz::expect(x != t.tensors.end() && x->second.defined(), "read_csv returned no \"x\"");
  if (x == t.tensors.end() || !x->second.defined()) return;
  const at::Tensor& xs = x->second;
  fz::expect(xs.dim() == 2 && xs.scalar_type() == at::kFloat, "\"x\" is not float32 [N, F]");
  if (xs.dim() != 2) return;
  const auto rows = xs.size(0);
  fz::expect(rows == static_cast<std::int64_t>(t.lines.size()), "\"x\" rows differ from the kept lines");
  fz::expect(xs.size(1) == static_cast<std::int64_t>(t.feature_names.size()), "\"x\" columns differ from feature_names");
  const auto y = t.tensors.find("y");
  if (!o.targets.empty()) {
    fz::expect(y != t.tensors.end() && y->second.defined(), "targets given but no \"y\"");
    if (y != t.tensors.end()) fz::expect(y->second.dim() >= 1 && y->second.size(0) == rows, "\"y\" rows differ from \"x\" rows");
  } else {
    fz::expect(y == t.tensors.end(), "\"y\" without targets");
  }
  for (const auto& [name, tensor] : t.tensors) fz::touch(tensor);
  fz::expect(t.dropped_rows == 0 || o.missing == "drop", "rows dropped without missing=drop");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::uint8_t sel = size > 0 ? data[0] : 0;
  const fz::fs::path path = fz::input_file(data, size, (sel & 1) ? "t.tsv" : "t.csv", 1);
  if (path.empty()) return 0;

  // The defaults: every column a float feature, no targets.
  try {
    data::CsvOptions o;
    o.path = path;
    check_table(data::read_csv(o), o);
  } catch (const Error& e) {
    fz::rejected(e);
  }

  // Typed columns and a policy, as chosen.
  try {
    static const char* const kMissing[] = {"error", "drop", "zero", "mean"};
    data::CsvOptions o;
    o.path = path;
    o.missing = kMissing[(sel >> 1) & 3];
    if (sel & 0x08) o.targets = {"y"};
    if (sel & 0x10) o.categorical = {"c"};
    if (sel & 0x20) o.integer = {"i"};
    if (sel & 0x40) o.chunk_bytes = 7;
    if (sel & 0x80) o.delimiter = ';';
    check_table(data::read_csv(o), o);
  } catch (const Error& e) {
    return fz::rejected(e);
  }
  return 0;
}
