"""Render resources/icons/kernelswarm.svg to PNG files of the sizes installers need.

usage: python packaging/render_icons.py OUT_DIR [SIZE ...]   (default sizes: 48 128 256 512)
Writes OUT_DIR/kernelswarm-<size>.png; Qt's SVG renderer, offscreen, no display needed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SVG = Path(__file__).resolve().parent.parent / "resources" / "icons" / "kernelswarm.svg"


def render(out_dir: Path, sizes: list[int]) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841 - Qt needs one
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {SVG} is not a valid SVG")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        renderer.render(painter)
        painter.end()
        path = out_dir / f"kernelswarm-{size}.png"
        if not image.save(str(path)):
            raise SystemExit(f"render_icons: cannot write {path}")
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    sizes = [int(s) for s in sys.argv[2:]] or [48, 128, 256, 512]
    for p in render(Path(sys.argv[1]), sizes):
        print(p)
