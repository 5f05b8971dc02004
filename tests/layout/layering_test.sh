#!/usr/bin/env bash
# The layering of the source tree (README "Layout"): a folder includes only
# the folders below it, and only actors/ and apps/ include CAF. Fails naming
# each file and include that breaks it.
#   layering_test.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: layering_test.sh SOURCE_ROOT}
declare -A may=(
  [core]="core"
  [model]="core model"
  [gpu]="core model gpu"
  [comm]="core model comm"
  [job]="core comm job"
  [partition]="core model partition"
  [svm]="core svm"
  [actors]="core model gpu comm job partition svm actors"
  [apps]="core model gpu comm job partition svm actors bench apps"
  [bench]="core model gpu comm job partition svm actors bench"
)
caf_ok=" actors apps "
bad=0
for folder in "${!may[@]}"; do
  [[ -d "$root/$folder" ]] || continue
  allowed=" ${may[$folder]} "
  while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    text=${rest#*:}
    if [[ $text =~ ^#include\ \"([a-z_]+)/ ]]; then
      to=${BASH_REMATCH[1]}
      if [[ -n ${may[$to]+x} && $allowed != *" $to "* ]]; then
        echo "${file#"$root"/}:$line: $folder/ includes $to/ ($text); $folder/ may include only:${allowed% }"
        bad=1
      fi
    elif [[ $text =~ ^#include\ \<caf/ && $caf_ok != *" $folder "* ]]; then
      echo "${file#"$root"/}:$line: $folder/ includes CAF ($text); only actors/ and apps/ may"
      bad=1
    fi
  done < <(grep -rnE '^#include ["<]' "$root/$folder" --include='*.hpp' --include='*.cpp' \
             --include='*.h' --include='*.cu' --include='*.cuh' || true)
done
if [[ $bad -ne 0 ]]; then
  exit 1
fi
echo "layering: every include goes down"
