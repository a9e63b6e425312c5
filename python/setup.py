"""Build qac._qac with the repository's CMake build (the only build of libqac).

QAC_BUILD_DIR=DIR reuses a configured build tree (scripts/test.sh passes its
own); otherwise a Release build is configured under setuptools' build_temp
for the repository this file sits in. Extra CMake options (say
-DQAC_CUDA=OFF) come from QAC_CMAKE_ARGS."""
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("QAC_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp), "cmake")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, *gen, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DQAC_PYTHON_MODULE=ON", f"-DQAC_PYTHON={sys.executable}",
                                   *shlex.split(os.environ.get("QAC_CMAKE_ARGS", ""))])
        subprocess.check_call(["cmake", "--build", build, "--target", "qac_python", "-j", str(os.cpu_count() or 1)])
        built = glob.glob(os.path.join(build, "python", "qac", "_qac*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one qac/_qac*.so in {build}/python, found {built}")
        if not built[0].endswith(sysconfig.get_config_var("EXT_SUFFIX")):
            raise RuntimeError(f"{built[0]} was built for another Python than {sys.executable} "
                               f"(QAC_BUILD_DIR {build} was configured with another QAC_PYTHON)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(ext_modules=[Extension("qac._qac", sources=[])], cmdclass={"build_ext": CMakeBuild})
