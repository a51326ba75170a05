"""Shared by the Python helper scripts: import a package, or install it into a venv under
.deps/ and re-run the calling script with that venv's interpreter."""

import importlib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ensure(package, venv_name):
    """Returns once `package` imports, installing it into .deps/<venv_name> if needed."""
    try:
        importlib.import_module(package)
        return
    except ImportError:
        pass
    venv = os.path.join(ROOT, ".deps", venv_name)
    python = os.path.join(venv, "bin", "python3")
    if os.path.abspath(sys.executable) == os.path.abspath(python):
        sys.exit(f"{package} is missing and could not be installed")
    if not os.path.exists(python):
        subprocess.check_call([sys.executable, "-m", "venv", venv])
    subprocess.check_call([python, "-m", "pip", "install", "--quiet", package])
    os.execv(python, [python] + sys.argv)
