#!/usr/bin/env bash
# The Debian package's test (CTest: package_deb; packaging/README.md). Builds the package with
# cpack from a tree that is already built (its binary as it is: the dev build's in CI, so no
# second build), unpacks it with dpkg-deb into a scratch root and checks what an install would
# put where: the control fields, every file with its owner and mode, the conffiles, the
# maintainer scripts, that each unit's flags (its own and its env file's) are flags of the
# packaged binary, the units' hardening against what the agent's workers need, and, where
# systemd-analyze is installed, `systemd-analyze verify` on the units pointed at the scratch
# root's binary and env files, and their `systemd-analyze security` exposure.
#
#   bash packaging/test_package.sh build/dev
set -euo pipefail

build=$(cd "${1:?usage: test_package.sh BUILD_DIR (a configured and built tree)}" && pwd)
source_dir=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/package-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root
control=$scratch/control
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
step() { echo "test_package: +${SECONDS}s $*"; }

[ -x "$build/bin/tessera" ] || { echo "FAIL: $build/bin/tessera is not built" >&2; exit 1; }
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing: run scripts/setup.sh" >&2; exit 1; }
done

# zstd rather than the release's xz and no strip: the same package, built in seconds from a
# sanitized binary several times the release's size.
step "cpack over $build"
if ! cpack --config "$build/CPackConfig.cmake" -B "$scratch/out" \
    -D CPACK_DEBIAN_COMPRESSION_TYPE=zstd -D CPACK_STRIP_FILES=OFF >"$scratch/cpack.log" 2>&1; then
  cat "$scratch/cpack.log" >&2
  echo "FAIL: cpack" >&2
  exit 1
fi
debs=("$scratch"/out/tessera_*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || { echo "FAIL: not one .deb: ${debs[*]}" >&2; exit 1; }
deb=${debs[0]}
echo "test_package: $(basename "$deb"), $(($(stat -c %s "$deb") / 1024)) KiB"

step "control fields"
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = tessera ] || fail "Package: '$(field Package)', want tessera"
[ -n "$version" ] && [ "$(field Version)" = "$version" ] ||
  fail "Version: '$(field Version)', want CPackConfig's '$version'"
[ "$(field Architecture)" = "$(dpkg --print-architecture)" ] ||
  fail "Architecture: '$(field Architecture)', want $(dpkg --print-architecture)"
depends=$(field Depends)
# passwd is ours (postinst's useradd); libc6 and libstdc++6 come from dpkg-shlibdeps.
for dep in passwd libc6 libstdc++6; do
  [[ ", $depends," == *", $dep"[\ ,]* ]] || fail "Depends: '$depends' lacks $dep"
done
[ -n "$(field Maintainer)" ] || fail "Maintainer: empty"

step "files, owners and modes"
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$control"
# Every entry of the data archive: mode, owner/group, path (dirs end in /).
dpkg-deb -c "$deb" | awk '{print $1, $2, $6}' >"$scratch/listing"
while read -r mode owner path; do
  [ "$owner" = root/root ] || fail "$path: owner $owner, want root/root"
  case "$mode" in
    d*) [ "$mode" = drwxr-xr-x ] || fail "$path: mode $mode, want drwxr-xr-x" ;;
    -*) want=-rw-r--r--
      [ "$path" = ./usr/bin/tessera ] && want=-rwxr-xr-x
      [ "$mode" = "$want" ] || fail "$path: mode $mode, want $want" ;;
    *) fail "$path: $mode is neither a file nor a directory" ;;
  esac
done <"$scratch/listing"
# Exactly these files, no more: the binary, the units, the env files, the SDK, the docs.
{
  echo ./usr/bin/tessera
  for s in head agent router; do
    echo "./usr/lib/systemd/system/tessera-$s.service"
    echo "./etc/tessera/$s.env"
  done
  for py in "$source_dir"/python/tessera/*.py; do
    echo "./usr/lib/python3/dist-packages/tessera/$(basename "$py")"
  done
  echo ./usr/share/doc/tessera/deploy.md
  echo ./usr/share/doc/tessera/discovery.md
} | sort >"$scratch/want-files"
awk '$1 !~ /^d/ {print $3}' "$scratch/listing" | sort >"$scratch/got-files"
if ! diff -u "$scratch/want-files" "$scratch/got-files" >"$scratch/files.diff"; then
  cat "$scratch/files.diff" >&2
  fail "the package's files differ from the list above (- wanted, + packaged)"
fi
cmp -s "$root/usr/bin/tessera" "$build/bin/tessera" || fail "usr/bin/tessera is not $build/bin/tessera"
if command -v python3 >/dev/null &&
    ! PYTHONPATH="$root/usr/lib/python3/dist-packages" python3 -c 'import tessera.client, tessera.worker'; then
  fail "the SDK in usr/lib/python3/dist-packages does not import"
fi

step "conffiles and maintainer scripts"
printf '/etc/tessera/%s.env\n' agent head router >"$scratch/want-conffiles"
if ! diff -u "$scratch/want-conffiles" <(sort "$control/conffiles") >&2; then
  fail "conffiles differ (- wanted, + packaged)"
fi
while read -r conffile; do
  [ -f "$root$conffile" ] || fail "conffile $conffile is not in the package"
done <"$control/conffiles"
for script in postinst prerm postrm; do
  [ "$(stat -c %a "$control/$script")" = 755 ] || fail "$script: mode $(stat -c %a "$control/$script")"
  sh -n "$control/$script" || fail "$script: sh -n"
done
grep -q 'useradd --system' "$control/postinst" || fail "postinst makes no tessera system user"

step "units: commands, flags and hardening"
# The value of a unit's setting (the last one given).
setting() { sed -n "s/^$2=//p" "$1" | tail -n 1; }
for s in head agent router; do
  unit=$root/usr/lib/systemd/system/tessera-$s.service
  env_file=$root/etc/tessera/$s.env
  [ "$(setting "$unit" User)" = tessera ] || fail "tessera-$s: User is not tessera"
  [ "$(setting "$unit" EnvironmentFile)" = "/etc/tessera/$s.env" ] ||
    fail "tessera-$s: EnvironmentFile is not /etc/tessera/$s.env"
  [ "$(setting "$unit" NoNewPrivileges)" = yes ] || fail "tessera-$s: NoNewPrivileges is not yes"
  [ "$(setting "$unit" ProtectSystem)" = strict ] || fail "tessera-$s: ProtectSystem is not strict"
  exec_start=$(setting "$unit" ExecStart)
  read -r -a argv <<<"$exec_start"
  [ "${argv[0]}" = /usr/bin/tessera ] && [ "${argv[1]}" = "$s" ] ||
    fail "tessera-$s: ExecStart '$exec_start' does not run /usr/bin/tessera $s"
  # The one variable the unit expands, and its value in the env file (split as systemd does).
  var=$(grep -o '\$[A-Z_]*' <<<"$exec_start" | tr -d '$')
  [ "$var" = "TESSERA_${s^^}_FLAGS" ] || fail "tessera-$s: ExecStart expands '$var'"
  [ "$(grep -c "^$var=" "$env_file")" = 1 ] || fail "$s.env: not one $var= line"
  read -r -a env_argv <<<"$(sed -n "s/^$var=//p" "$env_file")"
  help=$("$root/usr/bin/tessera" "$s" --help 2>&1) || fail "tessera $s --help exited non-zero"
  for arg in "${argv[@]:2}" "${env_argv[@]}"; do
    [[ "$arg" == --* ]] || continue
    grep -q -- "${arg%%=*}\b" <<<"$help" || fail "tessera-$s: $arg is not a flag of tessera $s"
  done
done
agent_unit=$root/usr/lib/systemd/system/tessera-agent.service
# What the agent's workers need: stopping through the agent (their grace), their devices,
# JIT compilers, and surviving one worker's OOM kill.
[ "$(setting "$agent_unit" KillMode)" = mixed ] || fail "tessera-agent: KillMode is not mixed"
[ "$(setting "$agent_unit" PrivateDevices)" = no ] || fail "tessera-agent: PrivateDevices is not no"
[ "$(setting "$agent_unit" MemoryDenyWriteExecute)" = no ] ||
  fail "tessera-agent: MemoryDenyWriteExecute is not no"
[ "$(setting "$agent_unit" OOMPolicy)" = continue ] || fail "tessera-agent: OOMPolicy is not continue"
# Any device allow-list (ProtectClock=yes implies one) closes the accelerators to the workers.
[ "$(setting "$agent_unit" ProtectClock)" = no ] || fail "tessera-agent: ProtectClock is not no"
if grep -q '^\(DeviceAllow\|DevicePolicy\)=' "$agent_unit"; then
  fail "tessera-agent: a device allow-list would close the accelerators to the workers"
fi
grep -q '^ReadWritePaths=/var/lib/tessera\b' "$agent_unit" ||
  fail "tessera-agent: /var/lib/tessera is not writable"
if grep -q '^\(SystemCallFilter\|RestrictAddressFamilies\|RestrictNamespaces\)=' "$agent_unit"; then
  fail "tessera-agent: a system call, socket or namespace filter would apply to the workers"
fi

if command -v systemd-analyze >/dev/null; then
  step "systemd-analyze verify"
  # The units as installed, but naming the scratch root's binary and env files.
  mkdir "$scratch/units"
  for s in head agent router; do
    sed -e "s|/usr/bin/tessera|$root/usr/bin/tessera|" -e "s|/etc/tessera/|$root/etc/tessera/|g" \
      "$root/usr/lib/systemd/system/tessera-$s.service" >"$scratch/units/tessera-$s.service"
  done
  # It warns of an unknown or misspelled setting with exit code 0: any output fails.
  if ! systemd-analyze verify "$scratch"/units/*.service >"$scratch/verify.log" 2>&1 ||
      [ -s "$scratch/verify.log" ]; then
    cat "$scratch/verify.log" >&2
    fail "systemd-analyze verify"
  fi
  step "systemd-analyze security (exposure: 0 best, 10 worst)"
  for s in head router agent; do
    exposure=$(systemd-analyze security --offline=true "$scratch/units/tessera-$s.service" 2>&1 |
      sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    echo "test_package: tessera-$s exposure $exposure"
    # The head and the router run no user code: they must stay well hardened.
    if [ "$s" != agent ] && ! awk -v e="$exposure" 'BEGIN { exit !(e != "" && e < 3.0) }'; then
      fail "tessera-$s: exposure '$exposure', want below 3.0"
    fi
  done
else
  step "systemd-analyze is not installed: units not verified"
fi

step "done, $failures failures"
[ "$failures" -eq 0 ]
