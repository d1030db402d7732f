"""Build of the Cython kernels in beava/_fast (metadata lives in pyproject.toml).

Every ``beava/_fast/*.pyx`` is one extension module. ``BEAVA_BUILD_ONLY=a,b`` limits a
local build to those modules (handy while working on one kernel).
"""

import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
only = {name for name in os.environ.get("BEAVA_BUILD_ONLY", "").split(",") if name}
sources = sorted((HERE / "beava" / "_fast").glob("*.pyx"))
extensions = [
    Extension(f"beava._fast.{path.stem}", [str(path.relative_to(HERE))],
              extra_compile_args=["-O2"])
    for path in sources
    if not only or path.stem in only
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "boundscheck": False,
                             "wraparound": False, "cdivision": True},
        include_path=[str(HERE)],
        quiet=True,
    )
)
