"""Paths of the checkout the tests use (a module, not conftest: tests/gpu and tests/ui have
conftest files of their own, and `from conftest import` would pick whichever loaded first)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPACES = ROOT / "resources" / "spaces"
GOALS = ROOT / "resources" / "goals"
SMALL_SPACE = SPACES / "pnpoly_RTX_3090.json.gz"  # 4092 configs, 4 parameters, has failures
