"""The product speaks HTTP to LLM endpoints itself: `openai` is no runtime
dependency and no product module imports it; the LLM bench, its only user, gets it through
the `bench` (and `dev`) extras."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_openai_is_installed_only_where_the_bench_uses_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0].strip().lower()
             for d in project["dependencies"]]
    assert "openai" not in names
    extras = project["optional-dependencies"]
    assert any(d.startswith("openai") for d in extras["bench"])
    assert any(d.startswith("openai") for d in extras["dev"])


def test_no_product_module_imports_openai():
    code = ("import sys, app.llm, app.llm.client, app.llm.agent, app.llm.usage, app.session\n"
            "assert 'openai' not in sys.modules, 'openai imported'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for path in (ROOT / "app").rglob("*.py"):
        text = path.read_text()
        assert "import openai" not in text and "from openai" not in text, path
