#!/usr/bin/env bash
# Smoke test of the frozen app, after `packaging/build.sh linux`:
#   1. the bundle in dist/kernelswarm: `kernelswarm --version` (matches pyproject.toml), no NVIDIA
#      driver library inside, `kernelswarm selftest` (storage, replay run, CPU compile-and-run,
#      NVRTC), the GUI started offscreen until its main window is up, with its output and log
#      checked for import errors and missing Qt plugins; its sandbox lines equal the source
#      install's, the compile preview and import-kt run from it, and (as root, with setpriv)
#      your own kernel runs as nobody in a cell with every wall the probe promised;
#   2. the .deb installed into a scratch root (dpkg --instdir, no container) and run the same
#      way through /usr/bin/kernelswarm, then removed: nothing may be left behind;
#   3. the .tar.gz unpacked and its `kernelswarm --version` run.
# Needs no display and no GPU. Prints one line per check; exits 1 if any failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIST="${DIST:-dist}"
VERSION="$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/kernelswarm-smoke.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
FAILED=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; FAILED=1; }
# build.sh leaves an archive out, and says so in BUILD_INFO, when the disk is too short for it
left_out() { grep -s "^left_out $1 " "$DIST/BUILD_INFO" | cut -d' ' -f3-; }

# Lines that mean the frozen app lacks something: a module, a shared library, a Qt plugin.
BROKEN='Traceback|ModuleNotFoundError|ImportError|No module named|cannot open shared object|Cannot load library|qt\.qpa\.plugin|Could not (find|load) the Qt platform plugin|This application failed to start|Failed to execute script|Failed to load'

# A home of its own per run: the app's database, settings and log start empty and are read here.
fresh_home() {
  local home="$SCRATCH/home-$1"
  rm -rf "$home" && mkdir -p "$home"
  echo "$home"
}
with_home() {  # with_home HOME CMD...
  local home="$1"; shift
  env HOME="$home" XDG_DATA_HOME="$home/data" XDG_STATE_HOME="$home/state" \
      XDG_CACHE_HOME="$home/cache" XDG_CONFIG_HOME="$home/config" QT_QPA_PLATFORM=offscreen \
      KERNELSWARM_DB="$home/history.sqlite" "$@"
}

check_app() {  # check_app LABEL EXE   (bare, EXE opens the GUI, as the desktop entry runs it)
  local label="$1" cli="$2" home out started
  out="$("$cli" --version 2>&1)"
  if [[ "$out" == "kernelswarm $VERSION" ]]; then pass "$label --version: $out"
  else fail "$label --version: expected 'kernelswarm $VERSION', got '$out'"; fi

  home="$(fresh_home "$label-selftest")"
  out="$(with_home "$home" timeout 300 "$cli" selftest 2>&1)"; local rc=$?
  echo "$out" | sed 's/^/      /'
  if [[ $rc -eq 0 ]] && ! grep -q '^FAIL' <<<"$out" && grep -q '^PASS  storage' <<<"$out" \
      && grep -q '^PASS  replay' <<<"$out"; then
    pass "$label selftest"
  else
    fail "$label selftest (exit $rc)"
  fi

  home="$(fresh_home "$label-gui")"
  started="$(date +%s.%N)"
  out="$(with_home "$home" KERNELSWARM_STARTUP_PROBE="$started" timeout 120 "$cli" 2>&1)"; rc=$?
  local log; log="$(cat "$home"/state/kernelswarm/log/*.log 2>/dev/null)"
  if [[ $rc -ne 0 ]] || ! grep -q 'startup probe: main window up' <<<"$out"; then
    fail "$label GUI: no main window (exit $rc): $(tail -c 2000 <<<"$out")"
  elif grep -E -q "$BROKEN" <<<"$out"$'\n'"$log"; then
    fail "$label GUI: came up, but output or log shows a missing part:"
    grep -E "$BROKEN" <<<"$out"$'\n'"$log" | head -20 | sed 's/^/      /'
  else
    pass "$label GUI: $(grep -o 'main window up after [0-9.]* s' <<<"$out") (cold start, offscreen)"
  fi
}

# ---- 1. the bundle ---------------------------------------------------------------------------
BUNDLE="$DIST/kernelswarm"
if [[ ! -x "$BUNDLE/kernelswarm" ]]; then
  fail "no bundle at $BUNDLE: run packaging/build.sh linux first"
  exit 1
fi
driver="$(find "$BUNDLE" -type f \( -name 'libcuda.so*' -o -name 'libnvidia-*' \) -print)"
if [[ -z "$driver" ]]; then pass "bundle holds no NVIDIA driver library"
else fail "bundle holds driver libraries: $driver"; fi
check_app bundle "$BUNDLE/kernelswarm"

# The bundle's own processes (cells, compile helper, probe) start as a source install's do,
# with the same walls; before, it reported every wall "partial: frozen build".
home="$(fresh_home walls)"
walls="$(with_home "$home" timeout 120 "$BUNDLE/kernelswarm" devices 2>&1 | grep '^sandbox ')"
if source_walls="$(with_home "$home" timeout 120 python -m app devices 2>&1)"; then
  source_walls="$(grep '^sandbox ' <<<"$source_walls")"
  if [[ -n "$walls" && "$walls" == "$source_walls" ]]; then
    pass "bundle sandbox: the same $(wc -l <<<"$walls") walls as the source install"
  else
    fail "bundle sandbox differs from the source install's:"
    diff <(echo "$source_walls") <(echo "$walls") | head -20 | sed 's/^/      /'
  fi
elif [[ -n "$walls" ]] && ! grep -q 'frozen' <<<"$walls"; then
  pass "bundle sandbox: $(wc -l <<<"$walls") walls (no source install here to compare with)"
else
  fail "bundle sandbox: $walls"
fi

# The custom-kernel page's "compile one configuration" (a child process of the window)
out="$(with_home "$home" timeout 120 "$BUNDLE/kernelswarm" --kernelswarm-entry \
       app.gpu.custom_reference.preview:main resources/goals/custom/pnpoly_c/goal.toml 2>&1)"
if [[ "$out" == configuration:* ]]; then pass "bundle compile preview: ${out%%$'\n'*}"
else fail "bundle compile preview: $(tail -c 600 <<<"$out")"; fi

# A colleague's Kernel Tuner script, imported in its cell by the bundle (the cell is the
# bundle's executable too; before, it only got the CLI's usage error). Kernel Tuner is not in
# the bundle: its helper modules are stood in for (app/kt_import/absent.py).
home="$(fresh_home import-kt)"
mkdir -p "$home/colleague"
cat > "$home/colleague/tune.py" <<'PY'
from collections import OrderedDict
import numpy as np
from kernel_tuner import tune_kernel
from kernel_tuner.file_utils import store_output_file  # as Kernel Tuner's own example does
kernel = "void vector_add(float *c, const float *a, const float *b, int n) {\n" \
         "    for (int i = 0; i < n; i++) c[i] = a[i] + b[i];\n}\n"
a = np.random.randn(1000).astype(np.float32)
b = np.random.randn(1000).astype(np.float32)
tune_kernel("vector_add", kernel, 1000, [np.zeros_like(a), a, b, np.int32(1000)],
            OrderedDict(block=[1, 2]), lang="C", answer=[a + b, None, None, None])
PY
out="$(with_home "$home" timeout 300 "$BUNDLE/kernelswarm" import-kt "$home/colleague/tune.py" \
       -o "$home/goal" 2>&1)"
if grep -q 'vector_add' "$home/goal/goal.toml" 2>/dev/null; then
  pass "bundle import-kt: a Kernel Tuner script imported in its sandbox cell"
else
  fail "bundle import-kt: $(tail -c 600 <<<"$out")"
fi

# A user who is not root (where this runs as root and nobody can reach the bundle): your own
# kernel's CPU cell gets the walls the probe promises. A cell with threads cannot enter a user
# namespace: it once unpickled its goal (numpy) first, and had no network, PID or mount one.
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null \
    && "${NOBODY[@]}" "$BUNDLE/kernelswarm" --version >/dev/null 2>&1; then
  shared="$(mktemp -d "${TMPDIR:-/tmp}/kernelswarm-nobody.XXXXXX")"
  cp -r resources/goals/custom/pnpoly_c "$shared/" && chmod -R a+rwX "$shared"
  as_nobody() { "${NOBODY[@]}" env -i PATH=/usr/bin:/bin HOME="$shared" timeout 300 "$@" 2>&1; }
  promised="$(as_nobody "$BUNDLE/kernelswarm" devices | grep -c '^sandbox network *on')"
  out="$(as_nobody "$BUNDLE/kernelswarm" run "$shared/pnpoly_c/goal.toml" --max-evals 2 \
         --db "$shared/h.sqlite" --quiet)"
  if [[ "$promised" -eq 1 ]] && grep -q 'unshare refused' <<<"$out"; then
    fail "bundle as nobody: the cell lacks walls the probe promised: $(grep 'unshare' <<<"$out" | head -3)"
  elif grep -q '^best time' <<<"$out"; then
    pass "bundle as nobody: your own kernel ran in a cell with the probe's walls"
  else
    fail "bundle as nobody: $(tail -c 600 <<<"$out")"
  fi
  rm -rf "$shared"
else
  echo "skip  bundle as nobody (not root, no setpriv, or nobody cannot reach the bundle)"
fi

# ---- 2. the .deb in a scratch root -----------------------------------------------------------
DEB="$(ls "$DIST"/kernelswarm_"$VERSION"_*.deb 2>/dev/null | grep -v nocuda | head -1)"
[[ -n "$DEB" ]] || DEB="$(ls "$DIST"/kernelswarm_"$VERSION"_*.deb 2>/dev/null | head -1)"
if [[ -z "$DEB" && -n "$(left_out deb)" ]]; then
  echo "skip  .deb: build.sh left it out ($(left_out deb))"
elif [[ -z "$DEB" ]]; then
  fail "no .deb for $VERSION in $DIST"
else
  R="$SCRATCH/root"
  mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" && touch "$R/var/lib/dpkg/status"
  dpkg_r() { dpkg --instdir="$R" --admindir="$R/var/lib/dpkg" --force-script-chrootless \
                  --force-depends --force-not-root "$@"; }
  if out="$(dpkg_r -i "$DEB" 2>&1)"; then
    pass "dpkg -i $(basename "$DEB") into a scratch root"
    for f in usr/bin/kernelswarm usr/share/applications/kernelswarm.desktop \
             usr/share/icons/hicolor/256x256/apps/kernelswarm.png; do
      [[ -e "$R/$f" ]] || fail ".deb lacks /$f"
    done
    if command -v desktop-file-validate >/dev/null; then
      desktop-file-validate "$R/usr/share/applications/kernelswarm.desktop" \
        && pass "desktop entry valid" || fail "desktop entry invalid"
    fi
    check_app deb "$R/usr/bin/kernelswarm"
    if out="$(dpkg_r -r kernelswarm 2>&1)"; then
      left="$(cd "$R" && find . -path ./var/lib/dpkg -prune -o \( -type f -o -type l \) -print)"
      if [[ -z "$left" ]]; then pass "dpkg -r kernelswarm left nothing behind"
      else fail "dpkg -r left files behind: $(head -5 <<<"$left")"; fi
    else
      fail "dpkg -r kernelswarm: $out"
    fi
  else
    fail "dpkg -i $DEB: $out"
  fi
fi

# ---- 3. the .tar.gz --------------------------------------------------------------------------
TARBALL="$(ls "$DIST"/kernelswarm-"$VERSION"-linux-*.tar.gz 2>/dev/null | head -1)"
if [[ -z "$TARBALL" && -n "$(left_out tar.gz)" ]]; then
  echo "skip  .tar.gz: build.sh left it out ($(left_out tar.gz))"
elif [[ -z "$TARBALL" ]]; then
  fail "no .tar.gz for $VERSION in $DIST"
else
  mkdir -p "$SCRATCH/tar" && tar -C "$SCRATCH/tar" -xzf "$TARBALL"
  out="$("$SCRATCH/tar/kernelswarm-$VERSION/kernelswarm" --version 2>&1)"
  if [[ "$out" == "kernelswarm $VERSION" ]]; then pass "$(basename "$TARBALL") unpacked: $out"
  else fail "$(basename "$TARBALL") unpacked: --version said '$out'"; fi
fi

if [[ $FAILED -eq 0 ]]; then echo "smoke: all checks passed"; else echo "smoke: FAILED"; fi
exit $FAILED
