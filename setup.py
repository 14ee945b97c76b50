"""A wheel carries what `flnet reproduce` reads from a checkout: the papers' scenarios
(scenarios/papers/) and the studies that run them (analysis/), copied under
flnet/papers/shipped/ with the checkout's layout (`flnet.papers.sources` reads them there when
no checkout is beside the package). MANIFEST.in puts them in the sdist, so a wheel built from
it has them too. Everything else about the package is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = ("scenarios/papers/*/*.yaml", "analysis/*.py")  # as flnet.papers.sources reads them
INTO = Path("flnet", "papers", "shipped")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        found = [p for pattern in SHIPPED for p in sorted(HERE.glob(pattern))]
        if not found:
            raise SystemExit(f"no {' or '.join(SHIPPED)} under {HERE}: the papers would not ship")
        for source in found:
            target = Path(self.build_lib, INTO, source.relative_to(HERE))
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))


setup(cmdclass={"build_py": BuildPy})
