"""The desktop application (PySide6 + pyqtgraph): the only package that imports Qt."""

from app.ui.qtcompat import guard_none_refcount

guard_none_refcount()  # before any widget exists; see app/ui/qtcompat.py
