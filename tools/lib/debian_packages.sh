# Sourced by tools/bootstrap.sh and tools/install_code_server.sh.
# install_missing_debian_packages NAME...: installs those of the named Debian packages that are not
# installed, running `apt-get update` only when something must be installed (and with sudo when
# not root). Prints what it installs on stderr.
install_missing_debian_packages() {
  local missing=() package
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  ((${#missing[@]})) || return 0
  echo "$(basename "$0" .sh): installing Debian packages: ${missing[*]}" >&2
  local sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}
