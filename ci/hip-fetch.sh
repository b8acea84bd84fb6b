#!/usr/bin/env bash
# Downloads Debian's real HIP headers and runtimes of the ROCm major versions the library supports
# besides the system's own 5.2 (ci/setup.sh installs that one), without installing anything:
# libamdhip64-dev and libamdhip64-N of each major N below, at the version pinned for it.
#
#   ROCm 5  5.7.1-6+deb13u1  (trixie)
#   ROCm 6  6.4.3-5          (sid)
#   ROCm 7  7.2.4-1~exp2     (experimental)
#
# The pinned version is looked for in trixie, sid and experimental alike. Debian moves packages
# between them, and drops old versions (there is no snapshot archive to fall back on): when the
# pinned version is found in none, the newest version of that major found in them is taken and
# the script says so on stderr, so that the checks of ci/hip-versions.sh run against the new
# header (that is what they are for); then update the pin. A major found in none fails.
#
# Each major's packages are unpacked with dpkg-deb -x into target/real-hip/rocm-N/root, with the
# runtime's whole dependency closure (its own libc6, libstdc++6, LLVM, HSA runtime, ...): these
# libraries need a newer C library than the build machine's, so the checks run them under that
# root's own dynamic loader (target/real-hip/rocm-N/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2).
#
# apt runs against a private state under target/real-hip/apt: its own configuration file
# (APT_CONFIG, so that nothing of /etc/apt, its apt.conf.d hooks included, is read), source list
# (RCB_DEBIAN_MIRROR, default http://deb.debian.org/debian), lists, cache and an empty dpkg status.
# The system's apt state and installed packages are never touched, and the system's own lists
# need not exist. The .deb files stay there: a rerun with every package of the pinned versions
# present is offline. Prints one line per major: MAJOR SUITE VERSION ROOT.
#
#   ci/hip-fetch.sh [MAJOR...]     (default: 5 6 7)
set -euo pipefail
cd "$(dirname "$0")/.."
base=$PWD/target/real-hip
apt_dir=$base/apt
mirror=${RCB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suites=(trixie sid experimental)
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(5 6 7)

declare -A pinned=([5]=5.7.1-6+deb13u1 [6]=6.4.3-5 [7]=7.2.4-1~exp2)

die() { echo "ci/hip-fetch.sh: $*" >&2; exit 1; }
for tool in apt-get apt-cache dpkg-deb dpkg; do command -v "$tool" >/dev/null || die "$tool is missing (a Debian system is needed)"; done
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "$keyring is missing (package debian-archive-keyring)"
for major in "${majors[@]}"; do
    [ -n "${pinned[$major]:-}" ] || die "no pinned version for ROCm major $major (known: ${!pinned[*]})"
done

mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/conf.d" "$apt_dir/debs"
: >"$apt_dir/state/status"
for s in "${suites[@]}"; do
    echo "deb [signed-by=$keyring] $mirror $s main"
done >"$apt_dir/sources.list"
# Read first (APT_CONFIG): it points the parts directory and the main file, which apt reads next,
# at an empty directory and a file that does not exist, so no other configuration applies. The
# indexes are still checked against the archive key; their expiry date is not, so that a mirror
# that serves a frozen copy of the archive (as some CI proxies do) works: nothing is installed,
# the packages are only read.
cat >"$apt_dir/apt.conf" <<EOF
Dir::Etc::Main "$apt_dir/none.conf";
Dir::Etc::Parts "$apt_dir/conf.d";
Dir::Etc::SourceList "$apt_dir/sources.list";
Dir::Etc::SourceParts "$apt_dir/conf.d";
Dir::Etc::Preferences "$apt_dir/none.pref";
Dir::Etc::PreferencesParts "$apt_dir/conf.d";
Dir::State "$apt_dir/state";
Dir::State::status "$apt_dir/state/status";
Dir::Cache "$apt_dir/cache";
Debug::NoLocking "true";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Get::List-Cleanup "false";
EOF
export APT_CONFIG=$apt_dir/apt.conf

# The version of libamdhip64-dev of MAJOR to take and its suite, as "SUITE VERSION": the pinned
# one wherever it is, else the newest of that major in any suite (said on stderr).
choose() {
    local major=$1 pin=${pinned[$1]} listed suite version best="" best_suite=""
    listed=$(apt-cache madison libamdhip64-dev 2>/dev/null |
        awk -F'|' '{gsub(/ /, "", $2); split($3, w, " "); split(w[2], s, "/"); print s[1], $2}')
    while read -r suite version; do
        [ -n "$version" ] || continue
        if [ "$version" = "$pin" ]; then
            echo "$suite $version"
            return 0
        fi
        # The upstream major: the version without its epoch, up to the first dot.
        local upstream=${version#*:}
        [ "${upstream%%.*}" = "$major" ] || continue
        if [ -z "$best" ] || dpkg --compare-versions "$version" gt "$best"; then
            best=$version best_suite=$suite
        fi
    done <<<"$listed"
    [ -n "$best" ] || { echo "ci/hip-fetch.sh: ROCm $major: libamdhip64-dev $pin is not in ${suites[*]} at $mirror, and no other $major.x version is either" >&2; return 1; }
    echo "ci/hip-fetch.sh: ROCm $major: libamdhip64-dev $pin is no longer in ${suites[*]} at $mirror; taking $best from $best_suite, the newest $major.x there (update the pin in ci/hip-fetch.sh)" >&2
    echo "$best_suite $best"
}

# The packages to unpack for MAJOR at VERSION from SUITE, as name=version: libamdhip64-dev alone
# (its other dependencies are headers the probe does not include) and the runtime's dependency
# closure, resolved by apt as if installing on an empty system with SUITE preferred.
closure() {
    local major=$1 suite=$2 version=$3 runtime
    echo "libamdhip64-dev=$version"
    runtime=$(apt-get -s -t "$suite" install "libamdhip64-$major=$version" 2>&1) || { echo "$runtime" >&2; return 1; }
    awk '/^Inst / {v = $3; gsub(/[()]/, "", v); print $2 "=" v}' <<<"$runtime"
}

# Each major's list of packages is kept with the .debs, with the pin it was resolved for; it is
# resolved again only when the pin changed or a package is missing.
need_update=0
for major in "${majors[@]}"; do
    list=$base/rocm-$major.packages
    if [ ! -s "$list" ] || ! [ "$(cat "$base/rocm-$major.pin" 2>/dev/null)" = "${pinned[$major]}" ]; then need_update=1; continue; fi
    while read -r pv; do
        ls "$apt_dir/debs/${pv%%=*}_"*.deb >/dev/null 2>&1 || need_update=1
    done <"$list"
done

if [ $need_update = 1 ]; then
    if ! apt-get -q --error-on=any update >"$apt_dir/update.log" 2>&1; then
        grep -E '^(E|Err):' "$apt_dir/update.log" | sed 's/^/    /' >&2
        die "apt-get update against $mirror failed (is the Debian mirror reachable? RCB_DEBIAN_MIRROR names another)"
    fi
    for major in "${majors[@]}"; do
        read -r suite version < <(choose "$major") || die "ROCm $major cannot be fetched"
        [ -n "${version:-}" ] || die "ROCm $major cannot be fetched"
        closure "$major" "$suite" "$version" >"$base/rocm-$major.packages.new" ||
            die "cannot resolve libamdhip64-dev and libamdhip64-$major $version in $suite"
        mv "$base/rocm-$major.packages.new" "$base/rocm-$major.packages"
        echo "$suite" >"$base/rocm-$major.suite"
        echo "${pinned[$major]}" >"$base/rocm-$major.pin"
        mapfile -t wanted <"$base/rocm-$major.packages"
        # apt-get download writes into the current directory.
        (cd "$apt_dir/debs" && apt-get -q download "${wanted[@]}" >"$apt_dir/download-$major.log" 2>&1) || {
            sed 's/^/    /' "$apt_dir/download-$major.log" >&2
            die "downloading the ROCm $major packages from $mirror failed"
        }
    done
fi

for major in "${majors[@]}"; do
    root=$base/rocm-$major/root
    stamp=$base/rocm-$major/unpacked
    if [ ! -e "$stamp" ] || ! cmp -s "$stamp" "$base/rocm-$major.packages"; then
        rm -rf "$base/rocm-$major"
        mkdir -p "$root"
        while read -r pv; do
            name=${pv%%=*} version=${pv#*=}
            # Debian file names carry the version with the epoch's colon as %3a.
            deb=$(ls "$apt_dir/debs/${name}_${version/:/%3a}_"*.deb 2>/dev/null | head -n 1)
            [ -n "$deb" ] || die "$name $version was not downloaded"
            dpkg-deb -x "$deb" "$root"
        done <"$base/rocm-$major.packages"
        cp "$base/rocm-$major.packages" "$stamp"
    fi
    version=$(awk -F= '$1 == "libamdhip64-dev" {print $2}' "$base/rocm-$major.packages")
    [ "$version" = "${pinned[$major]}" ] ||
        echo "ci/hip-fetch.sh: ROCm $major: using $version, not the pinned ${pinned[$major]} (gone from the archive)" >&2
    echo "$major $(cat "$base/rocm-$major.suite") $version $root"
done
