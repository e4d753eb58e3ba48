"""Build the API reference (HTML, pdoc) of the installed or in-place kafkacodec:

    python scripts/api_docs.py [OUT]          # default build/api; open OUT/index.html

Every public module (no leading underscore) gets a page with the names of its `__all__`,
their docstrings and the signatures of the `.pyi` stubs for compiled classes.  Needs
`pip install "kafkacodec[docs]"` (pdoc); tests/test_api_docs.py builds it in CI and checks
that every public name has its entry."""

from __future__ import annotations

import sys
from pathlib import Path


def public_modules() -> list[str]:
    """kafkacodec and its submodules without a leading underscore in any part of their name
    (the `kafkacodec` command's own modules are left out: docs/cli.md documents the command)."""
    import pkgutil

    import kafkacodec

    names = ["kafkacodec"]
    for info in pkgutil.walk_packages(kafkacodec.__path__, "kafkacodec."):
        if not any(part.startswith("_") for part in info.name.split(".")) and \
                not info.name.startswith("kafkacodec.cli."):
            names.append(info.name)
    return names


def build(out: Path) -> list[str]:
    """Write the reference into `out`; returns the modules documented."""
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="markdown", show_source=False, search=True,
                          footer_text="kafkacodec API reference (scripts/api_docs.py)")
    modules = public_modules()
    pdoc.pdoc(*modules, output_directory=out)
    _index(out, modules)
    return sorted(p.relative_to(out).with_suffix("").as_posix().replace("/", ".")
                  for p in out.rglob("*.html") if p.name not in ("index.html", "search.js"))


def _index(out: Path, modules: list[str]) -> None:
    """index.html: every module's page with the first line of its docstring (pdoc's own index
    only forwards to the top module, whose __all__ does not name the submodules)."""
    import html
    import importlib

    rows = []
    for name in modules:
        doc = (importlib.import_module(name).__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        rows.append(f'<li><a href="{name.replace(".", "/")}.html"><code>{name}</code></a>: {html.escape(doc)}</li>')
    (out / "index.html").write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>kafkacodec API reference</title>'
        '</head><body><h1>kafkacodec API reference</h1><ul>\n' + "\n".join(rows) + "\n</ul></body></html>\n")


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "build/api")
    documented = build(target)
    print(f"api_docs: {len(documented)} modules in {target}/ (open {target}/index.html)")
