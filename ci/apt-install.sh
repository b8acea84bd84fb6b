#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are not installed yet (sudo only when not
# root; `apt-get update` only when the first try fails). Shared by ci/setup.sh and the test
# scripts that need packages of their own.
set -euo pipefail
missing=()
for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -gt 0 ] || exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends "${missing[@]}"; }
