# Sourced first by every examples/<name>/run.sh, with the script's arguments:
#   source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift
# Sets: here (the example's folder), repo, BELLOWS_BIN (the built binaries; default <repo>/build/bin), python
# (BELLOWS_PYTHON or python3, for the checks), example (the folder's name), WORK (BELLOWS_EXAMPLE_WORK or
# /tmp/bellows-examples/<name>), quick ("--quick" when the first argument is --quick, else ""), and data (the
# generated data's folder: quick and full data differ in size, so they are kept apart).
# ensure_data FILE...: runs `bellows_example_data <name> <data> [--quick]` unless every FILE is in the folder.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BELLOWS_BIN="${BELLOWS_BIN:-$repo/build/bin}"
python="${BELLOWS_PYTHON:-python3}"
example="$(basename "$here")"
WORK="${BELLOWS_EXAMPLE_WORK:-/tmp/bellows-examples/$example}"
quick=""
if [ "${1:-}" = "--quick" ]; then quick="--quick"; fi
data="$WORK/data${quick:+-quick}"

ensure_data() {
  local f
  for f in "$@"; do
    if [ ! -e "$data/$f" ]; then
      "$BELLOWS_BIN/bellows_example_data" "$example" "$data" $quick
      return
    fi
  done
}
