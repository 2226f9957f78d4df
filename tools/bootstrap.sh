#!/usr/bin/env bash
# Installs every Debian and npm package that the build, the demo and the tests need.
# Idempotent: installs only what is missing, and runs `apt-get update` at most once, only when it
# must install something. Safe to run on every `make`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/debian_packages.sh
source tools/lib/debian_packages.sh

# One package per line; keep sorted. Why each is here is in docs/dependencies.md.
debian_packages=(
  bubblewrap
  buildah
  busybox-static
  ca-certificates
  ccache
  chromium
  clang
  clang-format
  clang-tidy
  cmake
  curl
  g++
  jupyter-notebook
  libboost-system1.74-dev
  libboost1.74-dev
  libclang-rt-14-dev
  libgtest-dev
  libgmock-dev
  libopenblas-dev
  libpcre2-dev
  libpq-dev
  libpugixml-dev
  libsqlite3-dev
  libssl-dev
  libutf8proc-dev
  make
  munge
  nginx-light
  ninja-build
  nlohmann-json3-dev
  openssl
  pkg-config
  podman
  postgresql
  procps
  python3
  python3-torch
  rclone
  s3cmd
  skopeo
  slurm-client
  slurm-wlm
  slurmctld
  slurmd
  wrk
  zlib1g-dev
)

install_missing_debian_packages "${debian_packages[@]}"

# npm packages (real clients used by the end-to-end tests) are pinned by package-lock.json.
if [[ -f package-lock.json ]]; then
  if [[ ! -d node_modules ]] || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
    if ! command -v npm >/dev/null; then
      echo "bootstrap: npm is required for the end-to-end tests; install Node.js 20+" >&2
      exit 1
    fi
    echo "bootstrap: npm ci"
    npm ci --no-audit --no-fund --loglevel=error
  fi
fi
