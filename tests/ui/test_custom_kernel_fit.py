"""The "Your kernel" page as a page to live in: it fits a 1366x768 screen with rows
in both tables and the compiler output visible, resizing gives the height to the tables, the
arguments come from the parsed C signature, the TOML preview is the file as saved, Close and
Cancel exist and "Use in the window" closes it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QAbstractItemView

from app.paths import resources_dir
from app.ui.custom_kernel import CustomKernelPage
from app.ui.goal_files import open_custom_kernel_page
from app.ui.kernel_signature import SignatureError, parse_signature

CONV = resources_dir() / "goals" / "custom" / "conv2d_c"


def _visible_rows(table: QAbstractItemView) -> float:
    return table.viewport().height() / max(1, table.verticalHeader().defaultSectionSize())


def _page(qtbot, size=(1366, 740)) -> CustomKernelPage:
    page = CustomKernelPage()
    qtbot.addWidget(page)
    page.resize(*size)
    page.show()
    qtbot.waitExposed(page)
    page.dims.setText("w, h")
    page.set_source(str(CONV / "conv2d.c"))
    for name in ("TILE_X", "TILE_Y", "THREADS"):
        page.add_param(name, "[1, 2]")
    return page


def test_the_page_fits_1366x768_with_rows_in_both_tables(qtbot):
    page = _page(qtbot)
    assert page.minimumSizeHint().width() <= 1366 and page.minimumSizeHint().height() <= 740
    assert page.width() <= 1366 and page.height() <= 740
    assert _visible_rows(page.params) >= 4, _visible_rows(page.params)
    assert _visible_rows(page.args) >= 5, _visible_rows(page.args)
    assert page.args.horizontalScrollBar().maximum() == 0  # the fill column is not hidden
    assert page.output_tabs.isVisible() and page.output_tabs.height() >= 90
    bottom = page.close_button.mapTo(page, page.close_button.rect().bottomLeft()).y()
    assert bottom <= page.height()
    before = page.args.viewport().height()
    page.resize(1366, 900)  # a taller window: the tables get the height
    qtbot.waitUntil(lambda: page.args.viewport().height() > before + 60, timeout=2000)


def test_arguments_are_offered_from_the_signature(qtbot):
    page = _page(qtbot)
    rows = [tuple(page._text(page.args, r, c) for c in range(5)) for r in range(page.args.rowCount())]
    assert rows == [("out", "output", "float32", "w, h", "normal"),
                    ("image", "input", "float32", "w, h", "normal"),
                    ("filter", "input", "float32", "w, h", "normal"),
                    ("w", "scalar", "int32", "w", "normal"), ("h", "scalar", "int32", "h", "normal")]
    assert not page.args.cellWidget(3, 4).isEnabled()  # a scalar has a value, not a fill
    assert not page.args.cellWidget(0, 4).isEnabled()  # an output is overwritten: no fill
    assert page.args.cellWidget(1, 4).isEnabled()
    page.args.cellWidget(0, 1).setCurrentText("inout")  # read as well as written: filled
    assert page.args.cellWidget(0, 4).isEnabled()
    page.args.cellWidget(0, 1).setCurrentText("output")
    page.args.item(0, 3).setText("h, w")  # the user's shape stays when the signature is read again
    page.args.cellWidget(1, 4).setCurrentText("uniform")
    assert page.args_from_signature(replace=True)
    assert page._text(page.args, 0, 3) == "h, w" and page._text(page.args, 1, 4) == "uniform"


def test_signature_parser_reads_c_types_and_names_what_it_cannot():
    c = ("#include <stddef.h>\n/* k(float *not_this) in a comment */\n"
         "void k(const double *restrict a, unsigned char *m, long long n, size_t s, float v[]) {}\n")
    cuda = ('extern "C" __global__ void __launch_bounds__(256) k(const double *__restrict__ a,'
            ' unsigned char *m, long long n, size_t s, float v[]) {}')
    for source, language in ((c, "c"), (cuda, "cuda")):
        args = parse_signature(source, "k", language)
        assert [(a.name, a.pointer, a.dtype, a.role) for a in args] == [
            ("a", True, "float64", "input"), ("m", True, "uint8", "output"), ("n", False, "int64", "scalar"),
            ("s", False, "uint64", "scalar"), ("v", True, "float32", "output")], language
    for bad in ("void k(int a", "void k(int a, wat b) {}"):
        try:
            parse_signature(bad, "k")
        except SignatureError as exc:
            assert "k(...)" in str(exc)
        else:
            raise AssertionError(bad)


def test_toml_preview_is_the_file_as_saved(qtbot, tmp_path):
    page = _page(qtbot)
    page.shapes.setText("256, 256")
    page.set_reference(str(CONV / "reference.py"))
    page.name.setText("conv preview")
    qtbot.waitUntil(lambda: 'name = "conv preview"' in page.toml_preview.toPlainText(), timeout=2000)
    out = tmp_path / "goal.toml"
    assert page.save(out)
    assert page.toml_preview.toPlainText() == out.read_text()


def test_close_cancel_and_use_in_the_window_closes(qtbot, window):
    page = open_custom_kernel_page(window)
    assert page.close_button.text() == "Close" and page.cancel_button.text() == "Cancel"
    assert not page.cancel_button.isEnabled()  # nothing compiling yet
    page.set_source(str(CONV / "conv2d.c"))
    page.dims.setText("w, h")
    page.shapes.setText("64, 64")
    page.args.setRowCount(0)
    assert page.args_from_signature()
    page.args.item(1, 3).setText("h + 6, w + 6")
    page.args.item(2, 3).setText("7, 7")
    page.args.item(0, 3).setText("h, w")
    for name, values in (("TILE_X", "[8]"), ("TILE_Y", "[1]"), ("THREADS", "[1]"), ("FW", "[7]"), ("FH", "[7]")):
        page.add_param(name, values)
    page.set_reference(str(CONV / "reference.py"))
    assert page.isVisible()
    assert page.use_goal() is not None, page.problem.text()
    assert not page.isVisible()
    assert window.form.goal().kernel.entry == "conv2d"
    page.show()
    page.close_button.click()
    assert not page.isVisible()


def test_unreadable_source_names_the_file(qtbot, tmp_path):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    page.set_source(str(tmp_path / "missing.c"))
    assert "missing.c" in page.problem.text()
    assert Path(page.source.text()).name == "missing.c"


def test_the_entry_offered_is_the_kernel_not_its_helper(qtbot):
    """pnpoly.c defines a static helper `crosses` before `pnpoly`: the page offered the helper
    and its six float scalars as the arguments."""
    page = CustomKernelPage()
    qtbot.addWidget(page)
    page.dims.setText("n, nv")
    page.set_source(str(resources_dir() / "goals" / "custom" / "pnpoly_c" / "pnpoly.c"))
    assert page.entry.currentText() == "pnpoly"
    names = [page._text(page.args, r, 0) for r in range(page.args.rowCount())]
    assert names == ["inside", "points", "vertices", "n", "nv"]
