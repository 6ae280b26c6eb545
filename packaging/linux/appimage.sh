#!/usr/bin/env bash
# Make an AppImage from the PyInstaller bundle: an AppDir (AppRun, .desktop, icon, the bundle
# under usr/lib/kernelswarm) packed by appimagetool.
#
#   packaging/linux/appimage.sh BUNDLE_DIR ICON_PNG VERSION OUT.AppImage
#
# appimagetool (and the AppImage runtime it embeds) is not packaged by Debian, PyPI or npm:
# PyPI's python-appimage and appimage download it from GitHub at build time, which this
# project's machines cannot reach. So the AppImage is built only where appimagetool is on PATH
# (or named by $APPIMAGETOOL); otherwise this prints why and exits 1 without failing the build.
set -euo pipefail
[[ $# -eq 4 ]] || { sed -n '2,11p' "$0"; exit 2; }
BUNDLE="$1" ICON="$2" VERSION="$3" OUT="$4"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

TOOL="${APPIMAGETOOL:-$(command -v appimagetool || command -v appimagetool-x86_64.AppImage || true)}"
if [[ -z "$TOOL" ]]; then
  echo "appimage.sh: skipped: appimagetool is not installed (not packaged by Debian, PyPI or npm;" \
       "get it from the AppImage project and put it on PATH or in \$APPIMAGETOOL)"
  exit 1
fi

APPDIR="$(dirname "$OUT")/KernelSwarm.AppDir"
rm -rf "$APPDIR" && mkdir -p "$APPDIR/usr/lib" "$APPDIR/usr/share/applications"
cp -a "$BUNDLE" "$APPDIR/usr/lib/kernelswarm"
cp "$HERE/kernelswarm.desktop" "$APPDIR/kernelswarm.desktop"
cp "$HERE/kernelswarm.desktop" "$APPDIR/usr/share/applications/"
cp "$ICON" "$APPDIR/kernelswarm.png"
cat > "$APPDIR/AppRun" <<'RUN'
#!/bin/sh
# `KernelSwarm.AppImage` opens the GUI; `KernelSwarm.AppImage run goal.toml` etc. is the CLI.
HERE="$(dirname "$(readlink -f "$0")")"
exec "$HERE/usr/lib/kernelswarm/kernelswarm" "$@"
RUN
chmod +x "$APPDIR/AppRun"
ARCH=x86_64 VERSION="$VERSION" "$TOOL" --no-appstream "$APPDIR" "$OUT"
rm -rf "$APPDIR"
