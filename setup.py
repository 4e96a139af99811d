"""Builds otlp's C kernels (``otlp/backend/native/*.c``) as extension modules when the package is built.

Two libraries, loaded at run time with ctypes by :mod:`otlp.backend.native` (nothing is compiled after installation):

- ``otlp.backend.native._kernels``: portable, for any CPU of the platform;
- ``otlp.backend.native._kernels_avx2``: the same sources with ``-mavx2`` (x86-64 only), taken where the CPU has AVX2.

Each is built with OpenMP where the compiler has it and without it where it does not (the rows of a call then run
one after the other). Both are optional: where no C compiler works the wheel still builds, and otlp runs its numpy
route, which gives the same answers (tests/backend/test_native.py).
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = "otlp/backend/native"
# otlp/backend/native/sources.py by its path: the package itself is not importable while it is being built
_spec = importlib.util.spec_from_file_location("otlp_native_sources", f"{NATIVE}/sources.py")
_sources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sources)
SOURCES = [f"{NATIVE}/{name}" for name in _sources.SOURCES]
#: compiled into the library (otlp_source_fingerprint), compared with the sources beside it when it is loaded
FINGERPRINT = _sources.fingerprint(Path(NATIVE))
#: the functions otlp.backend.native calls (exported by name where the linker needs a list: MSVC)
SYMBOLS = ["otlp_bucket_sums", "otlp_gather_selected", "otlp_row_stats", "otlp_sort_runs", "otlp_normalised_keys",
           "otlp_slot_mass", "otlp_window_chain", "otlp_prefix", "otlp_served_group", "otlp_pieces", "otlp_sample",
           "otlp_single_draft", "otlp_bucket_rule", "otlp_kseq_first_stage", "otlp_sort_bucket", "otlp_openmp",
           "otlp_wor_prefix", "otlp_wor_closed_psi", "otlp_wor_plan", "otlp_set_probabilities",
           "otlp_source_fingerprint"]
#: no -ffast-math (IEEE results: the numpy route's bits) and no contraction into fused multiply-adds;
#: -fno-trapping-math lets the compiler compute both sides of a select in vector lanes (nothing reads FP flags);
#: -fno-wrapv undoes the -fwrapv of Python's own CFLAGS (the loops' index arithmetic never overflows)
UNIX_FLAGS = ["-O3", "-ffp-contract=off", "-fno-trapping-math", "-fno-wrapv"]
MSVC_FLAGS = ["/O2", "/fp:precise"]
OPENMP = {"unix": "-fopenmp", "msvc": "/openmp"}
AVX2 = {"unix": "-mavx2", "msvc": "/arch:AVX2"}
#: calls between the kernels bound inside the library, not through the PLT (GNU ld): with the module's entry point
#: linked in, the interposable calls cost the optimal rule 8-12% at V = 128k (benchmarks/verifiers.py, one thread)
LINUX_LINK = ["-Wl,-Bsymbolic-functions"] if sys.platform.startswith("linux") else []


def kernels(name: str) -> Extension:
    # libm linked by name: unlinked, exp and log would bind to glibc's oldest (slower, SVID-wrapped) versions
    macros = [("OTLP_MODULE", name), ("OTLP_FINGERPRINT", f'"{FINGERPRINT}"')]
    return Extension(f"otlp.backend.native.{name}", SOURCES, depends=[f"{NATIVE}/kernels.h"], optional=True,
                     define_macros=macros, export_symbols=[f"PyInit_{name}", *SYMBOLS],
                     libraries=[] if sys.platform == "win32" else ["m"])


class BuildKernels(build_ext):
    """Adds the compiler's flags per extension; retries without OpenMP where the compiler refuses it."""

    def build_extension(self, ext: Extension) -> None:
        kind = "msvc" if self.compiler.compiler_type == "msvc" else "unix"
        flags = list(MSVC_FLAGS if kind == "msvc" else UNIX_FLAGS)
        if ext.name.endswith("_avx2"):
            flags.append(AVX2[kind])
        openmp = OPENMP[kind]
        ext.extra_compile_args = [*flags, openmp]
        link = LINUX_LINK if kind == "unix" else []
        ext.extra_link_args = [*link, openmp] if kind == "unix" else []
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: try once more without OpenMP
            self.warn(f"building {ext.name} with OpenMP failed ({exc}); building it without OpenMP")
            ext.extra_compile_args, ext.extra_link_args = flags, link
            super().build_extension(ext)


EXTENSIONS = [kernels("_kernels")]
if platform.machine().lower() in ("x86_64", "amd64"):
    EXTENSIONS.append(kernels("_kernels_avx2"))

setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": BuildKernels})
