"""The bytecode kept between runs (gpu_gate.store.bytecode): what a worker names, what the gate compiles,
and that a later run's interpreter loads it instead of compiling the source again."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gpu_gate.job_extra import JobExtra
from gpu_gate.store import bytecode
# the compiled-kernel store's scratch project: a policy with only equivalence, a spec of row sums
from test_compiled_store import POLICY, SPEC


def _library(tmp: Path) -> tuple[Path, Path]:
    """A runner's library directory with one package, and a repository beside it."""
    lib = tmp / "site-packages"
    (lib / "heavy").mkdir(parents=True)
    (lib / "heavy" / "__init__.py").write_text("VALUE = 41 + 1\n")
    (lib / "heavy" / "part.py").write_text("def f():\n    return 'part'\n")
    repo = tmp / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("from heavy import VALUE\n")
    return lib, repo


def _missing_in_worker(prefix: Path, lib: Path, repo: Path) -> list[str]:
    """What a worker run with the bytecode prefix reports after importing the repository's package."""
    code = ("import json, sys; from pathlib import Path; import pkg, heavy.part\n"
            "from gpu_gate.store.bytecode import uncompiled_modules\n"
            f"print(json.dumps(uncompiled_modules(Path({str(repo)!r}))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(lib), str(Path(__file__).parents[2])])}
    out = subprocess.run([sys.executable, "-X", f"pycache_prefix={prefix}", "-c", code], env=env,
                         capture_output=True, text=True, check=True, cwd=repo).stdout
    return [f for f in json.loads(out) if f.startswith(str(lib)) or f.startswith(str(repo))]


def test_what_a_worker_imported_without_bytecode_is_kept_and_loaded_by_the_next_run(tmp_path: Path) -> None:
    lib, repo = _library(tmp_path)
    first = tmp_path / "run1"
    named = _missing_in_worker(first, lib, repo)
    # the library's modules had no bytecode; the repository's own are never named
    assert sorted(Path(f).name for f in named) == ["__init__.py", "part.py"]
    assert not any(f.startswith(str(repo)) for f in named)

    store = tmp_path / "cache" / "bytecode" / "x"
    files = bytecode.admissible(named, roots=[lib.resolve()], forbidden=[repo])
    assert bytecode.compile_into(store, files) == 2
    second = tmp_path / "run2"
    second.mkdir()
    assert bytecode.seed(store, second) == 2
    # the next run's worker finds fresh bytecode for both: nothing compiled from source again
    assert _missing_in_worker(second, lib, repo) == []
    # hard links, not copies: the seed costs no copying
    pyc = bytecode.prefixed(second, str(lib / "heavy" / "part.py"))
    assert os.stat(pyc).st_ino == os.stat(bytecode.prefixed(store, str(lib / "heavy" / "part.py"))).st_ino


def test_bytecode_of_a_changed_source_is_stale_and_compiled_again(tmp_path: Path) -> None:
    lib, repo = _library(tmp_path)
    store = tmp_path / "store"
    part = lib / "heavy" / "part.py"
    bytecode.compile_into(store, [str(part)])
    assert bytecode.fresh(bytecode.prefixed(store, str(part)), str(part))
    part.write_text("def f():\n    return 'upgraded, longer'\n")  # a package upgraded on the runner
    assert not bytecode.fresh(bytecode.prefixed(store, str(part)), str(part))
    run = tmp_path / "run"
    bytecode.seed(store, run)
    assert [Path(f).name for f in _missing_in_worker(run, lib, repo)] == ["__init__.py", "part.py"]


def test_the_gate_compiles_only_the_runners_own_files_a_worker_names(tmp_path: Path) -> None:
    """The attack: a worker (the code under review) names the repository's files, the base's tree,
    a file of its own job directory, a link from the library into the repository, and files that are
    not Python source. The gate must compile none of them: bytecode of the head's code kept in the
    store would be loaded by a later run's base worker for a file with the same path, size and time.
    The legitimate twin: the library's own module is kept."""
    lib, repo = _library(tmp_path)
    base = tmp_path / "base-tree"
    (base / "pkg").mkdir(parents=True)
    (base / "pkg" / "__init__.py").write_text("x = 1\n")
    job = tmp_path / "work" / "job1"
    job.mkdir(parents=True)
    (job / "planted.py").write_text("x = 2\n")
    (lib / "link.py").symlink_to(repo / "pkg" / "__init__.py")
    (lib / "data.txt").write_text("not python\n")
    named = [str(repo / "pkg" / "__init__.py"), str(base / "pkg" / "__init__.py"), str(job / "planted.py"),
             str(lib / "link.py"), str(lib / "data.txt"), str(lib / "nope.py"), 42, "a\nb.py",
             str(lib / "heavy" / "part.py")]
    kept = bytecode.admissible(named, roots=[lib.resolve()], forbidden=[repo, base, tmp_path / "work"])
    assert kept == [str((lib / "heavy" / "part.py").resolve())]
    # a library root that holds the repository (a package installed in place) still keeps it out
    assert bytecode.admissible([str(repo / "pkg" / "__init__.py")], roots=[tmp_path.resolve()],
                               forbidden=[repo]) == []


def test_the_keeper_compiles_what_workers_named_beside_the_jobs_and_drops_the_lists(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    lib, repo = _library(tmp_path)
    monkeypatch.setattr(bytecode, "library_roots", lambda: [lib.resolve()])
    part, init = str(lib / "heavy" / "part.py"), str(lib / "heavy" / "__init__.py")
    store = tmp_path / "store"
    keeper = bytecode.Keeper(store, (repo, None))
    results = [types.SimpleNamespace(extra=JobExtra.from_json({"bytecode_missing": [part, str(repo / "pkg" / "__init__.py")],
                                                               "x": 1})),
               types.SimpleNamespace(extra=JobExtra.from_json({"bytecode_missing": "not a list"})),
               types.SimpleNamespace(extra=JobExtra()),
               types.SimpleNamespace(extra=JobExtra(bytecode_missing=[part, init]))]  # part again: compiled once
    for r in results:
        keeper.take(r)
    kept, _ = keeper.finish()
    assert kept == 2
    assert all(r.extra.bytecode_missing is None for r in results) and results[0].extra.to_json() == {"x": 1}
    assert bytecode.fresh(bytecode.prefixed(store, part), part) and bytecode.fresh(bytecode.prefixed(store, init), init)
    assert not bytecode.prefixed(store, str(repo / "pkg" / "__init__.py")).exists()
    # no store (jobs ran unsandboxed, or no result cache): the lists still go, nothing is compiled
    results = [types.SimpleNamespace(extra=JobExtra(bytecode_missing=[init]))]
    keeper = bytecode.Keeper(None, (repo,))
    keeper.take(results[0])
    assert keeper.finish()[0] == 0 and results[0].extra.to_json() == {}


OPS = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"

# The head's code names its own file as a module without bytecode (replacing the worker's answer),
# and tries to write bytecode into the run's shared directory.
HEAD_OPS = OPS + """
import os, sys
import gpu_gate.store.bytecode as _b

_real = _b.uncompiled_modules
_b.uncompiled_modules = lambda exclude: _real(exclude) + [os.path.abspath(__file__)]
try:
    os.makedirs(sys.pycache_prefix + "/planted", exist_ok=True)
    open(sys.pycache_prefix + "/planted/x.pyc", "w").write("planted")
except OSError:
    pass
"""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (CI installs it)")
def test_a_gate_keeps_the_runners_bytecode_and_the_next_run_starts_from_it(make_repo, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two real gates, sandboxed, on a runner whose torch has no bytecode (as images built with
    ``pip install --no-compile`` are): the first keeps what its workers compiled from source; the
    second starts from it and has almost nothing left to keep. The head's code cannot get its own
    file into the store, nor plant bytecode in the run's directory."""
    import contextlib

    from gpu_gate import cli
    from gpu_gate.executor import scheduling

    r = make_repo("proj", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": OPS,
                           "csrc/rows.cu": "// rows\n", "gate/rows_gate.py": SPEC})
    r.branch("feature")
    r.commit("pull request", {"mylib/ops.py": HEAD_OPS, "csrc/rows.cu": "// rows, tuned\n"})
    cache = r.path / ".gpu-gate" / "cache"
    monkeypatch.setattr(scheduling, "installed_without_bytecode", lambda package="torch": True)
    monkeypatch.chdir(r.path)

    def run(capsys_text: list[str]) -> None:
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            cli.main(["check", "--base", "main", "--cpu", "--cache-dir", str(cache)])
        capsys_text.append(buf.getvalue())

    first: list[str] = []
    run(first)
    kept = [line for line in first[0].splitlines() if line.startswith("bytecode: kept")]
    assert kept, first[0]
    n_first = int(kept[0].split()[2])
    stores = list((cache / "bytecode").iterdir())
    assert len(stores) == 1
    pycs = [p for p in stores[0].rglob("*.pyc")]
    assert len(pycs) >= n_first
    # only the runner's own files: nothing of the repository, nothing the head planted
    repo_rel = str(r.path.resolve()).lstrip("/")
    assert not any(str(p.relative_to(stores[0])).startswith(repo_rel) for p in pycs)
    assert not any("planted" in str(p) for p in stores[0].rglob("*"))
    r.commit("again", {"csrc/rows.cu": "// rows, tuned twice\n"})
    second: list[str] = []
    run(second)
    again = [line for line in second[0].splitlines() if line.startswith("bytecode: kept")]
    n_second = int(again[0].split()[2]) if again else 0
    assert n_second < n_first / 10, (n_first, n_second)


def test_torchs_bytecode_is_filled_into_the_store_once_and_later_runs_skip_the_fill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's own fill (``import torch`` with the run's bytecode prefix, before the first job)
    took 5 to 7 s of every run on an H100 runner: its bytecode was made in the run's directory and
    thrown away. With a store it is made there, and a later run finds it fresh."""
    import importlib.util
    import py_compile

    from gpu_gate.executor import scheduling

    origin = importlib.util.find_spec("torch").origin  # type: ignore[union-attr]
    fills: list[str] = []

    def fake_fill(argv: list[str], **_: object) -> object:
        # the interpreter's own fill, cut to torch's __init__ (what `fresh` looks at)
        prefix = next(a.split("=", 1)[1] for a in argv if a.startswith("pycache_prefix="))
        fills.append(prefix)
        py_compile.compile(origin, cfile=str(bytecode.prefixed(Path(prefix), origin)), doraise=True)
        return None

    monkeypatch.setattr(scheduling, "installed_without_bytecode", lambda: True)
    monkeypatch.setattr(scheduling.proc, "run", fake_fill)
    store = tmp_path / "cache" / "bytecode" / "x"
    with scheduling.shared_bytecode(tmp_path, store) as first:
        assert first is not None and bytecode.fresh(bytecode.prefixed(first, origin), origin)
    assert fills == [str(store)]  # made in the store, by the gate, not in the run's directory
    with scheduling.shared_bytecode(tmp_path, store) as second:
        assert second is not None and bytecode.fresh(bytecode.prefixed(second, origin), origin)
    assert fills == [str(store)]  # the second run found it: no fill
    # without a store (no result cache, or jobs that could write through the links) the run's
    # directory is filled every time, and nothing outlives the run
    with scheduling.shared_bytecode(tmp_path, None) as third:
        assert third is not None and fills[-1] == str(third)
    assert not third.exists()
