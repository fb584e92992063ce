"""The package list, found rather than written by hand (pyproject.toml holds the rest).

probes/, kernels/, rules/ and snapshots/ live at the top of the repository but ship inside
the wheel as gpudiag.probes, gpudiag.kernels, gpudiag.rules and gpudiag.snapshots, so that no
top-level module called `probes` or `kernels` is installed. Every package below each of these
directories (any folder with an __init__.py, such as gpudiag/panes) is found and shipped under
its mapped name: a new subpackage cannot be left out of the wheel.
"""

from setuptools import find_packages, setup

PACKAGE_DIRS = {
    "gpudiag": "gpudiag",
    "gpudiag.probes": "probes",
    "gpudiag.kernels": "kernels",
    "gpudiag.rules": "rules",
    "gpudiag.snapshots": "snapshots",  # the demo files (gpudiag demo)
}

setup(
    package_dir=PACKAGE_DIRS,
    packages=[
        name
        for package, where in PACKAGE_DIRS.items()
        for name in (package, *(f"{package}.{sub}" for sub in find_packages(where)))
    ],
)
