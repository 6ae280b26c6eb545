#!/usr/bin/env bash
# Pack KernelSwarm.app (made by PyInstaller from packaging/kernelswarm.spec on macOS) into a
# drag-to-Applications .dmg. Runs on macOS only (hdiutil); not buildable on the Linux machines.
#
#   packaging/macos/make_dmg.sh dist/KernelSwarm.app VERSION OUT.dmg
#
# Signing: set MACOS_SIGN_IDENTITY ("Developer ID Application: ...") to sign the app with the
# hardened runtime before packing; otherwise it is signed ad hoc (runs on the building Mac; other
# Macs need right-click > Open once). Notarise the .dmg afterwards with `xcrun notarytool`.
set -euo pipefail
[[ $# -eq 3 ]] || { sed -n '2,11p' "$0"; exit 2; }
APP="$1" VERSION="$2" OUT="$3"
[[ "$(uname)" == Darwin ]] || { echo "make_dmg.sh: needs macOS (hdiutil, codesign)" >&2; exit 1; }
[[ -d "$APP" ]] || { echo "make_dmg.sh: no $APP: run PyInstaller first" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${MACOS_SIGN_IDENTITY:-}" ]]; then
  codesign --force --deep --options runtime --timestamp \
    --entitlements "$HERE/entitlements.plist" --sign "$MACOS_SIGN_IDENTITY" "$APP"
else
  codesign --force --deep --sign - "$APP"
fi

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
rm -f "$OUT"
hdiutil create -volname "KernelSwarm $VERSION" -srcfolder "$STAGE" -fs HFS+ -format UDZO \
  -imagekey zlib-level=9 -ov "$OUT"
echo "$OUT"
