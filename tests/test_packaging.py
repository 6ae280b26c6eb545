"""Packaging: the PyInstaller spec's choices, build.sh's version stamping and Linux packages, the
NSIS script, the self-test. The full freeze (minutes) runs only with KERNELSWARM_PACKAGING_TESTS=1;
CI runs it as its own step (packaging/build.sh linux && packaging/smoke.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import types
from pathlib import Path
from typing import ClassVar

import pytest

from app import __version__, selftest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
SPEC = PACKAGING / "kernelswarm.spec"
BUILD_SH = PACKAGING / "build.sh"

needs_dpkg = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="dpkg-deb not installed")


# ---- the spec -----------------------------------------------------------------------------------

class _Recorder:
    """Stands in for PyInstaller's build targets: records what the spec asks of them."""

    made: ClassVar[list] = []

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        _Recorder.made.append(self)


def _run_spec(monkeypatch, *, cuda: bool, toc: list[tuple[str, str, str]]) -> dict:
    """Execute the spec as PyInstaller would, with its build steps recorded instead of run
    (running them is the freeze itself; see test_freeze_and_smoke)."""
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda package, **kw: [package]
    hooks.collect_data_files = lambda package, **kw: []
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    monkeypatch.setenv("KERNELSWARM_BUNDLE_CUDA", "1" if cuda else "0")

    class Analysis(_Recorder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.binaries = [e for e in toc if e[2] == "BINARY"]
            self.datas = [e for e in toc if e[2] == "DATA"]
            self.pure, self.scripts = [], []

    _Recorder.made = []
    namespace = {"SPECPATH": str(PACKAGING), "__file__": str(SPEC), "Analysis": Analysis,
                 "PYZ": _Recorder, "EXE": type("EXE", (_Recorder,), {}),
                 "COLLECT": type("COLLECT", (_Recorder,), {}),
                 "BUNDLE": type("BUNDLE", (_Recorder,), {})}
    exec(compile(SPEC.read_text(), str(SPEC), "exec"), namespace)  # noqa: S102 - our own spec
    return namespace


TOC = [
    ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "BINARY"),
    ("libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "BINARY"),
    ("libnvidia-ptxjitcompiler.so.1", "/usr/lib/libnvidia-ptxjitcompiler.so.1", "BINARY"),
    ("nvidia/cuda_runtime/lib/libcudart.so.12", "/x/libcudart.so.12", "BINARY"),
    ("nvidia/cuda_nvrtc/lib/libnvrtc.so.12", "/x/libnvrtc.so.12", "BINARY"),
    ("nvidia/cuda_nvrtc/lib/libnvrtc.alt.so.12", "/x/libnvrtc.alt.so.12", "BINARY"),
    ("PySide6/Qt/lib/libQt6Widgets.so.6", "/x/libQt6Widgets.so.6", "BINARY"),
    ("PySide6/Qt/lib/libQt6WebEngineCore.so.6", "/x/libQt6WebEngineCore.so.6", "BINARY"),
    ("PySide6/Qt/lib/libQt6Quick.so.6", "/x/libQt6Quick.so.6", "BINARY"),
    ("PySide6/Qt/plugins/platforms/libqoffscreen.so", "/x/libqoffscreen.so", "BINARY"),
    ("PySide6/Qt/plugins/platforms/libqxcb.so", "/x/libqxcb.so", "BINARY"),
    ("PySide6/Qt/plugins/multimedia/libffmpegmediaplugin.so", "/x/libffmpeg.so", "BINARY"),
    ("PySide6/Qt/translations/qtbase_de.qm", "/x/qtbase_de.qm", "DATA"),
    ("resources/spaces/gemm_RTX_3090.json.gz", "/x/gemm.json.gz", "DATA"),
]


def _kept(namespace: dict) -> set[str]:
    analysis = next(r for r in _Recorder.made if hasattr(r, "binaries"))
    return {dest for dest, _, _ in analysis.binaries + analysis.datas}


def test_spec_leaves_out_the_nvidia_driver_and_unused_qt(monkeypatch, capsys):
    ns = _run_spec(monkeypatch, cuda=True, toc=TOC)
    kept = _kept(ns)
    assert not {"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"} & kept
    assert "leaving out driver library libcuda.so.1" in capsys.readouterr().out
    assert {"nvidia/cuda_runtime/lib/libcudart.so.12", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
            "PySide6/Qt/lib/libQt6Widgets.so.6", "PySide6/Qt/plugins/platforms/libqoffscreen.so",
            "PySide6/Qt/plugins/platforms/libqxcb.so",
            "resources/spaces/gemm_RTX_3090.json.gz"} <= kept
    for pruned in ("PySide6/Qt/lib/libQt6WebEngineCore.so.6", "PySide6/Qt/lib/libQt6Quick.so.6",
                   "PySide6/Qt/plugins/multimedia/libffmpegmediaplugin.so",
                   "PySide6/Qt/translations/qtbase_de.qm",
                   "nvidia/cuda_nvrtc/lib/libnvrtc.alt.so.12"):
        assert pruned not in kept, pruned
    analysis = next(r for r in _Recorder.made if hasattr(r, "binaries"))
    excludes = analysis.kwargs["excludes"]
    assert {"PySide6.QtWebEngineCore", "PySide6.QtQml", "PySide6.Qt3DCore",
            "PySide6.QtMultimedia", "PySide6.QtPdf"} <= set(excludes)
    assert "cupy" not in excludes and "nvidia.cuda_nvrtc" in analysis.kwargs["hiddenimports"]
    for path in analysis.kwargs["runtime_hooks"] + analysis.kwargs["hookspath"] + list(analysis.args[0]):
        assert Path(path).exists(), path


@pytest.mark.parametrize(("platform", "names"), [
    ("linux", ["kernelswarm"]),  # bare `kernelswarm` is the GUI; no second 20 MB executable
    ("win32", ["kernelswarm", "kernelswarm-gui"]),
    ("darwin", ["kernelswarm", "kernelswarm-gui"]),
])
def test_spec_makes_cli_and_gui_in_one_bundle(monkeypatch, platform, names):
    monkeypatch.setattr(sys, "platform", platform)
    _run_spec(monkeypatch, cuda=True, toc=TOC)
    exes = [r for r in _Recorder.made if type(r).__name__ == "EXE"]
    assert [e.kwargs["name"] for e in exes] == names
    assert [e.kwargs["console"] for e in exes] == [True, False][:len(names)]
    (collect,) = [r for r in _Recorder.made if type(r).__name__ == "COLLECT"]
    assert collect.kwargs["name"] == "kernelswarm"
    assert all(any(arg is exe for arg in collect.args) for exe in exes)
    bundles = [r for r in _Recorder.made if type(r).__name__ == "BUNDLE"]
    if platform == "darwin":
        assert bundles[0].kwargs["info_plist"]["CFBundleExecutable"] == "kernelswarm-gui"
        assert bundles[0].kwargs["version"] == __version__
    else:
        assert not bundles


def test_spec_without_cuda_leaves_cupy_and_cuda_libraries_out(monkeypatch):
    ns = _run_spec(monkeypatch, cuda=False, toc=TOC)
    kept = _kept(ns)
    assert not any(dest.startswith("nvidia/") for dest in kept)
    analysis = next(r for r in _Recorder.made if hasattr(r, "binaries"))
    assert {"cupy", "cupy_backends", "nvidia.cuda_nvrtc"} <= set(analysis.kwargs["excludes"])


# ---- build.sh -----------------------------------------------------------------------------------

def _checkout_copy(tmp_path: Path, pyproject_version: str, app_version: str) -> Path:
    """A minimal checkout whose versions we choose: packaging/, resources/icons, app/__init__."""
    root = tmp_path / "checkout"
    shutil.copytree(PACKAGING, root / "packaging", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "resources" / "icons", root / "resources" / "icons")
    (root / "app").mkdir()
    (root / "app" / "__init__.py").write_text(f'__version__ = "{app_version}"\n')
    text = (ROOT / "pyproject.toml").read_text().replace(
        f'version = "{__version__}"', f'version = "{pyproject_version}"', 1)
    (root / "pyproject.toml").write_text(text)
    return root


def _build_sh(root: Path, *args: str, dist: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "QT_QPA_PLATFORM": "offscreen"}
    if dist is not None:
        env["DIST"] = str(dist)
    return subprocess.run(["bash", str(root / "packaging" / "build.sh"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_build_sh_stamps_the_pyproject_version_on_every_artifact(tmp_path):
    root = _checkout_copy(tmp_path, "9.8.7", "9.8.7")
    proc = _build_sh(root, "linux", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "version 9.8.7" in proc.stdout
    made = [line.split()[2] for line in proc.stdout.splitlines() if line.startswith("would make")]
    assert any(p.endswith("kernelswarm-9.8.7-linux-x86_64.tar.gz") for p in made), made
    assert any(p.endswith("kernelswarm_9.8.7_amd64.deb") for p in made), made
    proc = _build_sh(root, "windows", "--dry-run", "--no-cuda")
    assert "KernelSwarm-9.8.7-windows-x64-nocuda-setup.exe" in proc.stdout


def test_build_sh_refuses_versions_that_disagree(tmp_path):
    root = _checkout_copy(tmp_path, "9.8.7", "9.8.6")
    proc = _build_sh(root, "linux", "--dry-run")
    assert proc.returncode == 1
    assert "9.8.7" in proc.stderr and "9.8.6" in proc.stderr


def test_build_sh_rejects_unknown_targets_and_options(tmp_path):
    assert _build_sh(ROOT, "solaris").returncode == 1
    assert "unknown option '--fast'" in _build_sh(ROOT, "linux", "--fast").stderr


def _fake_bundle(tmp_path: Path, version: str) -> Path:
    """A stand-in for the frozen bundle (the real one takes minutes to build): an executable
    that answers --version like the app, and a driver-free _internal folder."""
    bundle = tmp_path / "bundle"
    (bundle / "_internal").mkdir(parents=True)
    exe = bundle / "kernelswarm"
    exe.write_text(f"#!/bin/sh\necho kernelswarm {version}\n")
    exe.chmod(0o755)
    (bundle / "_internal" / "base_library.zip").write_bytes(b"PK")
    return bundle


@needs_dpkg
def test_build_sh_packages_a_bundle_as_tar_gz_and_deb(tmp_path):
    root = _checkout_copy(tmp_path, "9.8.7", "9.8.7")
    dist = tmp_path / "dist"
    proc = _build_sh(root, "linux", "--bundle", str(_fake_bundle(tmp_path, "9.8.7")), dist=dist)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    deb = dist / "kernelswarm_9.8.7_amd64.deb"
    fields = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True,
                            check=True).stdout
    assert "Package: kernelswarm" in fields and "Version: 9.8.7" in fields
    assert '"kernelswarm" opens the GUI' in fields
    assert "nvidia" not in fields.split("Suggests:")[0]  # the driver is never a hard dependency
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    assert "./usr/bin/kernelswarm -> ../../opt/kernelswarm/kernelswarm" in listing
    for path in ("./opt/kernelswarm/_internal/base_library.zip",
                 "./usr/share/applications/kernelswarm.desktop",
                 "./usr/share/icons/hicolor/256x256/apps/kernelswarm.png",
                 "./usr/share/icons/hicolor/scalable/apps/kernelswarm.svg"):
        assert path in listing, path
    # no maintainer scripts: removal takes exactly what was installed
    control = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    assert "postinst" not in control and "postrm" not in control
    with tarfile.open(dist / "kernelswarm-9.8.7-linux-x86_64.tar.gz") as tar:
        names = tar.getnames()
    assert "kernelswarm-9.8.7/kernelswarm" in names
    assert "kernelswarm-9.8.7/share/applications/kernelswarm.desktop" in names
    info = (dist / "BUILD_INFO").read_text()
    assert "version 9.8.7" in info and "artifact kernelswarm_9.8.7_amd64.deb" in info


@needs_dpkg
def test_build_sh_refuses_a_bundle_holding_the_nvidia_driver(tmp_path):
    root = _checkout_copy(tmp_path, "9.8.7", "9.8.7")
    bundle = _fake_bundle(tmp_path, "9.8.7")
    (bundle / "_internal" / "libcuda.so.1").write_bytes(b"\x7fELF")
    proc = _build_sh(root, "linux", "--bundle", str(bundle), dist=tmp_path / "dist")
    assert proc.returncode == 1
    assert "driver libraries in the bundle" in proc.stderr and "libcuda.so.1" in proc.stderr


def test_desktop_entry_names_the_installed_commands_and_icon():
    entry = (PACKAGING / "linux" / "kernelswarm.desktop").read_text()
    assert "\nExec=kernelswarm\n" in entry and "\nIcon=kernelswarm\n" in entry
    if shutil.which("desktop-file-validate"):
        subprocess.run(["desktop-file-validate", str(PACKAGING / "linux" / "kernelswarm.desktop")],
                       check=True)


@pytest.mark.skipif(not shutil.which("makensis"), reason="makensis (NSIS) not installed")
def test_nsis_script_compiles(tmp_path):
    bundle = _fake_bundle(tmp_path, "9.8.7")
    out = tmp_path / "KernelSwarm-setup.exe"
    proc = subprocess.run(
        ["makensis", "-V2", "-DVERSION=9.8.7", f"-DBUNDLE_DIR={bundle}", f"-DOUTFILE={out}",
         str(PACKAGING / "windows" / "kernelswarm.nsi")],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_bytes()[:2] == b"MZ"  # a Windows executable


# ---- selftest -----------------------------------------------------------------------------------

def test_selftest_storage_and_replay_pass(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELSWARM_CACHE", str(tmp_path / "cache"))
    assert selftest.main(["storage", "replay"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("PASS  storage")
    assert out.splitlines()[1].startswith("PASS  replay  ")
    assert "20 evaluations of pnpoly_RTX_3090.json.gz stored" in out


def test_selftest_exits_nonzero_when_a_check_fails(capsys, monkeypatch):
    def broken(_workdir):
        raise OSError("disk on fire")

    def absent(_workdir):
        raise selftest.Skip("no compiler here")

    monkeypatch.setitem(selftest.CHECKS, "storage", broken)
    monkeypatch.setitem(selftest.CHECKS, "cpu", absent)
    assert selftest.main(["storage"]) == 1
    assert selftest.main(["cpu"]) == 0  # SKIP is not a failure
    out = capsys.readouterr().out
    assert "FAIL  storage  OSError: disk on fire" in out and "FAILED: storage" in out
    assert "SKIP  cpu      no compiler here" in out


def test_selftest_names_an_unknown_check(capsys):
    with pytest.raises(SystemExit) as exc:
        selftest.main(["gpu"])
    assert exc.value.code == 2
    assert "unknown check 'gpu'" in capsys.readouterr().err


def test_selftest_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "app.selftest", "storage"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS  storage")


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_selftest_cpu_compiles_and_runs_a_kernel(tmp_path):
    assert selftest._cpu_direct(tmp_path).endswith("1000 outputs right")


# ---- the freeze itself --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("KERNELSWARM_PACKAGING_TESTS") != "1",
                    reason="freezes the app (minutes); set KERNELSWARM_PACKAGING_TESTS=1")
def test_freeze_and_smoke():
    build = subprocess.run(["bash", str(BUILD_SH), "linux"], cwd=ROOT, capture_output=True,
                           text=True, timeout=1800, check=False)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    smoke = subprocess.run(["bash", str(PACKAGING / "smoke.sh")], cwd=ROOT, capture_output=True,
                           text=True, timeout=900, check=False)
    assert smoke.returncode == 0, smoke.stdout[-4000:] + smoke.stderr[-4000:]
    assert "smoke: all checks passed" in smoke.stdout


def _can_mount_in_user_namespace() -> bool:
    probe = subprocess.run(["unshare", "-Urm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                            "/mnt"], capture_output=True, check=False)
    return probe.returncode == 0


@needs_dpkg
def test_build_sh_leaves_an_archive_out_with_one_line_when_the_disk_is_short(tmp_path):
    """CI's disk once ran out half way through the .deb. On a 250 MB file system the tarball
    (which needs 200 MB free for a tiny bundle) is made, the .deb (300 MB) is left out with a
    line naming the free space, BUILD_INFO records it, and nothing half-written is left."""
    if shutil.which("unshare") is None or not _can_mount_in_user_namespace():
        pytest.skip("no user namespace with a mount of its own here")
    root = _checkout_copy(tmp_path, "9.8.7", "9.8.7")
    bundle = _fake_bundle(tmp_path, "9.8.7")
    dist = tmp_path / "dist"
    dist.mkdir()
    build = (f"mount -t tmpfs -o size=250m tmpfs {dist} && "
             f"DIST={dist} PYTHON={sys.executable} bash packaging/build.sh linux --bundle {bundle}"
             f" && ls {dist} && cat {dist}/BUILD_INFO")
    proc = subprocess.run(["unshare", "-Urm", "bash", "-c", build], cwd=root,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kernelswarm-9.8.7-linux-x86_64.tar.gz" in proc.stdout
    assert "kernelswarm_9.8.7_amd64.deb" not in proc.stdout
    assert "left out: deb (disk:" in proc.stdout and "MB needed" in proc.stdout
    assert "left_out deb disk" in proc.stdout and "artifact kernelswarm-9.8.7" in proc.stdout
