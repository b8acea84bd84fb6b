#!/usr/bin/env bash
# Downloads Debian's real HIP headers and runtimes of the ROCm versions the library supports
# besides the system's own 5.2 (ci/setup.sh installs that one), without installing anything:
#
#   trixie        libamdhip64-dev and libamdhip64-5 (ROCm 5.7)
#   sid           libamdhip64-dev and libamdhip64-6 (ROCm 6.4)
#   experimental  libamdhip64-dev and libamdhip64-7 (ROCm 7.2)
#
# Each suite's packages are unpacked with dpkg-deb -x into target/real-hip/SUITE/root, with the
# runtime's whole dependency closure (its own libc6, libstdc++6, LLVM, HSA runtime, ...): these
# libraries need a newer C library than the build machine's, so the checks run them under the
# suite's own dynamic loader (target/real-hip/SUITE/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2).
#
# apt runs against a private state under target/real-hip/apt (its own source list, made from the
# Debian mirror this machine's apt already uses, lists, cache and an empty dpkg status), so the
# system's apt state and installed packages are never touched. The .deb files stay there: a rerun
# with every package present is offline. Prints one line per suite: SUITE VERSION ROOT.
#
#   ci/hip-fetch.sh [SUITE...]     (default: trixie sid experimental)
set -euo pipefail
cd "$(dirname "$0")/.."
base=$PWD/target/real-hip
apt_dir=$base/apt
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(trixie sid experimental)

declare -A runtime_pkg=([trixie]=libamdhip64-5 [sid]=libamdhip64-6 [experimental]=libamdhip64-7)

die() { echo "ci/hip-fetch.sh: $*" >&2; exit 1; }
for tool in apt-get apt-cache dpkg-deb; do command -v "$tool" >/dev/null || die "$tool is missing (a Debian system is needed)"; done

# The Debian mirror and keyring this machine's apt is configured with.
mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' 2>/dev/null |
    awk '$3 == "deb" && $2 !~ /-(security|updates|backports)$/ && $1 !~ /security/ {print $1; exit}')
[ -n "$mirror" ] || die "no Debian archive in this machine's apt sources to take the mirror from"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "$keyring is missing (package debian-archive-keyring)"

mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/conf.d" "$apt_dir/debs"
: >"$apt_dir/state/status"
{
    for s in trixie sid experimental; do
        echo "deb [signed-by=$keyring] $mirror $s main"
    done
} >"$apt_dir/sources.list"
# The system's apt.conf.d is left out (it would add other index targets); only these options apply.
apt_opts=(
    -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts="$apt_dir/conf.d"
    -o Dir::Etc::Parts="$apt_dir/conf.d" -o Dir::Etc::Preferences="$apt_dir/conf.d/none"
    -o Dir::Etc::PreferencesParts="$apt_dir/conf.d"
    -o Dir::State="$apt_dir/state" -o Dir::State::status="$apt_dir/state/status"
    -o Dir::Cache="$apt_dir/cache" -o Debug::NoLocking=1 -o APT::Architecture=amd64
    -o Acquire::Languages=none -o APT::Install-Recommends=false -o APT::Get::List-Cleanup=false
)

# The packages of SUITE to unpack, as name=version: libamdhip64-dev alone (its other dependencies
# are headers the probe does not include) and the runtime's dependency closure, resolved by apt
# as if installing on an empty system with SUITE preferred.
closure() {
    local suite=$1 dev runtime
    dev=$(apt-cache "${apt_opts[@]}" show "libamdhip64-dev/$suite" 2>/dev/null | awk '/^Version:/ {print $2; exit}')
    [ -n "$dev" ] || return 1
    echo "libamdhip64-dev=$dev"
    runtime=$(apt-get "${apt_opts[@]}" -s -t "$suite" install "${runtime_pkg[$suite]}/$suite" 2>&1) ||
        { echo "$runtime" >&2; return 1; }
    awk '/^Inst / {v = $3; gsub(/[()]/, "", v); print $2 "=" v}' <<<"$runtime"
}

# A list of packages per suite is kept with the .debs; it is refreshed only when one is missing.
need_update=0
for suite in "${suites[@]}"; do
    [ -n "${runtime_pkg[$suite]:-}" ] || die "unknown suite $suite (trixie, sid or experimental)"
    list=$base/$suite.packages
    if [ ! -s "$list" ]; then need_update=1; continue; fi
    while read -r pv; do
        ls "$apt_dir/debs/${pv%%=*}_"*.deb >/dev/null 2>&1 || need_update=1
    done <"$list"
done

if [ $need_update = 1 ]; then
    if ! apt-get "${apt_opts[@]}" -q --error-on=any update >"$apt_dir/update.log" 2>&1; then
        grep -E '^(E|Err):' "$apt_dir/update.log" | sed 's/^/    /' >&2
        die "apt-get update against $mirror failed (is the Debian mirror reachable?)"
    fi
    for suite in "${suites[@]}"; do
        closure "$suite" >"$base/$suite.packages.new" || die "cannot resolve libamdhip64-dev and ${runtime_pkg[$suite]} in $suite"
        mv "$base/$suite.packages.new" "$base/$suite.packages"
        mapfile -t wanted <"$base/$suite.packages"
        # apt-get download writes into the current directory.
        (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" -q download "${wanted[@]}" >"$apt_dir/download-$suite.log" 2>&1) || {
            sed 's/^/    /' "$apt_dir/download-$suite.log" >&2
            die "downloading the $suite packages from $mirror failed"
        }
    done
fi

for suite in "${suites[@]}"; do
    root=$base/$suite/root
    stamp=$base/$suite/unpacked
    if [ ! -e "$stamp" ] || ! cmp -s "$stamp" "$base/$suite.packages"; then
        rm -rf "$base/$suite"
        mkdir -p "$root"
        while read -r pv; do
            name=${pv%%=*} version=${pv#*=}
            # Debian file names carry the version with the epoch's colon as %3a.
            deb=$(ls "$apt_dir/debs/${name}_${version/:/%3a}_"*.deb 2>/dev/null | head -n 1)
            [ -n "$deb" ] || die "$name $version was not downloaded"
            dpkg-deb -x "$deb" "$root"
        done <"$base/$suite.packages"
        cp "$base/$suite.packages" "$stamp"
    fi
    version=$(awk -F= '$1 == "libamdhip64-dev" {print $2}' "$base/$suite.packages")
    echo "$suite $version $root"
done
