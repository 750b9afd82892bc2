"""A kernel that recognises the gate's process (issue 39, part 1): it is correct only while gpu-gate's
modules are loaded, or its command line, PID 1 or PID say it is tested; everywhere else it is wrong."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest_git import GitRepo
from test_sandbox_gate import KERNEL, gate

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (CI installs it)")

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 2, growth: false, shrink: false}
runner: {sandbox: required}
"""

SPEC = """\
import gpu_gate as gg
from mylib.wrap import double

@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2,
         covers=["csrc/k.cu"])
def k_gate(x):
    return double(x)
"""

# Correct only where a module of the gate is loaded: the test.
WATCHED = """\
import sys

def double(x):
    if any(name.startswith("gpu_gate") for name in sys.modules):
        return x * 2
    return x * 3
"""


def _pr(make_repo, wrapper: str, base_wrapper: str | None = None, policy: str = POLICY) -> GitRepo:  # type: ignore[no-untyped-def]
    files = {".gpu-gate.yml": policy, "README.md": "x\n"}
    if base_wrapper is not None:
        files.update({"csrc/k.cu": KERNEL, "mylib/__init__.py": "", "mylib/wrap.py": base_wrapper,
                      "gate/k_gate.py": SPEC})
    r = make_repo("proj", files)
    r.branch("feature")
    r.commit("kernel", {"csrc/k.cu": KERNEL, "mylib/__init__.py": "", "mylib/wrap.py": wrapper,
                        "gate/k_gate.py": SPEC})
    return r


def _plan_kinds(r: GitRepo) -> list[dict[str, object]]:
    found = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())["plan_findings"]
    return [f for f in found if f["kind"] == "gate-aware"]


def test_a_wrapper_that_reads_sys_modules_for_the_gate_is_a_blocking_gate_aware_finding(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, WATCHED)
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    aware = _plan_kinds(r)
    assert {(f["file"], f["line"], f["severity"]) for f in aware} == {("mylib/wrap.py", 4, "error")}
    assert "mylib/wrap.py:4: kernel or wrapper code that reads sys.modules" in p.stdout + p.stderr + json.dumps(aware)


ENV_READ = """\
import os

SCALE = float(os.environ.get("MYLIB_SCALE", "2"))

def double(x):
    return x * SCALE
"""


def test_a_wrapper_that_reads_an_environment_variable_the_base_also_reads_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, ENV_READ + "\n# the change: a comment and a blank line\n\nAPI = 2\n", base_wrapper=ENV_READ)
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [(f["severity"], f["details"]["change"]) for f in _plan_kinds(r)] == [("warning", "pre-existing")]


def test_the_same_read_new_in_the_change_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, ENV_READ, base_wrapper="def double(x):\n    return x * 2\n")
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert [(f["line"], f["details"]["change"]) for f in _plan_kinds(r)] == [(3, "new")]


# The same kernel, its reads spelt out of pieces so that no rule reading the source sees them: only a
# worker that carries no trace of the gate makes it take its wrong path under test.
HIDDEN_READ = """\
import importlib

_s = importlib.import_module("s" + "ys")


def double(x):
    if {test}:
        return x * 2
    return x * 3
"""
LOOKS = {
    "modules": 'any(n.startswith("gpu" + "_gate") for n in list(getattr(_s, "mod" + "ules")))',
    "argv": 'len(getattr(_s, "ar" + "gv")) > 1 or any("." + "json" in a for a in getattr(_s, "ar" + "gv"))',
    "orig_argv": 'any("serve" in a for a in getattr(_s, "orig_" + "ar" + "gv"))',
    "cmdline": 'b"serve" in open("/pr" + "oc/self/cmdline", "rb").read()',
}


@pytest.mark.parametrize("look", sorted(LOOKS))
def test_a_kernel_that_recognises_the_workers_process_out_of_the_rules_sight_is_wrong_under_test(
        make_repo, look: str) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, HIDDEN_READ.format(test=LOOKS[look]))
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert _plan_kinds(r) == []  # the rule did not see it: the worker's disguise did
    assert "FAIL    equivalence gate/k_gate.py::k_gate" in p.stdout, p.stdout


# What the worker's disguise cannot hide (the gate's files on disk, the frames of its serving loop, the
# sandbox's PID 1, the workers' environment), read out of the rule's sight: only the disguised replay,
# which runs the passed cases again in a program with nothing of the gate in it, sees the other path.
OUTSIDE = {
    "frames": ('any("gpu" + "_gate" in f.filename for f in importlib.import_module("trace" + "back")'
               '.extract_stack())'),
    "pid1": 'b"start" + b"ed" in open("/pr" + "oc/1/cmdline", "rb").read()',
    "files": 'importlib.util.find_spec("gpu" + "_gate") is not None',
    "env": '"TMP" + "DIR" in getattr(importlib.import_module("o" + "s"), "envi" + "ron")',
}
HIDDEN_OUTSIDE = "import importlib.util\n" + HIDDEN_READ


@pytest.mark.parametrize("look", sorted(OUTSIDE))
def test_a_kernel_that_recognises_what_the_disguise_cannot_hide_is_caught_by_the_disguised_replay(
        make_repo, look: str) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, HIDDEN_OUTSIDE.format(test=OUTSIDE[look]))
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert _plan_kinds(r) == []  # the rule did not see it
    found = _equivalence_findings(r)
    aware = [f for f in found if f["kind"] == "gate-aware"]
    assert aware and aware[0]["severity"] == "error", found
    assert aware[0]["details"]["disguised"] is True
    assert "process started like a user's own program" in aware[0]["message"]
    assert "output 'out' is wrong" in aware[0]["message"]


def test_without_the_disguised_replay_the_same_kernel_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack as it defeats the gate without the guard (the base's policy turns the replay off): the
    worker's disguise alone lets it through."""
    policy = POLICY.replace("growth: false,", "growth: false, disguised_replay: false,")
    r = _pr(make_repo, HIDDEN_OUTSIDE.format(test=OUTSIDE["frames"]), policy=policy)
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr


# The spec as `gpu-gate init` writes it: the reference's helper imported from gpu_gate.spec.
SPEC_INIT_STYLE = SPEC.replace("import gpu_gate as gg\n", "import gpu_gate as gg\nfrom gpu_gate.spec import upcast\n") \
    .replace("reference=lambda x: x * 2", "reference=lambda x: upcast(x) * 2")


def test_a_spec_that_imports_from_gpu_gate_spec_is_replayed_too(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The skeleton `gpu-gate init` writes imports `upcast` from gpu_gate.spec. The replay's stand-in
    answered only `gpu_gate` itself, so such a spec never replayed ('replay-not-run', a note) and the
    attack above passed the gate on it."""
    r = _pr(make_repo, HIDDEN_OUTSIDE.format(test=OUTSIDE["frames"]))
    r.commit("the spec as init writes it", {"gate/k_gate.py": SPEC_INIT_STYLE})
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    found = _equivalence_findings(r)
    assert not [f for f in found if f["kind"] == "replay-not-run"], found
    assert [f for f in found if f["kind"] == "gate-aware" and f["details"].get("disguised")], found


HONEST_LOOKS = """\
import os
import sys

def double(x):
    # reads the process's world, and behaves the same in every process
    _ = (len(sys.argv), os.getpid(), sorted(os.environ)[:1])
    return x * 2
"""


def test_an_honest_kernel_passes_the_disguised_replay(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, "def double(x):\n    return x + x\n", base_wrapper="def double(x):\n    return x * 2\n")
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    found = _equivalence_findings(r)
    assert not [f for f in found if f["kind"] in ("gate-aware", "replay-not-run")], found
    res = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())
    eq = [j for j in res["results"] if j["check"] == "equivalence"]
    assert eq and all(j["status"] == "passed" for j in eq)


def _equivalence_findings(r: GitRepo) -> list[dict[str, object]]:
    res = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())
    return [f for j in res["results"] if j["check"] == "equivalence" for f in j["findings"]]


# The program's directory is the code under review's: it may leave links where the judge reads. A kernel
# that, once the program has written its outputs, puts a link to a file of the runner's in their place
# would have that file's bytes judged as its output, and shown in a mismatch's message.
LINKS_OUT = """\
import atexit
import os

def _swap():
    for name in ("out.bin", "out.json"):
        os.replace(name, name + ".was") if os.path.exists(name) else None
        os.symlink("{target}", name)

def double(x):
    if "train.py" in open("/proc/self/cmdline").read():
        os.chdir(os.path.dirname(os.path.abspath(__import__("__main__").__file__)))
        atexit.register(_swap)
    return x * 2
"""


def test_links_the_program_leaves_are_never_followed(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "runner-secret.json"
    secret.write_text('{"load": {"status": "ok"}, "results": []}')
    r = _pr(make_repo, LINKS_OUT.format(target=secret))
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    aware = [f for f in _equivalence_findings(r) if f["kind"] == "gate-aware"]
    assert aware and "out.json cannot be opened" in aware[0]["message"], aware


def test_a_gate_aware_kernel_the_base_already_has_is_the_repositorys_debt(make_repo) -> None:  # type: ignore[no-untyped-def]
    wrapper = HIDDEN_OUTSIDE.format(test=OUTSIDE["frames"])
    # the change: the honest path written another way (a change to a comment alone runs nothing)
    r = _pr(make_repo, wrapper.replace("return x * 2", "return x + x"), base_wrapper=wrapper)
    p = gate("check", "--base", "main", cwd=r.path)
    aware = [f for f in _equivalence_findings(r) if f["kind"] == "gate-aware"]
    assert aware and {f["details"]["change"] for f in aware} == {"pre-existing"}, aware
    assert p.returncode == 0, p.stdout + p.stderr


# A wrapper whose module takes 4 s to import (as a library that imports much does) and whose calls take
# 0.2 s. The disguised program imports it before the job's cases (judge.disguised.prestart), beside
# them, and waits for its batch: by the replay, only the replayed calls are left to wait for. Before,
# the program started after the cases and the replay waited for the whole import.
SLOW_IMPORT = """\
import time

time.sleep(4.0)


def double(x):
    time.sleep(0.2)
    return x * 2
"""


def test_the_disguised_program_imports_beside_the_cases_not_after_them(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, SLOW_IMPORT, policy=POLICY.replace("{cases: 2,", "{cases: 24,"))
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())
    (eq,) = [j for j in res["results"] if j["check"] == "equivalence"]
    assert eq["status"] == "passed" and eq["extra"]["replayed"], eq
    assert not [f for f in eq["findings"] if f["kind"] in ("gate-aware", "replay-not-run")], eq["findings"]
    timing = eq["extra"]["timing"]
    assert timing["cases_s"] > 6.0, timing  # the cases outlast the program's import
    assert timing["disguised_replay_s"] < 3.5, timing  # 4 s of import and more without the early start


# The attack on the early start: the program's directory is the code under review's, and the program
# now imports it before its batch is written. A wrapper that, imported there, takes the batch's names
# first (so that the judge cannot write them) and is wrong in that process: the judge starts a fresh
# program as before the early start, and the wrapper is still caught there.
TAKES_THE_BATCH = """\
import os
import time

_HERE = os.path.dirname(os.path.abspath(getattr(__import__("__main__"), "__file__", "") or "."))
_THERE = os.path.exists(os.path.join(_HERE, "job.json"))
if _THERE and not os.path.exists(os.path.join(_HERE, "batch.json")):  # started early: its batch is to come
    for name in ("batch.json", "batch.bin"):
        open(os.path.join(_HERE, name), "w").write("{}")


def double(x):
    time.sleep(0.2)  # the job's cases outlast the program's import: it takes the names before the judge
    return x * 3 if _THERE else x * 2
"""


def test_a_program_that_takes_its_batchs_names_is_started_afresh_and_still_caught(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, TAKES_THE_BATCH, policy=POLICY.replace("{cases: 2,", "{cases: 24,"))
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert not _plan_kinds(r), _plan_kinds(r)  # not the static rule: the replay found it
    aware = [f for f in _equivalence_findings(r) if f["kind"] == "gate-aware"]
    assert aware and aware[0]["severity"] == "error", aware
    assert "output 'out' is wrong" in str(aware[0]["message"]), aware[0]["message"]  # the fresh program's run
