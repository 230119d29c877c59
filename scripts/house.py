#!/usr/bin/env python3
"""The house rules a change must keep (docs/architecture.md, "Checking the house"), checked over the source tree:

  layering   the include arrows point one way (app/ above train/ above the modules below it, util/ at the bottom)
  files      no source file (C++, C, CUDA, Fortran, Python) over 600 lines
  functions  no function over 80 lines, as lizard measures a function's length (its first line to its closing brace,
             the lambdas inside it included)
  config     no config value read by key name outside config/ and the bindings: every key is declared once, in a
             config::Binding beside the options struct it fills, and read through that struct (config/binding.h)

over src/, include/, tools/, tests/ and bench/ (config: src/, include/, tools/ and bench/; tests read configs to
check them). The examples (examples/) are written as one story each for a reader
and are not checked. Prints nothing and exits 0 when every rule holds; else one line per breach, naming the file,
the line and the rule, and exits 1. The CTest house.rules runs it (the README's test command, the quick tier too).

    python3 scripts/house.py [--root REPOSITORY] [--only layering|files|functions|config]

Function lengths are lizard's (PyPI; scripts/setup.sh installs it with the tests' Python packages): a parser of
C/C++, Python and Fortran that needs no compile commands, where clang-tidy's readability-function-size would parse
LibTorch's headers once per file (minutes on two cores).
"""
import argparse
import re
import sys
from pathlib import Path

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
CHECKED_DIRS = ("src", "include", "tools", "tests", "bench")
SOURCE_SUFFIXES = {".cpp", ".h", ".c", ".cu", ".cuh", ".f90", ".py"}
# Test inputs and generated corpora are data, not code.
SKIPPED_PARTS = {"corpus", "__pycache__"}

MODULES = ("util", "hw", "config", "precision", "plan", "data", "ckpt", "obs", "dist", "models", "train", "app", "lab", "capi")
# What each module may include of the others, besides itself. The layers: nothing below app/ includes app/, nothing
# below lab/ includes lab/; dist/ includes only util/ and config/; precision/ only util/; hw/ only util/ and
# precision/; plan/ only util/, hw/, precision/ and dist/'s registry and memory models; models/ of data/ only the
# interfaces (dataset.h, batch.h).
BELOW_APP = ("train", "models", "data", "obs", "dist", "plan", "precision", "ckpt", "config", "hw", "util")
ALLOWED = {
    "dist": {"dist/", "util/", "config/"},
    "precision": {"precision/", "util/"},
    "hw": {"hw/", "util/", "precision/", "version.h"},
    "plan": {"plan/", "util/", "hw/", "precision/", "dist/registry.h", "dist/memory.h"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"bellows/([^"]+)"')

# Config reads by key name. A binding's reader gets its key as the parameter `key` (config/binding.h:
# Binding::custom): config::get_*(c, key) there is the binding's own read; any other key argument is a read by name.
CONFIG_DIRS = ("src", "include", "tools", "bench")
CONFIG_OWN = ("src/config/", "include/bellows/config/",
              # The schema's composition: which model's keys to declare is read from the raw config before it can be
              # validated (model.name), as are the demo's pieces.
              "src/app/schema.cpp")
CONFIG_READS = [
    (re.compile(r"config::(get_(?:bool|int|double|string|string_list|int_list|double_list)|is_word)\s*\(\s*[^,()]+,\s*(?!\s|key\s*[,)])"),
     "reads a key by name: read it through its binding's options struct"),
    (re.compile(r"using\s+(?:bellows::)?config::(?:get_\w+|is_word)\b"), "imports a config getter: read keys through their binding"),
    (re.compile(r"\.(?:has|node)\(\s*(?:\"|k[A-Z])"), "looks a key up by name: read it through its binding's options struct"),
    (re.compile(r"(?:\.|->)add\(\s*\"[a-z_]+(?:\.[a-z_]+)*\"\s*,\s*(?:config::)?Type::"),
     "declares a key by hand: declare it with a config::Binding beside its options struct"),
]


def source_files(root):
    for top in CHECKED_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and not SKIPPED_PARTS & set(path.parts):
                yield path


def module_of(root, path):
    """The module a library file belongs to (src/<m>/..., include/bellows/<m>/...), or None."""
    rel = path.relative_to(root).parts
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    if rel[0] == "include" and len(rel) > 3 and rel[1] == "bellows":
        return rel[2]
    return None


def layering_breach(module, included):
    if module in BELOW_APP and included.startswith("app/"):
        return "a module below app/ includes app/"
    if module in BELOW_APP + ("app", "capi") and included.startswith("lab/"):
        return "a module below lab/ includes lab/"
    allowed = ALLOWED.get(module)
    if allowed is not None and not any(included == a or (a.endswith("/") and included.startswith(a)) for a in allowed):
        return f"{module}/ may include only {', '.join(sorted(allowed))}"
    if module == "models" and included.startswith("data/") and included not in ("data/dataset.h", "data/batch.h"):
        return "models/ includes of data/ only the interfaces (data/dataset.h, data/batch.h)"
    return None


def check_layering(root, files):
    breaches = []
    for path in files:
        module = module_of(root, path)
        if module not in MODULES or path.suffix not in (".cpp", ".h", ".cu", ".cuh"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            why = match and layering_breach(module, match.group(1))
            if why:
                breaches.append(f"{path.relative_to(root)}:{number}: layering: includes bellows/{match.group(1)}: {why}")
    return breaches


def check_files(root, files):
    breaches = []
    for path in files:
        lines = len(path.read_bytes().splitlines())
        if lines > MAX_FILE_LINES:
            breaches.append(f"{path.relative_to(root)}: files: {lines} lines, over {MAX_FILE_LINES}: split it by concern")
    return breaches


def check_functions(root, files):
    try:
        import lizard
    except ImportError:
        return ["functions: the Python package lizard is missing (scripts/setup.sh installs it; or pip install lizard)"]
    breaches = []
    for path in files:
        if path.suffix == ".cuh":
            continue  # lizard reads .cu; none of ours is a header-only kernel
        info = lizard.analyze_file(str(path))
        for f in info.function_list:
            if f.length > MAX_FUNCTION_LINES:
                breaches.append(f"{path.relative_to(root)}:{f.start_line}: functions: {f.name} is {f.length} lines, over "
                                f"{MAX_FUNCTION_LINES}: make it a story of named steps")
    return breaches


# Lines each config pattern must flag, and lines none may: the rule's own test, run with it.
CONFIG_FLAGGED = ['config::get_string(c, "model.name")', 'config::get_int(*r.config,\n "seed")', 'config::is_word(c, kBatch, "auto")',
                  'using config::get_int;', 'c.has("data.path")', 'c.node("model.name")', 'c.has(kOld)',
                  's.add("model.task", config::Type::kString, "objective")', 'schema->add("seed", Type::kInt, "seed")']
CONFIG_CLEAN = ['config::get_bool(c, key)', 'config::get_double_list(c, key);', 'config::is_word(c, key, "auto")',
                'get_int(state, "steps")', 'c.origin("model.task").str()', 'sources().add(std::move(entry))',
                'b.key("lr", &O::lr, "peak learning rate")']


def config_rule_holds():
    def flagged(text):
        return any(p.search(text) for p, _ in CONFIG_READS)
    return all(flagged(t) for t in CONFIG_FLAGGED) and not any(flagged(t) for t in CONFIG_CLEAN)


def check_config(root, files):
    if not config_rule_holds():
        return ["scripts/house.py: config: the patterns no longer tell reads by name from a binding's reads (CONFIG_FLAGGED, CONFIG_CLEAN)"]
    breaches = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(CONFIG_DIRS) or rel.startswith(CONFIG_OWN) or path.suffix not in (".cpp", ".h"):
            continue
        text = path.read_text(errors="replace")
        for pattern, why in CONFIG_READS:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                breaches.append(f"{rel}:{line}: config: {match.group(0).strip()} ... {why}")
    return breaches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent), help="the repository")
    ap.add_argument("--only", choices=("layering", "files", "functions", "config"))
    a = ap.parse_args()
    root = Path(a.root).resolve()
    files = list(source_files(root))
    if not files:
        print(f"house: no source files under {root} ({', '.join(CHECKED_DIRS)})", file=sys.stderr)
        return 1
    checks = {"layering": check_layering, "files": check_files, "functions": check_functions, "config": check_config}
    breaches = []
    for name, check in checks.items():
        if a.only in (None, name):
            breaches += check(root, files)
    for line in breaches:
        print(line)
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
