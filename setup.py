"""Build script: the private Cython extensions peanut_py/_*.pyx, and the OpenCL kernels and type stubs as package data."""
import glob
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))


def version():
    ns = {}
    with open(os.path.join(here, "peanut_py", "_version.py")) as f:
        exec(f.read(), ns)
    return ns["__version__"]


SNAKEMAKE = "snakemake>=8; python_version >= '3.11'"
# Cython and the C compiler on every core: the extensions build in a fraction of the serial time on a many-core
# host. Cython's worker processes are forked, which only Linux does by default; elsewhere it runs in this process.
JOBS = os.cpu_count() or 1
CYTHON_JOBS = JOBS if sys.platform.startswith("linux") else 0

extensions = [
    Extension(
        "peanut_py." + os.path.splitext(os.path.basename(path))[0],
        [path],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for path in sorted(glob.glob("peanut_py/*.pyx"))
]

setup(
    name="peanut-py",
    version=version(),
    description="Portable OpenCL read mapper after PEANUT (q-group index, filtration, Myers validation)",
    long_description=open(os.path.join(here, "README.md")).read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=["peanut_py"],
    # The OpenCL sources and shared headers, and the type stubs of the private Cython modules.
    package_data={"peanut_py": ["kernels/*.cl", "kernels/*.clh", "*.pyi", "py.typed"]},
    ext_modules=cythonize(extensions, language_level=3, nthreads=CYTHON_JOBS,
                          compiler_directives={"boundscheck": False, "wraparound": False}),
    options={"build_ext": {"parallel": JOBS}},
    install_requires=["numpy>=1.24", "h5py>=3.8", "pyopencl>=2023.1", "pysam>=0.21", "dnaio>=1.2", "mako"],
    # Snakemake runs the scale-out workflow (workflow/Snakefile); it needs Python 3.11 or later.
    extras_require={
        "pocl": ["pyopencl[pocl]"],
        "workflow": [SNAKEMAKE],
        "test": ["pytest>=7", "hypothesis>=6", "mkdocs>=1.6", SNAKEMAKE],
    },
    entry_points={"console_scripts": ["peanut = peanut_py.cli:main"]},
    zip_safe=False,
)
