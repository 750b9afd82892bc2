"""Build hook: the wheel carries what `gpu-gate vendor` copies next to the package (the action's
action.yml, pyproject.toml, LICENSE and NOTICE), so that vendoring works from an installed wheel as
it does from a checkout. Everything else is declared in pyproject.toml."""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ACTION_FILES = ("action.yml", "pyproject.toml", "LICENSE", "NOTICE")  # gpu_gate/vendor.py reads this list


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout itself
            return
        here = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "gpu_gate" / "_action"
        target.mkdir(parents=True, exist_ok=True)
        for name in ACTION_FILES:
            shutil.copyfile(here / name, target / name)


setup(cmdclass={"build_py": BuildPy})
