"""Builds the Cython extensions. All Cython directives live here, once.

Switches (environment variables):
  DEEPCFR_DEBUG=1     bounds/wraparound/initialized checks on, -O0 -g
  DEEPCFR_ANNOTATE=1  also write `cython -a` HTML next to each .pyx
"""
import os
from pathlib import Path

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("DEEPCFR_DEBUG", "0") == "1"
ANNOTATE = os.environ.get("DEEPCFR_ANNOTATE", "0") == "1"

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "nonecheck": False,
    "embedsignature": True,
}
compile_args = ["-O0", "-g"] if DEBUG else ["-O3"]
packages = ["engine", "traverser"]

extensions = []
for pkg in packages:
    for pyx in sorted(Path(pkg).glob("*.pyx")):
        extensions.append(Extension(
            f"{pkg}.{pyx.stem}", [str(pyx)],
            include_dirs=[np.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=compile_args,
        ))

setup(ext_modules=cythonize(extensions, compiler_directives=directives,
                            annotate=ANNOTATE, force=ANNOTATE or DEBUG,
                            nthreads=os.cpu_count() or 1))
