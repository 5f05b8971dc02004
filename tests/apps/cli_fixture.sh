# Sourced by the command-line test scripts once they have set $merak: a
# fresh $work directory (removed at exit) holding text.txt, a short text
# repeated, the tiny model's flags in $tiny, and expect_error.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work/text.txt" <<'PY'
import sys
s = ("Call me Ishmael. Some years ago, never mind how long precisely, having little or no "
     "money in my purse, and nothing particular to interest me on shore. ")
open(sys.argv[1], "w").write(s * 20)
PY
tiny=(--layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --log-level warn)

source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
