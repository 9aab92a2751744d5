"""pip install ./python: builds the extension with the project's CMake (no network, no
registry: Debian's setuptools, pybind11-dev and the system compiler), then installs the
`enclave` package. The build folder is build/python-pip in the source tree, reused."""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.join(ROOT, "build", "python-pip")
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        "-DBUILD_TESTING=OFF", "-DENCLAVE_BENCH=OFF", "-DENCLAVE_CUDA=OFF",
                        f"-DPython_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "_enclave", "-j", str(os.cpu_count() or 2)], check=True)
        built = [f for f in os.listdir(os.path.join(build, "python", "enclave")) if f.startswith("_enclave")]
        if len(built) != 1:
            raise RuntimeError(f"expected one _enclave module in {build}/python/enclave, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(build, "python", "enclave", built[0]), target)


setup(
    name="enclave",
    version="0.1.0",
    description="Attested sessions and sealed datasets for PyTorch (the confidential training enclave)",
    packages=["enclave"],
    package_dir={"enclave": "enclave"},
    ext_modules=[Extension("enclave._enclave", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.11",
)
