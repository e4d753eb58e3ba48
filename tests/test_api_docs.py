"""The generated API reference (scripts/api_docs.py, pdoc): it builds, every public module has a
page, and every name of a module's `__all__` has its entry on that page."""

import importlib
import re
import runpy
import warnings
from pathlib import Path

import pytest

pytest.importorskip("pdoc", reason="pdoc is in the [docs] and [test] extras")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "api_docs.py"


@pytest.mark.tooling
def test_every_public_name_has_an_entry(tmp_path):
    api = runpy.run_path(str(SCRIPT))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # pdoc: forward references it cannot resolve
        documented = api["build"](tmp_path)
    modules = api["public_modules"]()
    assert {"kafkacodec", "kafkacodec.arrow", "kafkacodec.logdir", "kafkacodec.errors"} <= set(modules)
    assert set(modules) <= set(documented)
    missing = []
    for name in modules:
        page = (tmp_path / (name.replace(".", "/") + ".html")).read_text()
        ids = set(re.findall(r'id="([^"]+)"', page))
        missing += [f"{name}.{public}" for public in getattr(importlib.import_module(name), "__all__", ())
                    if public not in ids]
    assert not missing, f"public names without an entry in the API reference: {missing}"
    index = (tmp_path / "index.html").read_text()
    assert all(f'href="{name.replace(".", "/")}.html"' in index for name in modules)
