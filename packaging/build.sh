#!/usr/bin/env bash
# Build KernelSwarm's installers.
#
#   packaging/build.sh linux [OPTIONS]    bundle, .tar.gz, .deb (and an AppImage when
#                                         appimagetool is on PATH) under dist/
#   packaging/build.sh windows [OPTIONS]  bundle + NSIS installer (on Windows, Git Bash/MSYS)
#   packaging/build.sh macos [OPTIONS]    KernelSwarm.app + .dmg (on macOS)
#
# --no-cuda       leave CuPy and the CUDA libraries out (cpu and replay backends only)
# --bundle DIR    package an existing PyInstaller bundle instead of running PyInstaller
# --dry-run       print the version and the artifacts it would make, build nothing
#
# Python: $PYTHON, else .venv/bin/python, else a fresh build/venv with `pip install .[gpu,package]`
# (a clean checkout); PyInstaller (pyproject's `package` extra) is added when missing.
# Versions come from pyproject.toml. Artifacts land in $DIST (default dist/);
# $DIST/BUILD_INFO records what was built and how long it took.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "build.sh: error: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${1:-}"; shift || true
CUDA=1 DRY_RUN=0 PREBUILT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-cuda) CUDA=0 ;;
    --dry-run) DRY_RUN=1 ;;
    --bundle) [[ $# -ge 2 ]] || die "--bundle needs a folder"; PREBUILT="$2"; shift ;;
    -h|--help) usage ;;
    *) die "unknown option '$1'" ;;
  esac
  shift
done
case "$TARGET" in linux|windows|macos) ;; -h|--help|"") usage ;; *) die "unknown target '$TARGET' (linux, windows or macos)" ;; esac

START=$(date +%s)
step() { echo "== [$(( $(date +%s) - START )) s] $*"; }

# ---- Python with the app and PyInstaller -------------------------------------------------------
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python
  elif [[ -x .venv/Scripts/python.exe ]]; then PYTHON=.venv/Scripts/python.exe
  else
    step "no .venv: making build/venv from pyproject.toml"
    python3 -m venv build/venv
    PYTHON=build/venv/bin/python
    extras="package"; [[ $CUDA == 1 ]] && extras="gpu,package"
    "$PYTHON" -m pip install --quiet --upgrade pip
    "$PYTHON" -m pip install --quiet ".[${extras}]"
  fi
fi

VERSION="$("$PYTHON" - <<'EOF'
import sys
if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib
print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])
EOF
)"
APP_VERSION="$("$PYTHON" -c 'import app; print(app.__version__)')"
[[ "$VERSION" == "$APP_VERSION" ]] || die "pyproject.toml says version $VERSION but app/__init__.py says $APP_VERSION"
FLAVOUR=""; [[ $CUDA == 0 ]] && FLAVOUR="-nocuda"
ARCH="$(uname -m)"
DEB_ARCH="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
DIST="${DIST:-dist}"
TARBALL="$DIST/kernelswarm-$VERSION-linux-$ARCH$FLAVOUR.tar.gz"
DEB="$DIST/kernelswarm_${VERSION}_${DEB_ARCH}$FLAVOUR.deb"
APPIMAGE="$DIST/KernelSwarm-$VERSION-$ARCH$FLAVOUR.AppImage"
NSIS_EXE="$DIST/KernelSwarm-$VERSION-windows-x64$FLAVOUR-setup.exe"
DMG="$DIST/KernelSwarm-$VERSION-macos-$ARCH$FLAVOUR.dmg"
step "KernelSwarm $VERSION, target $TARGET, CUDA libraries: $([[ $CUDA == 1 ]] && echo bundled || echo left out)"
if [[ $DRY_RUN == 1 ]]; then
  echo "version $VERSION"
  case "$TARGET" in
    linux) printf 'would make %s\n' "$DIST/kernelswarm/" "$TARBALL" "$DEB" "$APPIMAGE (if appimagetool)" ;;
    windows) printf 'would make %s\n' "$DIST/kernelswarm/" "$NSIS_EXE" ;;
    macos) printf 'would make %s\n' "$DIST/KernelSwarm.app" "$DMG" ;;
  esac
  exit 0
fi

# ---- icons, then the bundle --------------------------------------------------------------------
ICONS=build/icons
"$PYTHON" packaging/render_icons.py "$ICONS" 48 128 256 512 >/dev/null
export KERNELSWARM_ICON_PNG="$ROOT/$ICONS/kernelswarm-512.png" KERNELSWARM_BUNDLE_CUDA=$CUDA

mkdir -p "$DIST"
if [[ -n "$PREBUILT" ]]; then
  BUNDLE="$PREBUILT"
  [[ -x "$BUNDLE/kernelswarm" || -f "$BUNDLE/kernelswarm.exe" ]] || die "$BUNDLE holds no kernelswarm executable"
else
  if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
    # the environment has the app but not the build tools: add pyproject's `package` extra
    step "installing the 'package' extra (PyInstaller) into $PYTHON's environment"
    mapfile -t tools < <("$PYTHON" -c 'import sys; t = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli"); [print(r) for r in t.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["package"]]')
    "$PYTHON" -m pip install --quiet "${tools[@]}" || die "cannot install ${tools[*]} into $PYTHON's environment"
  fi
  step "PyInstaller"
  rm -rf "$DIST/kernelswarm" "$DIST/KernelSwarm.app"
  "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --workpath "build/pyinstaller$FLAVOUR" --distpath "$DIST" packaging/kernelswarm.spec \
    2> >(grep -v -E "WARNING: (Library not found|Library .* required via ctypes not found|Hidden import .* not found)" >&2)
  BUNDLE="$DIST/kernelswarm"
  [[ -d "$BUNDLE" ]] || die "PyInstaller made no $BUNDLE"
  rm -rf "build/pyinstaller$FLAVOUR"  # its work folder: disk the archives need more
fi

# The NVIDIA driver must come from the workstation, never from the bundle.
driver_libs="$(find "$BUNDLE" -type f \( -iname 'libcuda.so*' -o -iname 'libnvidia-*' -o -iname 'nvcuda.dll' \
  -o -iname 'nvml.dll' -o -iname 'libcuda.*.dylib' \) -print)"
[[ -z "$driver_libs" ]] || die "driver libraries in the bundle: $driver_libs"

bundle_mb() { du -sm "$1" | cut -f1; }
SIZE_MB=$(bundle_mb "$BUNDLE")
CUDA_MB=0
[[ -d "$BUNDLE/_internal/nvidia" ]] && CUDA_MB=$(bundle_mb "$BUNDLE/_internal/nvidia")
step "bundle: $SIZE_MB MB ($CUDA_MB MB of it CUDA libraries from the nvidia wheels)"

artifacts=()
left_out=()
# Each archive needs about its own size free (twice for the .deb: dpkg-deb writes its data
# member to a temporary file first). A build machine short of disk leaves the archive out with
# one line saying so, and BUILD_INFO records it, instead of dying half-written.
free_mb() { df -Pm "$1" | awk 'NR == 2 { print $4 }'; }
room_for() {  # room_for WHAT NEEDED_MB: true when there is room, else records WHAT as left out
  local free tmp; free=$(free_mb "$DIST"); tmp=$(free_mb "${TMPDIR:-/tmp}")
  (( tmp < free )) && free=$tmp  # dpkg-deb's temporary file goes to TMPDIR
  if (( free >= $2 )); then return 0; fi
  step "left out: $1 (disk: $free MB free where $DIST or TMPDIR is, about $2 MB needed)"
  left_out+=("$1 disk $free MB free, $2 MB needed")
  return 1
}
# Staging copies as hard links where the file system allows (the bundle is gigabytes).
copy_tree() { mkdir -p "$2"; cp -al "$1"/. "$2"/ 2>/dev/null || cp -a "$1"/. "$2"/; }
# ---- Linux: .tar.gz, .deb, AppImage ------------------------------------------------------------
build_linux() {
  local name="kernelswarm-$VERSION" stage tarball deb_arch deb root glibc size_kb
  stage="build/stage/$name"
  rm -rf build/stage && mkdir -p "$stage/share/applications" "$stage/share/icons"
  copy_tree "$BUNDLE" "$stage"
  cp packaging/linux/kernelswarm.desktop "$stage/share/applications/"
  cp "$ICONS/kernelswarm-256.png" "$stage/share/icons/kernelswarm.png"
  tarball="$TARBALL"
  step "tar.gz"
  rm -f "$tarball" "$DEB"  # a previous build's archives are not free space
  # compressed, the bundle is a little over half its size; a margin on top
  if room_for tar.gz $(( SIZE_MB * 6 / 10 + 200 )); then
    tar -C build/stage -cf - "$name" | gzip -6 > "$tarball" || { rm -f "$tarball"; die "tar.gz failed"; }
    artifacts+=("$tarball")
  fi

  step ".deb"
  deb_arch="$DEB_ARCH"
  root="build/deb/root"
  rm -rf build/deb && mkdir -p "$root/DEBIAN" "$root/opt" "$root/usr/bin" \
    "$root/usr/share/applications" "$root/usr/share/icons/hicolor/scalable/apps"
  copy_tree "$BUNDLE" "$root/opt/kernelswarm"
  # a relative link: right in / and in any scratch root the package is unpacked into
  ln -s ../../opt/kernelswarm/kernelswarm "$root/usr/bin/kernelswarm"
  cp packaging/linux/kernelswarm.desktop "$root/usr/share/applications/"
  for s in 48 128 256 512; do
    mkdir -p "$root/usr/share/icons/hicolor/${s}x${s}/apps"
    cp "$ICONS/kernelswarm-$s.png" "$root/usr/share/icons/hicolor/${s}x${s}/apps/kernelswarm.png"
  done
  cp resources/icons/kernelswarm.svg "$root/usr/share/icons/hicolor/scalable/apps/"
  # the newest glibc symbol any bundled binary needs is the oldest libc6 it runs on
  glibc="$(find "$root/opt" -type f \( -name '*.so*' -o -perm -u+x \) -print0 \
    | xargs -0 objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' \
    | sort -uV | tail -1 || true)"
  size_kb=$(du -sk "$root" | cut -f1)
  # Desktop integration (menu cache, icon cache) runs from the desktop-file-utils and
  # hicolor-icon-theme dpkg triggers, so the package needs no maintainer scripts and
  # `dpkg -r` removes exactly what it installed.
  cat > "$root/DEBIAN/control" <<EOF
Package: kernelswarm
Version: $VERSION
Architecture: $deb_arch
Maintainer: KernelSwarm team <kernelswarm@users.noreply.invalid>
Installed-Size: $size_kb
Depends: libc6 (>= ${glibc:-2.31}), libfontconfig1, libfreetype6, libxkbcommon0, libgl1, libegl1
Recommends: gcc | clang, libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1, libxkbcommon-x11-0, libxcb-xinerama0, libxcb-randr0, libxcb-shape0, libxcb-image0, libxcb-render-util0
Suggests: nvidia-driver
Section: devel
Priority: optional
Description: desktop swarm of search agents that optimises GPU kernels
 KernelSwarm proposes kernel variants, compiles them, verifies them against a
 reference on many inputs, times them honestly and keeps only the correct and
 faster ones, with the whole history in SQLite. Backends: CUDA (uses the NVIDIA
 driver installed on the machine), CPU (the system C compiler) and recorded
 tuning spaces. "kernelswarm" opens the GUI; "kernelswarm run GOAL.toml" etc. is the CLI.
EOF
  deb="$DEB"
  # gzip: xz takes minutes on the CUDA libraries for a few percent
  if room_for deb $(( SIZE_MB * 12 / 10 + 300 )); then
    dpkg-deb --root-owner-group -Zgzip -z6 --build "$root" "$deb" >/dev/null \
      || { rm -f "$deb"; die "dpkg-deb failed"; }
    artifacts+=("$deb")
  fi

  step "AppImage"
  if packaging/linux/appimage.sh "$BUNDLE" "$ICONS/kernelswarm-256.png" "$VERSION" "$APPIMAGE"; then
    artifacts+=("$APPIMAGE")
  fi
  rm -rf build/stage build/deb
}

build_windows() {
  step "NSIS installer"
  command -v makensis >/dev/null || die "makensis not found (install NSIS 3)"
  local out="$NSIS_EXE" icon=()
  if "$PYTHON" -c "from PIL import Image; Image.open('$ICONS/kernelswarm-256.png').save('$ICONS/kernelswarm.ico', sizes=[(16, 16), (32, 32), (48, 48), (256, 256)])" 2>/dev/null; then
    icon=(-DICON="$ROOT/$ICONS/kernelswarm.ico")
  fi
  makensis -V2 -DVERSION="$VERSION" -DBUNDLE_DIR="$ROOT/$BUNDLE" -DOUTFILE="$ROOT/$out" \
    "${icon[@]}" packaging/windows/kernelswarm.nsi
  artifacts+=("$out")
}

build_macos() {
  step ".dmg"
  local out="$DMG"
  packaging/macos/make_dmg.sh "$DIST/KernelSwarm.app" "$VERSION" "$out"
  artifacts+=("$out")
}

"build_$TARGET"

ELAPSED=$(( $(date +%s) - START ))
{
  echo "version $VERSION"
  echo "target $TARGET$FLAVOUR"
  echo "build_seconds $ELAPSED"
  echo "bundle_mb $SIZE_MB"
  echo "bundle_cuda_libs_mb $CUDA_MB"
  echo "bundle_without_cuda_libs_mb $(( SIZE_MB - CUDA_MB ))"
  for a in "${artifacts[@]}"; do echo "artifact $(basename "$a") $(( $(wc -c < "$a") / 1048576 )) MB"; done
  for l in "${left_out[@]}"; do echo "left_out $l"; done
} > "$DIST/BUILD_INFO"
step "done"
cat "$DIST/BUILD_INFO"
