"""Before Qt loads: no display, or a library the xcb plugin needs, is one line, never `Aborted`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from app.ui import preflight

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="xcb is Linux only")


@pytest.fixture
def plugin_missing_a_library(tmp_path):
    """A real shared library linked against a library that is then removed (ldd: not found)."""
    if not shutil.which("cc") or not shutil.which("ldd"):
        pytest.skip("needs a C compiler and ldd")
    (tmp_path / "dep.c").write_text("int ks_dep(void) { return 1; }\n")
    (tmp_path / "plugin.c").write_text("int ks_dep(void);\nint ks_plugin(void) { return ks_dep(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libks-missing-xcb.so.7",
                    "-Wl,-soname,libks-missing-xcb.so.7", tmp_path / "dep.c"], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libqxcb.so", tmp_path / "plugin.c",
                    tmp_path / "libks-missing-xcb.so.7"], check=True)
    (tmp_path / "libks-missing-xcb.so.7").unlink()
    return tmp_path / "libqxcb.so"


def test_a_missing_library_is_named_with_its_package(plugin_missing_a_library):
    line = preflight.problem({"DISPLAY": ":99"}, plugin=plugin_missing_a_library)
    assert line is not None and "\n" not in line
    assert "libks-missing-xcb.so.7" in line


def test_missing_xcb_libraries_get_their_debian_packages():
    hint = preflight.install_hint(["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libunknown.so.1"])
    assert hint == "; install them with: sudo apt-get install libxcb-icccm4 libxcb-keysyms1"


def test_no_display_is_named():
    line = preflight.problem({"PATH": os.environ.get("PATH", "")})
    assert line is not None and "DISPLAY is not set" in line


def test_offscreen_is_left_to_qt():
    assert preflight.problem({"QT_QPA_PLATFORM": "offscreen"}) is None


def test_the_app_says_one_line_and_does_not_abort_without_a_display():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY",
                                                             "QT_QPA_PLATFORM")}
    proc = subprocess.run([sys.executable, "-m", "app"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [lines[0]] and "DISPLAY is not set" in lines[0]
