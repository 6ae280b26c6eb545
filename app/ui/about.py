"""About dialog: the versions of everything the app depends on, 'not available' when absent."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, qVersion
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

import app

NA = "not available"


def _dist_version(*names: str) -> str:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return NA


def _nvml_info() -> tuple[str, str]:
    """(CUDA driver version, GPU names) from NVML, or 'not available'."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library or a broken one: "not available"
        return NA, NA
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
            driver = f"{driver} (CUDA {cuda // 1000}.{cuda % 1000 // 10})"
        except Exception:  # noqa: BLE001, S110 - an old driver: its version alone is shown
            pass
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return driver, ", ".join(names) or NA
    except Exception:  # noqa: BLE001 - the About box shows what it could read
        return NA, NA
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - nothing to release
            pass


def versions() -> list[tuple[str, str]]:
    driver, gpus = _nvml_info()
    return [
        ("KernelSwarm", app.__version__),
        ("Python", f"{sys.version.split()[0]} ({platform.python_implementation()})"),
        ("Qt", qVersion()),
        ("PySide6", pyside_version),
        ("pyqtgraph", _dist_version("pyqtgraph")),
        ("NumPy", _dist_version("numpy")),
        ("CuPy", _dist_version("cupy-cuda12x", "cupy-cuda11x", "cupy")),
        ("CUDA driver", driver),
        ("GPU", gpus),
        ("OS", platform.platform()),
    ]


class AboutDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About KernelSwarm")
        rows = "".join(f"<tr><td align=right><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>"
                       for k, v in versions())
        text = QLabel(
            "<h2>KernelSwarm</h2><p>A swarm of search agents that optimises GPU kernels:<br>"
            "honest verification, honest timing, history in SQLite.</p>"
            f"<table>{rows}</table>")
        text.setTextInteractionFlags(Qt.TextSelectableByMouse)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        buttons.accepted.connect(self.accept)
        layout = QVBoxLayout(self)
        layout.addWidget(text)
        layout.addWidget(buttons)
