"""The typed surface: every compiled module has a .pyi stub beside it, the stubs agree with the
compiled modules (mypy's stubtest), and the stubs themselves type-check under mypy --strict.

Runs against whichever kafkacodec this test process imported (the installed wheel in CI, the
in-place build while developing), so a stub missing from the wheel fails here too."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kafkacodec

mypy = pytest.importorskip("mypy", reason="mypy is in the [test] extra")

PACKAGE_DIR = Path(kafkacodec.__file__).resolve().parent
SEARCH_ROOT = PACKAGE_DIR.parent
ALLOWLIST = Path(__file__).with_name("stubtest_allowlist.txt")
# Optional extras: a module that cannot import because one of these is absent is left out of the
# check (and named in the skip reason of test_optional_modules_import).
OPTIONAL_DEPENDENCIES = {"pyspark", "pyarrow", "pandas", "tqdm", "atheris", "matplotlib", "kafka",
                         "prometheus_client"}


def _extension_modules() -> list[Path]:
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return sorted(p for p in PACKAGE_DIR.rglob("*") if p.name.endswith(suffixes))


def _module_name(path: Path) -> str:
    rel = path.relative_to(SEARCH_ROOT)
    return ".".join(rel.parent.parts + (rel.name.split(".", 1)[0],))


def _unimportable_modules() -> dict[str, str]:
    """Modules that fail to import only because an optional dependency is missing."""
    missing: dict[str, str] = {}

    def onerror(name: str) -> None:
        missing.setdefault(name, "import error while walking")

    for info in pkgutil.walk_packages(kafkacodec.__path__, "kafkacodec.", onerror=onerror):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as error:
            root = (error.name or "").split(".")[0]
            if root not in OPTIONAL_DEPENDENCIES:
                raise
            missing[info.name] = f"needs {root}"
    return missing


INSTALLED = "site-packages" in SEARCH_ROOT.parts or "dist-packages" in SEARCH_ROOT.parts


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    if not INSTALLED:  # an in-place build: make the source tree importable from `cwd`
        env["PYTHONPATH"] = str(SEARCH_ROOT)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_every_compiled_module_has_a_stub():
    extensions = _extension_modules()
    assert extensions, f"no compiled modules under {PACKAGE_DIR}"
    missing = [_module_name(p) for p in extensions
               if not p.with_name(p.name.split(".", 1)[0] + ".pyi").exists()]
    assert not missing, f"compiled modules without a .pyi stub beside them: {missing}"
    assert (PACKAGE_DIR / "py.typed").exists(), "py.typed marker missing (PEP 561)"


def test_optional_modules_import():
    missing = _unimportable_modules()
    if missing:
        pytest.skip("left out of stubtest (optional extra not installed): "
                    + ", ".join(f"{m} ({why})" for m, why in sorted(missing.items())))


@pytest.mark.tooling
def test_stubs_match_compiled_modules(tmp_path):
    allowlist = tmp_path / "allowlist.txt"
    extra = [rf"{name.replace('.', chr(92) + '.')}(\..*)?" for name in _unimportable_modules()]
    # A Cython class's __init__/__cinit__ signature cannot be introspected (the runtime shows
    # object.__init__ or a (*args, **kwargs) slot wrapper), so stubtest cannot check it: the
    # constructors of compiled modules are left out, and only theirs.
    extra += [rf"{_module_name(p).replace('.', chr(92) + '.')}\.\w+\.__init__"
              for p in _extension_modules()]
    allowlist.write_text(ALLOWLIST.read_text() + "\n" + "\n".join(extra) + "\n")
    # stubtest needs mypy to analyse the whole package first and stops at any type error in a
    # .py body; those are not stub drift (mypy -p kafkacodec in the typing CI job reports them),
    # so errors are silenced for the analysis and the comparison still runs on everything.
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nignore_errors = True\n")
    args = ["-m", "mypy.stubtest", "kafkacodec", "--allowlist", str(allowlist),
            "--ignore-unused-allowlist", "--concise", "--mypy-config-file", str(config)]
    help_text = _run(["-m", "mypy.stubtest", "--help"], tmp_path).stdout
    if "--ignore-disjoint-bases" in help_text:
        # mypy >= 1.18 wants @disjoint_base on stubs of C classes; a nicety for type checkers,
        # not a drift between stub and module.
        args.append("--ignore-disjoint-bases")
    result = _run(args, tmp_path)
    output = result.stdout + result.stderr
    if "kafkacodec failed to import" in output:
        pytest.skip(f"stubtest cannot import kafkacodec:\n{output[-2000:]}")
    assert result.returncode == 0, f"stubs drifted from the compiled modules:\n{output[-6000:]}"


# The dependencies that ship no types (as pyproject's [tool.mypy] overrides).
MYPY_CONFIG = ("[mypy]\n[mypy-pyarrow,pyarrow.*,kafka,kafka.*,tqdm,tqdm.*]\n"
               "ignore_missing_imports = True\n")


def _package_copy(tmp_path: Path) -> Path:
    # A copy of the package's Python-level files (not site-packages itself, which mypy refuses
    # as a source root).
    copy = tmp_path / "src"
    for path in PACKAGE_DIR.rglob("*"):
        if path.suffix in (".py", ".pyi") or path.name == "py.typed":
            target = copy / path.relative_to(SEARCH_ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    (copy / "mypy.ini").write_text(MYPY_CONFIG)
    return copy


def _mypy_strict(copy: Path, targets: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
    return _run(["-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
                 "--config-file", "mypy.ini", *extra,
                 "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}",
                 *targets], copy)


CORPUS = Path(__file__).with_name("typing")
MARKER = re.compile(r"#\s*E:\s*([^#]+)")
ERROR = re.compile(r"^(?:.*[/\\])?(\w+\.pyi?):(\d+): error: (.*)$")


def _expected_errors() -> dict[tuple[str, int], list[str]]:
    """(file, line) -> the message fragments its `# E:` markers demand (tests/typing/README.md)."""
    expected = {}
    for path in sorted(CORPUS.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            fragments = [f.strip() for f in MARKER.findall(line)]
            if fragments:
                expected[(path.name, number)] = fragments
    return expected


@pytest.mark.tooling
def test_package_and_corpus_typecheck_strict(tmp_path):
    """One mypy --strict run: the whole package (every .py module against the stubs of the
    compiled ones) and the usage corpus tests/typing/, whose unmarked lines must type-check and
    whose `# E:` lines must each give exactly the errors they name. Without pyspark (whose
    annotations kafkacodec.spark needs) the stubs stand in for the package."""
    copy = _package_copy(tmp_path)
    corpus = sorted(CORPUS.glob("*.py"))
    assert corpus, f"no typing corpus in {CORPUS}"
    for path in corpus:
        shutil.copyfile(path, copy / path.name)
    modules = [arg for path in corpus for arg in ("-m", path.stem)]
    if importlib.util.find_spec("pyspark") is not None:
        result = _mypy_strict(copy, ["-p", "kafkacodec", *modules])
    else:
        stubs = sorted(str(p.relative_to(copy)) for p in copy.rglob("*.pyi"))
        result = _mypy_strict(copy, [*stubs, *(p.name for p in corpus)], "--follow-imports", "silent")
    output = result.stdout + result.stderr
    got: dict[tuple[str, int], list[str]] = {}
    for line in result.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            got.setdefault((match[1], int(match[2])), []).append(match[3])
    assert got or result.returncode == 0, f"mypy failed without reporting errors:\n{output}"
    expected = _expected_errors()
    assert expected, "the corpus has no `# E:` lines: nothing proves a stub is not too loose"
    unexpected = {where: msgs for where, msgs in got.items() if where not in expected}
    assert not unexpected, f"errors on lines that must type-check:\n{output}"
    for where, fragments in expected.items():
        messages = got.get(where, [])
        assert len(messages) == len(fragments) and all(
            any(f in m for m in messages) for f in fragments), \
            f"{where[0]}:{where[1]} must report {fragments}, mypy said {messages}\n{output}"


def _parameters(source: str) -> list[tuple[str, str, bool]]:
    """(name, kind, has default) of each parameter of `def f(<source>)`, self left out."""
    import ast
    # The embedded signature may carry C types ("int partition=0"): keep the last word.
    params = re.sub(r"\b[\w.]+\s+(?=\w+\s*(=|,|$))", "", source)
    args = ast.parse(f"def f({params}): pass").body[0].args  # type: ignore[attr-defined]
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    rows = [(a.arg, "positional", i >= first_default) for i, a in enumerate(positional)]
    rows += [(a.arg, "keyword-only", d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return [row for row in rows if row[0] not in ("self", "cls")]


def _stub_constructors(stub: Path) -> dict[str, str]:
    """Class name -> the parameter source of its __init__ (or __new__, for a Cython __cinit__)
    in a .pyi stub, annotations and defaults dropped."""
    import ast
    tree = ast.parse(stub.read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in ("__init__", "__new__"):
                    item.args.defaults = [ast.Constant(None)] * len(item.args.defaults)
                    item.args.kw_defaults = [None if d is None else ast.Constant(None)
                                             for d in item.args.kw_defaults]
                    for a in item.args.posonlyargs + item.args.args + item.args.kwonlyargs:
                        a.annotation = None
                    found[node.name] = ast.unparse(item.args)
    return found


def test_constructor_signatures_in_docstrings_match_the_stubs():
    """What stubtest leaves out: a compiled class's constructor. help(cls) shows the signature
    Cython embeds as the docstring's first line; it must name the stub's parameters, in the
    stub's order and kinds (Cython 3.3 misplaces `*` for __init__, so those are written out)."""
    checked = 0
    for path in _extension_modules():
        name = _module_name(path)
        module = importlib.import_module(name)
        stub = _stub_constructors(path.with_name(path.name.split(".", 1)[0] + ".pyi"))
        for cls_name, stub_params in stub.items():
            cls = getattr(module, cls_name, None)
            doc = (getattr(cls, "__doc__", None) or "").split("\n", 1)[0]
            if not isinstance(cls, type) or not doc.startswith(cls_name + "("):
                continue
            assert doc.endswith(")"), f"{name}.{cls_name}: unterminated signature {doc!r}"
            assert _parameters(doc[len(cls_name) + 1:-1]) == _parameters(stub_params), \
                f"{name}.{cls_name}: docstring {doc!r} vs stub ({stub_params})"
            checked += 1
    assert checked >= 10, f"only {checked} constructor signatures found in docstrings"
