"""Plan time, read from git: the reference's code that a change modifies two imports away, and a
repository module that takes the name of an installed package the base's spec imports."""
from __future__ import annotations

from gpu_gate.rules import truth
from gpu_gate.rules.specrules import read_specs

SPEC = """\
import gpu_gate as gg
import somepkg.sub
from gate.common import ref


@gg.spec(dims={"n": gg.Dim(1, 8)}, inputs={"x": gg.Tensor(("n",))}, reference=ref)
def g(x):
    return x
"""


def _tree(make_repo):  # type: ignore[no-untyped-def]
    r = make_repo("proj", {"gate/__init__.py": "", "gate/g_gate.py": SPEC,
                           "gate/common.py": "from gate.util import total\nimport json\n\n\ndef ref(x):\n    return total(x)\n",
                           "gate/util.py": "def total(x):\n    return x\n"})
    rev = r.git("rev-parse", "HEAD")
    spec = read_specs(r.path, rev, ["gate/*_gate.py"])["gate/g_gate.py::g"]
    return r, truth.TruthTree(r.path, rev), spec


def test_a_helper_two_imports_away_is_named_with_the_module_that_leads_there(make_repo) -> None:  # type: ignore[no-untyped-def]
    _, tree, spec = _tree(make_repo)
    assert tree.reached(spec) == {"gate/__init__.py": "gate/common.py", "gate/util.py": "gate/common.py"}
    [change] = truth.helpers_changed(spec, tree, {"gate/util.py"})
    assert change.direction == "changed" and "gate/util.py (reached through gate/common.py)" in change.what
    assert truth.helpers_changed(spec, tree, {"mylib/ops.py"}) == []


def test_an_installed_package_the_repository_now_has_is_a_weakening(make_repo) -> None:  # type: ignore[no-untyped-def]
    _, tree, spec = _tree(make_repo)
    base = set(tree.snap.files)
    [change] = truth.shadowed_packages(spec, tree, base | {"somepkg/__init__.py"}, ("",))
    assert change.direction == "weakened" and change.file == "somepkg/__init__.py"
    assert "'somepkg' was an installed package at the base (imported by gate/g_gate.py)" in change.what
    # the standard library and what the workers import first are never shadowed; a namespace
    # directory never hides a regular installed package; another python_path root is looked at
    assert truth.shadowed_packages(spec, tree, base | {"json.py", "gpu_gate/__init__.py", "somepkg/x.py"}, ("",)) == []
    assert truth.local_module(frozenset({"src/somepkg.cpython-311-x86_64-linux-gnu.so"}), "somepkg", ("src",)) \
        == "src/somepkg.cpython-311-x86_64-linux-gnu.so"
