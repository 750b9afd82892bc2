"""``pytest --gpu-gate``: a library's gate specs run as tests in its own suite.

Registered as a pytest plugin (entry point ``gpu_gate``) and inactive until ``--gpu-gate`` is
given. It then collects the files that the repository's policy names as specs (``specs:`` in
``.gpu-gate.yml``, by default ``**/*_gate.py``) and makes one test per spec and check, run with
the same engine and settings as ``gpu-gate check`` (see :mod:`gpu_gate.testing`). A failure
shows the findings and their repro commands; a spec that cannot run here (GPU only, no GPU) is
skipped with the reason. On a machine without a usable GPU, Triton kernels run under Triton's
interpreter (``TRITON_INTERPRET=1`` is set for the session, unless it is set already).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpu-gate", "gpu-gate: run gate specs as tests")
    group.addoption("--gpu-gate", action="store_true", default=False,
                    help="collect the gate specs that .gpu-gate.yml names and run their checks as tests")
    group.addoption("--gpu-gate-checks", default="equivalence", metavar="CHECKS",
                    help="comma-separated checks to run per spec: equivalence, determinism (default: equivalence)")
    group.addoption("--gpu-gate-cases", type=int, default=None, metavar="N",
                    help="cases per spec (default: the policy's checks.equivalence.cases)")
    group.addoption("--gpu-gate-seed", type=int, default=None, metavar="SEED",
                    help="the seed of the cases (default: the policy's, else 0)")


class _Session:
    """The repository's policy and its spec files, read once per test session."""

    def __init__(self, config: pytest.Config) -> None:
        from .policy import load_policy
        from .testing import IN_PROCESS_CHECKS, repo_root_for

        self.root = repo_root_for(Path(str(config.rootpath)) / "conftest.py")
        self.policy = load_policy(self.root).policy
        self.checks = [c.strip() for c in str(config.getoption("--gpu-gate-checks")).split(",") if c.strip()]
        bad = [c for c in self.checks if c not in IN_PROCESS_CHECKS]
        if bad:
            raise pytest.UsageError(f"--gpu-gate-checks: {', '.join(bad)} cannot run inside pytest; choose from "
                                    f"{', '.join(IN_PROCESS_CHECKS)} (the gate runs the rest: gpu-gate check)")
        self.cases = config.getoption("--gpu-gate-cases")
        self.seed = config.getoption("--gpu-gate-seed")

    def is_spec_file(self, path: Path) -> bool:
        from .changes import match

        try:
            rel = path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return False
        return any(match(rel, glob) for glob in self.policy.specs)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Without a GPU, Triton kernels run only under Triton's interpreter, which Triton picks when a kernel
    is defined: so it is chosen here, before the first conftest imports the library."""
    if getattr(early_config.known_args_namespace, "gpu_gate", False):
        from .testing import interpret_without_gpu

        early_config.stash[_INTERPRET] = interpret_without_gpu()


_INTERPRET = pytest.StashKey[str | None]()


def pytest_report_header(config: pytest.Config) -> str | None:
    return config.stash.get(_INTERPRET, None)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--gpu-gate"):
        from .extras import install_line, lacking

        missing = lacking(["torch"])
        if missing:
            raise pytest.UsageError(install_line(missing, "pytest --gpu-gate"))
        config.stash[_KEY] = _Session(config)


_KEY = pytest.StashKey[_Session]()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    session = parent.config.stash.get(_KEY, None)
    if session is None or file_path.suffix != ".py" or not session.is_spec_file(file_path):
        return None
    return GateFile.from_parent(parent, path=file_path)


class GateFile(pytest.File):
    def collect(self) -> Any:
        import ast

        from .discovery import is_spec_decorator
        from .pyscan import functions, import_aliases, qualified_name

        session = self.config.stash[_KEY]
        tree = ast.parse(self.path.read_text(encoding="utf-8"), filename=str(self.path))
        aliases = import_aliases(tree)
        for fn in functions(tree):
            deco = next((d for d in fn.decorator_list if is_spec_decorator(qualified_name(d, aliases))), None)
            if deco is None:
                continue
            kw = {k.arg: k.value for k in deco.keywords if k.arg} if isinstance(deco, ast.Call) else {}
            named = kw.get("name")
            name = named.value if isinstance(named, ast.Constant) and isinstance(named.value, str) else fn.name
            for check in session.checks:
                yield GateItem.from_parent(self, name=f"{name}[{check}]", spec_name=name, check=check,
                                           line=fn.lineno)


class GateItem(pytest.Item):
    def __init__(self, *, spec_name: str, check: str, line: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.spec_name, self.check, self.line = spec_name, check, line

    def runtest(self) -> None:
        from .findings import Status
        from .testing import GateCheckFailed, run

        session = self.config.stash[_KEY]
        rel = self.path.resolve().relative_to(session.root.resolve()).as_posix()
        result = run(session.root, rel, self.spec_name, self.check, policy=session.policy, cases=session.cases,
                     seed=session.seed)
        if result.status is Status.NOT_RUN:
            raise pytest.skip.Exception(f"{self.check} not run: {result.reason}", _use_item_location=True)
        missing = [m for f in result.findings if (m := f.details.get("missing_module")) in ("torch", "triton")]
        if missing:  # the spec's kernels need a module gpu-gate's extras bring
            from .extras import install_line

            pytest.fail(install_line(sorted(set(missing)), f"{self.spec_name}"), pytrace=False)
        if result.status in (Status.FAILED, Status.ERROR):
            raise GateCheckFailed([result])

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        from .testing import GateCheckFailed

        if isinstance(excinfo.value, GateCheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.line - 1, f"gpu-gate {self.check}: {self.spec_name}"
