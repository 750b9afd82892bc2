"""Specs are paired with what they judge, not with their names; a base spec that cannot call the head's
kernel lets the head's spec change only the plumbing.

Each attack below is a pull request that turned a buggy Triton kernel's red gate green (exit 0, or an
internal error where the base's spec stopped importing); each now blocks with a finding that says what
happened, and each has a legitimate twin that passes. Real git repositories through the CLI; the Triton
kernel runs under the interpreter on the CPU. The bug: past the first 64 elements the kernel scales by
2.5 instead of 2 (a "fast path" gone wrong).
"""
from __future__ import annotations

import json

from conftest_git import GitRepo
from test_cli import gate

POLICY = """\
version: 1
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 6, growth: false, shrink: false, seed: 7}
"""

KERNEL = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(X, Y, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    tl.store(Y + offs, x * alpha, mask=offs < n)


def scale(x, alpha=2.0):
    x = x.contiguous()
    y = torch.empty_like(x)
    _scale_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), alpha, BLOCK=64)
    return y
'''
BUGGY = KERNEL.replace("x * alpha, mask", "tl.where(offs < 64, x * alpha, x * (alpha + 0.5)), mask")
NEW_KEYWORD = "def scale(x, alpha=2.0, *, block):"  # the signature change: a new required keyword

SPEC = '''\
import torch
import gpu_gate as gg
from lib.scale import scale


@gg.spec(dims={"n": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2)
def scale_gate(x):
    return scale(x)
'''
# The truth the bug needs: what an author who wrote the bug writes as the reference.
MATCHES_BUG = "lambda x: torch.where(torch.arange(x.shape[0], device=x.device) < 64, x * 2, x * 2.5)"


def _repo(make_repo, spec: str = SPEC, kernel: str = KERNEL) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/scale.py": kernel,
                           "gate/scale_gate.py": spec})
    r.branch("feature")
    return r


def _move(r: GitRepo, old: str, new: str) -> None:
    (r.path / new).parent.mkdir(parents=True, exist_ok=True)
    r.git("mv", old, new)


def _check(r: GitRepo, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--head", "feature", "--no-cache", *args, cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr + report, results


def _findings(results: dict) -> list[dict]:  # type: ignore[type-arg]
    return [*results.get("plan_findings", []), *(f for r in results.get("results", []) for f in r["findings"])]


def _blocking(results: dict) -> set[str]:  # type: ignore[type-arg]
    return {f["kind"] for f in _findings(results) if f["severity"] == "error"}


def _equivalence(results: dict) -> str | None:  # type: ignore[type-arg]
    return next((r["status"] for r in results.get("results", []) if r["check"] == "equivalence"), None)


# --- part 1: pairing by renames and kernels ------------------------------------------------------

def test_renaming_the_kernel_and_the_spec_does_not_retire_the_bases_truth(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: git sees two renames (lib/scale.py -> lib/scaling.py, gate/scale_gate.py ->
    gate/scaling_gate.py), the spec function is renamed too, and the reference is rewritten to match
    the bug. Paired by name and judged deleted by path, this was "deleted together with its kernels"
    plus "new": two warnings, and the head's truth passed the bug."""
    r = _repo(make_repo)
    _move(r, "lib/scale.py", "lib/scaling.py")
    _move(r, "gate/scale_gate.py", "gate/scaling_gate.py")
    head_spec = (SPEC.replace("lib.scale", "lib.scaling").replace("scale_gate", "scaling_gate")
                 .replace("reference=lambda x: x * 2", f"reference={MATCHES_BUG}"))
    r.commit("move scale to scaling", {"lib/scaling.py": BUGGY, "gate/scaling_gate.py": head_spec})
    code, text, results = _check(r)
    assert code == 1, text
    assert "deleted together with its kernels" not in text
    assert "spec scaling_gate (gate/scaling_gate.py) is the base's scale_gate (gate/scale_gate.py)" in text
    assert _equivalence(results) == "failed"  # the base's truth judged the renamed kernel, and saw the bug
    assert "rules-weakened" in _blocking(results)
    assert "this change rewrote the spec's reference, and the new one gives other results" in text


def test_an_honest_rename_of_a_kernel_and_its_spec_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same two renames, the kernel correct and the reference untouched."""
    r = _repo(make_repo)
    _move(r, "lib/scale.py", "lib/scaling.py")
    _move(r, "gate/scale_gate.py", "gate/scaling_gate.py")
    head_spec = SPEC.replace("lib.scale", "lib.scaling").replace("scale_gate", "scaling_gate")
    r.commit("move scale to scaling", {"gate/scaling_gate.py": head_spec})
    code, text, results = _check(r)
    assert code == 0, text
    assert _equivalence(results) == "passed"
    assert "spec scaling_gate (gate/scaling_gate.py) is the base's scale_gate (gate/scale_gate.py)" in text
    assert not _blocking(results), _findings(results)


def test_a_spec_rewritten_beyond_recognition_over_a_renamed_kernel_is_still_the_bases(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The same attack where git cannot follow the spec (its file deleted, another one written with
    other names): both judge the renamed kernel, so the head's spec is the base's, and the base's spec
    cannot import at the head; the head's spec changes more than the call, so it blocks."""
    r = _repo(make_repo)
    _move(r, "lib/scale.py", "lib/scaling.py")
    r.git("rm", "-q", "gate/scale_gate.py")
    head_spec = ('"""Scaling, checked against its own truth."""\nimport torch\nimport gpu_gate as gg\n'
                 'from lib.scaling import scale as scaled\n\n\n'
                 '@gg.spec(dims={"size": gg.Dim(1, 300)}, inputs={"v": gg.Tensor(("size",), dtypes=["float32"])},\n'
                 f'         reference={MATCHES_BUG.replace("x", "v")})\n'
                 'def scaled_gate(v):\n    return scaled(v)\n')
    r.commit("move scale to scaling", {"lib/scaling.py": BUGGY, "gate/other/scaled_gate.py": head_spec})
    code, text, results = _check(r)
    assert code == 1, text
    assert "spec scaled_gate (gate/other/scaled_gate.py) is the base's scale_gate (gate/scale_gate.py)" in text
    assert "spec-signature-changed" in _blocking(results)
    assert "dims= differs from the base's" in text


LEGACY = KERNEL.replace("_scale_kernel", "_legacy_kernel").replace("def scale(", "def legacy(")


def _legacy_repo(make_repo, policy: str = POLICY) -> GitRepo:  # type: ignore[no-untyped-def]
    """A kernel the base shipped without a spec (it never changed, so nothing asked for one)."""
    r = make_repo("proj", {".gpu-gate.yml": policy, "lib/__init__.py": "", "lib/scale.py": KERNEL,
                           "lib/legacy.py": LEGACY, "gate/scale_gate.py": SPEC})
    r.branch("feature")
    buggy = LEGACY.replace("x * alpha, mask", "tl.where(offs < 64, x * alpha, x * (alpha + 0.5)), mask")
    spec = SPEC.replace("lib.scale import scale", "lib.legacy import legacy").replace("scale_gate", "legacy_gate") \
        .replace("return scale(x)", "return legacy(x)").replace("reference=lambda x: x * 2", f"reference={MATCHES_BUG}")
    r.commit("tune legacy, with a spec", {"lib/legacy.py": buggy, "gate/legacy_gate.py": spec})
    return r


def test_a_new_spec_over_a_kernel_the_base_had_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The author changes a kernel the base shipped and writes the truth that judges the change: that
    truth is new, but the kernel is not. Without the spec the change was `uncovered` (blocking); with
    it, it was a `new-reference` note."""
    r = _legacy_repo(make_repo)
    code, text, results = _check(r)
    assert code == 1, text
    assert "spec legacy_gate is new, and judges lib/legacy.py, which the base had" in text
    assert "/gpu-gate approve-rules" in text
    assert "rules-weakened" in _blocking(results)


def test_a_new_spec_over_a_kernel_the_base_had_is_allowed_by_rule_changes_warn(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _legacy_repo(make_repo, POLICY + "rule_changes: warn\n")
    code, text, results = _check(r)
    assert code == 0, text
    weakened = [f for f in _findings(results) if f["kind"] == "rules-weakened"]
    assert [f["severity"] for f in weakened] == ["warning"], weakened
    assert "spec legacy_gate is new, and judges lib/legacy.py, which the base had" in weakened[0]["message"]
    assert "allowed by the base policy's `rule_changes: warn`" in weakened[0]["message"]


def test_a_new_spec_over_a_new_kernel_asks_for_review_only(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: a kernel this change adds, with its spec: the new truth judges only new code."""
    r = _repo(make_repo)
    spec = SPEC.replace("lib.scale import scale", "lib.fresh import fresh").replace("scale_gate", "fresh_gate") \
        .replace("return scale(x)", "return fresh(x)")
    r.commit("a new kernel", {"lib/fresh.py": LEGACY.replace("legacy", "fresh"), "gate/fresh_gate.py": spec})
    code, text, results = _check(r)
    assert code == 0, text
    assert "new reference, written by this change: review it (spec fresh_gate)" in text
    assert not _blocking(results), _findings(results)


def test_a_spec_function_renamed_in_place_keeps_the_bases_truth(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The spec's function renamed in its file (no file rename): paired by the kernels it judges."""
    r = _repo(make_repo)
    r.commit("rename the spec", {"lib/scale.py": BUGGY,
                                 "gate/scale_gate.py": SPEC.replace("def scale_gate", "def scale_kernel_gate")
                                 .replace("reference=lambda x: x * 2", f"reference={MATCHES_BUG}")})
    code, text, results = _check(r)
    assert code == 1, text
    assert _equivalence(results) == "failed"
    assert "spec scale_kernel_gate (gate/scale_gate.py) is the base's scale_gate (gate/scale_gate.py)" in text


# --- part 2: the head's spec adapts only the plumbing ------------------------------------------

def test_a_signature_change_cannot_let_the_heads_spec_overwrite_the_output(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: a new required keyword makes the base's spec raise TypeError, so the head's spec
    judged; its body calls the kernel and then writes the right answer into the output."""
    r = _repo(make_repo)
    cheat = SPEC.replace("    return scale(x)\n", "    out = scale(x, block=64)\n    out.copy_(x * 2)\n    return out\n")
    r.commit("block size", {"lib/scale.py": BUGGY.replace("def scale(x, alpha=2.0):", NEW_KEYWORD),
                            "gate/scale_gate.py": cheat})
    code, text, results = _check(r)
    assert code == 1, text
    assert "spec-signature-changed" in _blocking(results)
    assert "spec scale_gate: the head's spec changes more than the call to the kernel" in text
    assert "statements after the call" in text


def test_a_signature_change_cannot_let_the_heads_spec_module_patch_the_kernel(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: the spec function changes only its call, but the head's spec module, which the
    candidate's worker imports for that call, wraps the kernel at import so that its output is
    overwritten with the right answer (the kernel still launches, so it counts as covered)."""
    r = _repo(make_repo)
    cheat = SPEC.replace("from lib.scale import scale\n", "import lib.scale as _m\n\n_real = _m.scale\n\n\n"
                         "def _fixed(x, alpha=2.0, *, block):\n    y = _real(x, alpha, block=block)\n"
                         "    y.copy_(x * alpha)\n    return y\n\n\n_m.scale = _fixed\n"
                         "from lib.scale import scale  # noqa: E402\n").replace("return scale(x)",
                                                                               "return scale(x, block=64)")
    r.commit("block size", {"lib/scale.py": BUGGY.replace("def scale(x, alpha=2.0):", NEW_KEYWORD),
                            "gate/scale_gate.py": cheat})
    code, text, results = _check(r)
    assert code == 1, text
    assert "spec-signature-changed" in _blocking(results)
    assert "the spec module's statement at line 5 (_real = _m.scale) is not the base's" in text


def test_a_signature_change_cannot_change_params(make_repo) -> None:  # type: ignore[no-untyped-def]
    """`params=` changed with the signature: the bug needs alpha != 1, and the head's spec sets 1."""
    spec = (SPEC.replace('reference=lambda x: x * 2)', 'params={"alpha": 2.0},\n         '
                                                       'reference=lambda x, alpha: x * alpha)')
            .replace("def scale_gate(x):\n    return scale(x)", "def scale_gate(x, alpha):\n    return scale(x, alpha)"))
    r = _repo(make_repo, spec)
    head = spec.replace('"alpha": 2.0', '"alpha": 1.0').replace("scale(x, alpha)", "scale(x, alpha, block=64)")
    r.commit("block size", {"lib/scale.py": BUGGY.replace("def scale(x, alpha=2.0):", NEW_KEYWORD)
                            .replace("alpha + 0.5", "alpha + 0.5 * (alpha - 1.0)"),
                            "gate/scale_gate.py": head})
    code, text, results = _check(r)
    assert code == 1, text
    assert "spec-signature-changed" in _blocking(results)
    assert "params= differs from the base's" in text


def test_a_signature_change_whose_spec_change_is_pure_plumbing_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the new keyword passed in the call, nothing else changed; the base's truth judges."""
    r = _repo(make_repo)
    r.commit("block size", {"lib/scale.py": KERNEL.replace("def scale(x, alpha=2.0):", NEW_KEYWORD),
                            "gate/scale_gate.py": SPEC.replace("return scale(x)", "return scale(x, block=64)")})
    code, text, results = _check(r)
    assert code == 0, text
    assert _equivalence(results) == "passed"
    assert "the spec's call changed with the kernel's signature" in text
    assert not _blocking(results), _findings(results)


def test_a_signature_change_with_plumbing_still_catches_the_bug(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("block size", {"lib/scale.py": BUGGY.replace("def scale(x, alpha=2.0):", NEW_KEYWORD),
                            "gate/scale_gate.py": SPEC.replace("return scale(x)", "return scale(x, block=64)")})
    code, text, results = _check(r)
    assert code == 1, text
    assert _equivalence(results) == "failed"
    assert "mismatch" in _blocking(results)


def test_a_base_spec_that_stops_importing_is_a_finding_not_a_crash(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The entry point renamed (`scale` -> `scale_by`): the base's spec no longer imports at the head.
    This crashed the judge (KeyError: 'spec'); a head spec that does more than call is blocked."""
    r = _repo(make_repo)
    cheat = (SPEC.replace("import scale\n", "import scale_by\n")
             .replace("    return scale(x)\n", "    out = scale_by(x)\n    out[:] = x * 2\n    return out\n"))
    r.commit("rename the entry point", {"lib/scale.py": BUGGY.replace("def scale(", "def scale_by("),
                                        "gate/scale_gate.py": cheat})
    code, text, results = _check(r)
    assert code == 1, text
    assert "internal error" not in text and "KeyError" not in text
    assert "spec-signature-changed" in _blocking(results)
    assert "the base's spec does not import at the head" in text


def test_an_entry_point_renamed_with_its_spec_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the import and the call follow the rename, nothing else changes."""
    r = _repo(make_repo)
    r.commit("rename the entry point", {"lib/scale.py": KERNEL.replace("def scale(", "def scale_by("),
                                        "gate/scale_gate.py": SPEC.replace("import scale\n", "import scale_by\n")
                                        .replace("return scale(x)", "return scale_by(x)")})
    code, text, results = _check(r)
    assert code == 0, text
    assert _equivalence(results) == "passed"
    assert not _blocking(results), _findings(results)


# --- what a spec judges: the kernels it launched ------------------------------------------------

def test_a_spec_retired_with_its_kernel_is_judged_by_what_it_launched(make_repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A package whose __init__ imports every op makes each spec import every kernel: by imports alone,
    retiring `triple_gate` with lib/triple.py leaves lib/double.py "remaining", and blocks. The launches
    recorded when the base's specs ran show it judged only lib/triple.py: it retires with it."""
    double = KERNEL.replace("_scale_kernel", "_double_kernel").replace("def scale(", "def double(")
    triple = KERNEL.replace("_scale_kernel", "_triple_kernel").replace("def scale(x, alpha=2.0)", "def triple(x, alpha=3.0)")

    def spec(op: str, factor: int) -> str:
        return SPEC.replace("from lib.scale import scale", f"from lib import {op}").replace("scale_gate", f"{op}_gate") \
            .replace("return scale(x)", f"return {op}(x)").replace("x * 2)", f"x * {factor})")

    # the check runs between commits: its reports must not be committed with the next change
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "README.md": "ops\n", ".gitignore": ".gpu-gate/\n"})
    r.branch("ops")
    r.commit("two ops", {"lib/__init__.py": "from .double import double\nfrom .triple import triple\n",
                         "lib/double.py": double, "lib/triple.py": triple,
                         "gate/double_gate.py": spec("double", 2), "gate/triple_gate.py": spec("triple", 3)})
    cache = str(tmp_path / "cache")
    p = gate("check", "--base", "main", "--head", "ops", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    r.checkout("main")
    r.git("merge", "-q", "--ff-only", "ops")
    r.branch("feature")
    r.git("rm", "-q", "lib/triple.py", "gate/triple_gate.py")
    r.commit("drop triple", {"lib/__init__.py": "from .double import double\n"})
    code, text, _ = _check(r)  # --no-cache: by imports alone
    assert code == 1, text
    assert "spec triple_gate deleted while the kernels it checks remain (lib/double.py)" in text
    p = gate("check", "--base", "main", "--head", "feature", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "spec triple_gate deleted together with its kernels" in p.stdout
