"""Can Qt open a window here? Asked before Qt is loaded, because Qt's answer is `Aborted`.

When the xcb platform plugin misses a shared library, or there is no display, Qt prints its
reason to a log nobody reads and aborts the process (exit 134). This module finds both
problems first and says them in one line, with the command that installs what is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

# soname -> Debian/Ubuntu package (what Qt's xcb plugin links against)
DEBIAN_PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0", "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0", "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0", "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-render.so.0": "libxcb-render0", "libxcb-util.so.1": "libxcb-util1",
    "libX11-xcb.so.1": "libx11-xcb1", "libxcb.so.1": "libxcb1", "libX11.so.6": "libx11-6",
    "libxkbcommon.so.0": "libxkbcommon0", "libEGL.so.1": "libegl1", "libGL.so.1": "libgl1",
    "libGLX.so.0": "libglx0", "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6", "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
}


def xcb_plugin() -> Path | None:
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    plugin = Path(spec.submodule_search_locations[0]) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.exists() else None


def missing_libraries(library: Path) -> list[str]:
    """Shared libraries `library` needs that the dynamic loader cannot find (via ldd)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    try:
        out = subprocess.run([ldd, str(library)], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    missing = []
    for line in out.splitlines():
        name, _, where = line.strip().partition("=>")
        if "not found" in where and name.strip() not in missing:
            missing.append(name.strip())
    return missing


def install_hint(missing: list[str]) -> str:
    packages = [DEBIAN_PACKAGES[m] for m in missing if m in DEBIAN_PACKAGES]
    if not packages:
        return ""
    return f"; install them with: sudo apt-get install {' '.join(dict.fromkeys(packages))}"


def platform_name(environ: dict[str, str]) -> str:
    explicit = environ.get("QT_QPA_PLATFORM", "").split(":")[0].strip()
    if explicit:
        return explicit
    return "wayland" if environ.get("WAYLAND_DISPLAY") and not environ.get("DISPLAY") else "xcb"


def problem(environ: dict[str, str] | None = None, plugin: Path | None = None) -> str | None:
    """One line saying why the window cannot open here, or None."""
    if not sys.platform.startswith("linux"):
        return None
    environ = dict(os.environ if environ is None else environ)
    name = platform_name(environ)
    if name != "xcb":
        return None  # offscreen, wayland, vnc...: Qt's own checks are good enough there
    if not environ.get("DISPLAY"):
        return ("no display: DISPLAY is not set, so the desktop window cannot open (use "
                "`kernelswarm run GOAL.toml` headless, or start it inside an X session)")
    plugin = plugin or xcb_plugin()
    if plugin is None:
        return None
    missing = missing_libraries(plugin)
    if missing:
        return (f"Qt's xcb platform plugin cannot load: missing {', '.join(missing)}"
                f"{install_hint(missing)}")
    return None
