"""Build the Cython core.

Environment switches (all optional):
  KAFKACODEC_DEBUG=1         -O0 -g, Cython bounds checks back on
  KAFKACODEC_SANITIZE=...    e.g. "address,undefined": build with ASan/UBSan
  KAFKACODEC_COVERAGE=1      Cython line tracing for coverage.py
  KAFKACODEC_MODULES=a,b     build only these extension modules (dotted names or stems)
"""

import os
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
DEBUG = os.environ.get("KAFKACODEC_DEBUG") == "1"
SANITIZE = os.environ.get("KAFKACODEC_SANITIZE", "")
COVERAGE = os.environ.get("KAFKACODEC_COVERAGE") == "1"
# C libraries a module links (zlib: gzip straight into our buffers with the GIL released).
LIBRARIES = {"kafkacodec._compression": ["zlib" if sys.platform == "win32" else "z"]}
# C sources compiled into a module: libdeflate's decompressor (vendored, MIT; gzip inflate).
LIBDEFLATE = [f"csrc/libdeflate/lib/{name}.c" for name in
              ("deflate_decompress", "utils", "x86/cpu_features", "arm/cpu_features")]
# Google snappy 1.1.10 (vendored, BSD; snappy compression: snappy-java's release, Kafka's bytes).
SNAPPY = [f"csrc/snappy/{name}.cc" for name in
          ("snappy", "snappy-c", "snappy-sinksource", "snappy-stubs-internal")]
SOURCES = {"kafkacodec._compression": LIBDEFLATE + SNAPPY}
# HAVE_CONFIG_H: snappy reads csrc/snappy/config.h (its compiler builtins) only with it.
MACROS = {"kafkacodec._compression": [("HAVE_CONFIG_H", "1")]}
SPARK_PTH = "kafkacodec-spark.pth"
ONLY = {m.strip() for m in os.environ.get("KAFKACODEC_MODULES", "").split(",") if m.strip()}


def extensions():
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    if COVERAGE:
        macros += [("CYTHON_TRACE_NOGIL", "1")]
    for pyx in sorted(ROOT.glob("kafkacodec/**/*.pyx")):
        rel = pyx.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts)
        if ONLY and name not in ONLY and rel.name not in ONLY:
            continue
        yield Extension(name, [str(pyx.relative_to(ROOT)), *SOURCES.get(name, [])],
                        include_dirs=["csrc", "csrc/libdeflate", "csrc/snappy", numpy.get_include()],
                        define_macros=macros + MACROS.get(name, []),
                        libraries=LIBRARIES.get(name, []))


class BuildExt(build_ext):
    """Per-compiler flags: -O2 -Wall for gcc/clang, /O2 for MSVC, plus the debug switches."""

    def build_extensions(self):
        msvc = self.compiler.compiler_type == "msvc"
        for ext in self.extensions:
            if msvc:
                ext.extra_compile_args += ["/O2" if not DEBUG else "/Od"]
                continue
            # -g0 drops the DWARF that Python's own CFLAGS ask for (5x smaller wheels);
            # debug and sanitizer builds keep it for readable reports.  Sanitizer builds at -O1,
            # as ASan's documentation advises: reports stay exact and the build is much faster.
            if DEBUG:
                ext.extra_compile_args += ["-O0", "-g"]
            else:
                ext.extra_compile_args += ["-O1", "-g1"] if SANITIZE else ["-O2", "-g0"]
            ext.extra_compile_args += ["-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
            if SANITIZE:
                flags = [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
                # Python's CFLAGS carry -fwrapv, under which UBSan cannot see a signed overflow
                ext.extra_compile_args += flags + ["-fno-wrapv"]
                ext.extra_link_args += flags
        if not msvc:
            # snappy is C++11; -O3 as snappy's own CMake Release build (about 6% faster
            # compression than -O2 with gcc 12); the C sources keep -O2.
            add_cxx_flags(self.compiler, ["-std=c++11"] + ([] if DEBUG else ["-O3"]))
        self.parallel = self.parallel or os.cpu_count()
        super().build_extensions()


class BuildPy(build_py):
    """Puts pyspark_kafkalog/kafkacodec-spark.pth at the top of the wheel (site-packages), where
    Python runs it at start-up: see that file."""

    def run(self):
        super().run()
        self.copy_file(str(ROOT / "pyspark_kafkalog" / SPARK_PTH), os.path.join(self.build_lib, SPARK_PTH))


def add_cxx_flags(compiler, flags):
    """Append `flags` to the command line of the C++ (.cc) sources only."""
    compile_one = compiler._compile

    def _compile(obj, src, ext, cc_args, extra_postargs, pp_opts):
        if ext == ".cc":
            extra_postargs = [*extra_postargs, *flags]      # after -O2: the last -O wins
        compile_one(obj, src, ext, cc_args, extra_postargs, pp_opts)

    compiler._compile = _compile


directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": DEBUG,
    "embedsignature": True,
    "freethreading_compatible": False,
}
if COVERAGE:
    directives["linetrace"] = True

setup(
    ext_modules=cythonize(list(extensions()), compiler_directives=directives,
                          include_path=[str(ROOT)], nthreads=0 if sys.platform == "win32" else 2,
                          annotate=os.environ.get("KAFKACODEC_ANNOTATE") == "1"),
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
