"""Real kernel bugs from public libraries, judged as a merge gate judges them.

    python bench/bench_real_bugs.py --repo liger=PATH [--repo fla=PATH --repo mamba=PATH --repo lightllm=PATH
                                    --repo flash_attn=PATH --repo unsloth=PATH]
                                    [--bug L8 ...] [--runs all|pr|nightly] [--gate-path DIR] [--keep DIR] [--cpu]

Each PATH is a clone (bare or not) of Liger-Kernel, flash-linear-attention, mamba, LightLLM,
flash-attention or unsloth that holds the bugs' commits; ``bench/slim_clone.py`` makes one of a few MiB with
just those commits' packages, for a machine without network access.

For each bug (the list below, from the project's corpus of real bugs: a buggy commit and the commit
that fixed it), a scratch repository gets the library's sources at the buggy commit, a gate spec
written as a careful user of that library would write it (``bench/real_bugs/*_gate.py``) and a
policy, in one commit (S). The fix's diff of the sources is then one commit on top of S (F), and
the same diff reversed one commit on top of F (R, a pull request that brings the bug back). Four
gates run:

- ``--all`` at S: the buggy code by absolute rules (a nightly run): red expected;
- ``--all`` at F: the fixed code by absolute rules: green, unless the fixed code has defects of its
  own (a fix commit is not a perfect kernel; those are the library's debt, and the table says so);
- the fix as a pull request (base S, head F): green expected, the failure reported as fixed;
- the bug brought back as a pull request (base F, head R): red expected, the failure new.

Each run prints one line (expected and actual verdict, the error findings with their new,
pre-existing or fixed marks, the wall time) and one JSON line; a table ends the output.

``--kernelbench`` also runs, at S and at F, the check KernelBench-style benchmarks run
(``bench/kernelbench_style.py``: one size, randn inputs, forward only, allclose at 1e-2): the
baseline a merge gate is measured against. It catches a bug where it fails at S.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "real_bugs"

# library -> what its scratch repository takes from it: ``keep``, the top-level paths (packaging
# and the package; a library's tests and data are not what the gate judges); ``policy``, the file
# under real_bugs/ beside the specs; ``hollow``, package ``__init__`` files emptied in the scratch
# tree. Some libraries' top-level ``__init__`` imports every model they ship, and with them
# dependencies (transformers, compiled extensions) that a GPU machine without network access lacks;
# emptied, the kernel's own module and the modules it imports are the library's own, unchanged. The
# fix's diff never touches a hollowed file (the benchmark checks).
LIBRARIES: dict[str, dict[str, Any]] = {
    "liger": {"keep": ["src", "pyproject.toml", "setup.py", "setup.cfg"], "policy": "policy.yml", "hollow": []},
    "fla": {"keep": ["fla", "pyproject.toml", "setup.py"], "policy": "policy_fla.yml",
            "hollow": ["fla/__init__.py", "fla/ops/__init__.py", "fla/ops/kda/__init__.py"]},
    "mamba": {"keep": ["mamba_ssm", "pyproject.toml", "setup.py"], "policy": "policy_mamba.yml",
              "hollow": ["mamba_ssm/__init__.py"]},
    "flash_attn": {"keep": ["flash_attn", "setup.py"], "policy": "policy_flash_attn.yml",
                   "hollow": ["flash_attn/__init__.py"]},
    "lightllm": {"keep": ["lightllm", "setup.py"], "policy": "policy_lightllm.yml",
                 "hollow": ["lightllm/__init__.py", "lightllm/models/__init__.py"]},
    # unsloth's kernel modules import its companion package unsloth_zoo at module level, for a logger,
    # a version class, a torch.compile decorator of the matmul paths and the hooks that patch
    # transformers' losses; kernels/utils.py imports bitsandbytes for its 4-bit dequantisation (a C
    # library, bound at import); the cross entropy module takes transformers' logger. The GPU machine
    # has none of them. The benchmark writes stand-ins for exactly those names (``standins``), marked
    # as such: their functions raise if called, and no kernel the specs reach calls them. The kernels
    # and their wrappers are unsloth's own, unchanged.
    "unsloth": {"keep": ["unsloth", "pyproject.toml"], "policy": "policy_unsloth.yml",
                "hollow": ["unsloth/__init__.py", "unsloth/kernels/__init__.py"],
                "standins": {
                    "unsloth_zoo/__init__.py": "",
                    "unsloth_zoo/utils.py": "from packaging.version import Version  # noqa: F401\n",
                    "unsloth_zoo/log.py": "import logging\n\nlogger = logging.getLogger('unsloth_zoo')\n",
                    "unsloth_zoo/temporary_patches/__init__.py": "",
                    "unsloth_zoo/temporary_patches/common.py":
                        "def torch_compile(fn=None, **options):\n"
                        "    return fn if fn is not None else (lambda f: f)  # eager: not the code under test\n",
                    "unsloth_zoo/loss_utils.py":
                        "def patch_loss_functions(*args, **kwargs):\n"
                        "    raise RuntimeError('unsloth_zoo: a stand-in (it patches transformers, absent here)')\n\n\n"
                        "post_patch_loss_function = patch_loss_functions\n",
                    "transformers/__init__.py": "",
                    "transformers/models/__init__.py": "",
                    "transformers/models/llama/__init__.py": "",
                    "transformers/models/llama/modeling_llama.py":
                        "import logging\n\nlogger = logging.getLogger('transformers')\n",
                    "bitsandbytes/__init__.py": "from . import functional  # noqa: F401\n\n__version__ = '0.45.5'\n",
                    "bitsandbytes/functional.py":
                        "class _Missing:\n"
                        "    def __init__(self, name):\n"
                        "        self.name = name\n\n"
                        "    def __call__(self, *args, **kwargs):\n"
                        "        raise RuntimeError(f'bitsandbytes.{self.name}: a stand-in (no bitsandbytes here)')\n\n"
                        "    def __getattr__(self, name):\n"
                        "        return _Missing(f'{self.name}.{name}')\n\n\n"
                        "get_ptr = _Missing('functional.get_ptr')\n"
                        "lib = _Missing('functional.lib')\n",
                }},
}

# id -> the library, the buggy and the fixing commit, the spec, what the bug is
BUGS = {
    "FL2": {"library": "fla", "buggy": "21287b7a60279b9c339eb94d281d3ac9789fce8a",
            "fix": "bd67d11782696e4ff54ee6cb411483621ed3d93d", "spec": "fla_rotary_gate.py",
            "bug": "flash-linear-attention #967: rotary leaves masked-out rows of its empty_like output unwritten"},
    "FL3": {"library": "fla", "buggy": "3adcb3c50a9e78c6ef6d173543305b1d5ef8fa4c",
            "fix": "674f0852131332ddf0a7e9ef2fa7b3614e7331fc", "spec": "fla_norm_gate_linear_gate.py",
            "bug": "flash-linear-attention #1071: the recomputed y is stored before the gate, dW off by silu(g)"},
    "FL5": {"library": "fla", "buggy": "6d80721f74bfd49b229cb4112dacf21237f27989",
            "fix": "b67113b41e4730f8d598c284381142c6b78a2fbc", "spec": "fla_kda_recurrent_gate.py",
            "bug": "flash-linear-attention #1135: fused recurrent KDA loads g unmasked"},
    "M1": {"library": "mamba", "buggy": "74729d0f6d9c2096407eda5562393ab70960a3f6",
           "fix": "a6a1dae6efbf804c9944a0c2282b437deb4886d8", "spec": "mamba_chunk_state_gate.py",
           "bug": "mamba #746: dB misses tl.exp on the decay scale when seq_idx is given"},
    "M2": {"library": "mamba", "buggy": "bda9af39e9f558af64efdb1a4605880246bd5bed",
           "fix": "442fab4b1fd5226c1b5939b37d91ede430b5d1ae", "spec": "mamba_chunk_scan_gate.py",
           "bug": "mamba #537: start_n + offs_n*stride where (start_n + offs_n)*stride was meant"},
    "LL5": {"library": "lightllm", "buggy": "fb1ebf0f1e4281cd4e6544092e6c345a11e7c197",
            "fix": "178c2d6e2831ad452a2c9551de37910858f334c7", "spec": "lightllm_phi3_rotary_gate.py",
            "bug": "LightLLM #1460: phi3 rotary loads cos/sin unmasked past the rotary dim"},
    "L8": {"library": "liger", "buggy": "c899cc725066fa7d0c2f508ad3b775f3f9951a9b",
           "fix": "d7c78df1455cac50205ad4a9b9ac50c5d144ba0f", "spec": "liger_rope_gate.py",
           "bug": "Liger-Kernel #477: _triton_rope ignores the batch dimension of cos/sin"},
    "L7": {"library": "liger", "buggy": "6cdc93deee15ab6c843149d6ed660c297c5c2d4a",
           "fix": "1c0c75c3455e788d575966bfc5edec3ef166835e", "spec": "liger_fljsd_gate.py",
           "bug": "Liger-Kernel #330: fused linear JSD reads the labels of the first chunk for every chunk"},
    "L2": {"library": "liger", "buggy": "9cf2019a6c234be2102571dc35741ee844c7903d",
           "fix": "b27b4c5f2c312f3e006c39bc3e62c6627c18d8a4", "spec": "liger_rms_norm_gate.py",
           "policy": "policy_liger_compile.yml", "also": ["liger_rope_gate.py"],
           "bug": "Liger-Kernel #804: RMSNorm and RoPE offsets are program_id x stride in int32, which wraps past "
                  "2^31 elements"},
    "F6": {"library": "flash_attn", "buggy": "02ac572f3ffc4f402e4183aaa6824b45859d3ed3",
           "fix": "c79de85ffa0d19b80fa468f90c5086e837499d72", "spec": "flash_attn_cross_entropy_gate.py",
           "bug": "flash-attention: Triton cross entropy offsets are row x stride in int32, which wraps past 2^31 "
                  "elements"},
    "U3": {"library": "unsloth", "buggy": "487b420948ef6fea0a77dac7b7970aa3e6b2f5c0",
           "fix": "f4d1dc541fbbca17e7ed59daea07465696877255", "spec": "unsloth_fp8_dequant_gate.py",
           "bug": "unsloth #6884: weight_dequant_kernel computes offs_m * N in int32, which wraps past 2^31 elements"},
    "U2": {"library": "unsloth", "buggy": "6180adda1bcd3edacc9bdb167083b252af161761",
           "fix": "dabf2a901bf11864f730e386d6eab27a48809494", "spec": "unsloth_rope_qk_gate.py",
           "bug": "unsloth #3782: `not dQ.is_contiguous` (a bound method, never false) never clones, so the backward "
                  "rotates an expanded upstream gradient in place, rows sharing memory"},
    "U4": {"library": "unsloth", "buggy": "5eddfd8cfe409b70d28ac4a5ba48afecbd97d77c",
           "fix": "eaff11e1c3ccd3573ede2a6a09b2183955c210a7", "spec": "unsloth_cross_entropy_gate.py",
           "bug": "unsloth: the cross entropy kernels' offsets are row x stride in int32, which wraps past 2^31 "
                  "elements"},
    "L5": {"library": "liger", "buggy": "e44a5fe86d3ee00def43913329e4c4ff70c3b416",
           "fix": "9ac26bb82226c9279f0fda784300f5e02ce444b2", "spec": "liger_flce_none_gate.py",
           "bug": "Liger-Kernel #1298: reduction='none' scales dW/db by one upstream gradient, not each token's"},
}


def git(repo: Path, *args: str, input: str | None = None, strip: bool = True) -> str:
    # Fixed names and dates: the same commits, so the same seeds (a gate's seed comes from the head
    # commit) and the same cases on every run of the benchmark.
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00"}
    out = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=repo, env=env, check=True,
                         capture_output=True, text=True, input=input).stdout
    return out.strip() if strip else out


def populate(library: Path, name: str, commit: str, repo: Path) -> tuple[list[str], list[str]]:
    """Write into ``repo`` what ``LIBRARIES[name]`` keeps of the library at ``commit``: its ``hollow`` files
    emptied (their ``__version__`` kept), its stand-ins written. Returns the paths kept and those hollowed."""
    lib = ["--git-dir", str(library)]
    config = LIBRARIES[name]
    top = git(repo, *lib, "ls-tree", "--name-only", commit).splitlines()
    keep = [p for p in config["keep"] if p in top]
    archive = subprocess.run(["git", "-c", "safe.directory=*", *lib, "archive", "--format=tar", commit, *keep],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(repo, filter="data")
    hollow: list[str] = list(config["hollow"])
    for path in hollow:
        # the package's version stays: its modules may import it (fla's utils do)
        kept = [line for line in (repo / path).read_text().splitlines() if line.startswith("__version__")]
        (repo / path).write_text("# emptied by the benchmark: it imports what the GPU machine lacks\n"
                                 + "".join(f"{line}\n" for line in kept))
    for path, text in config.get("standins", {}).items():
        if (repo / path).exists():
            raise SystemExit(f"{name}: the stand-in {path} would replace the library's own file")
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("# a stand-in written by the benchmark for a dependency the GPU machine lacks\n"
                                 + text)
    return keep, hollow


def scratch(library: Path, bug: dict[str, str], where: Path, cpu: bool = False) -> dict[str, str]:
    """The scratch repository with commits S, F and R (see the module's docstring); their shas.

    It holds what ``LIBRARIES`` keeps of the library, taken from the buggy commit (its ``hollow``
    files emptied), and the fix's diff of those paths."""
    repo = where / "repo"
    repo.mkdir(parents=True)
    lib = ["--git-dir", str(library)]
    keep, hollow = populate(library, bug["library"], bug["buggy"], repo)
    config = LIBRARIES[bug["library"]]
    git(repo, "init", "-q", "-b", "buggy")
    (repo / "gate").mkdir(exist_ok=True)
    for spec in [bug["spec"], *bug.get("also", [])]:  # also: the specs of other files the fix touches
        shutil.copy(HERE / spec, repo / "gate" / spec)
    policy = (HERE / str(bug.get("policy") or config["policy"])).read_text()
    if cpu:  # a dry run: the checks that need a GPU are "not run", which must not hide red from green
        policy += "not_run: warn\n"
    (repo / ".gpu-gate.yml").write_text(policy)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"the library at {bug['buggy'][:12]}, a gpu-gate spec and a policy")
    shas = {"S": git(repo, "rev-parse", "HEAD")}
    fix = git(repo, *lib, "diff", "--binary", bug["buggy"], bug["fix"], "--", *keep, strip=False)
    touched = set(git(repo, *lib, "diff", "--name-only", bug["buggy"], bug["fix"], "--", *keep).splitlines())
    if touched & set(hollow):
        raise SystemExit(f"{bug['library']}: the fix changes a hollowed file ({sorted(touched & set(hollow))})")
    git(repo, "checkout", "-q", "-b", "fixed")
    git(repo, "apply", "--index", "-", input=fix)
    git(repo, "commit", "-q", "-m", f"the fix, {bug['fix'][:12]}")
    shas["F"] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "again")
    git(repo, "apply", "--index", "-R", "-", input=fix)
    git(repo, "commit", "-q", "-m", "the bug again")
    shas["R"] = git(repo, "rev-parse", "HEAD")
    return {**shas, "repo": str(repo)}


def gate(gate_path: Path, repo: Path, checkout: str, args: list[str], out: Path) -> dict[str, object]:
    """One ``gpu-gate check`` with ``args`` at ``checkout``, its reports in ``out``."""
    git(repo, "checkout", "-q", checkout)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(gate_path), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", *args, "--no-cache", "--out", str(out)],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    wall = time.monotonic() - start
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    errors = sorted({(f["check"], f["kind"], f["details"].get("change") or "-")
                     for r in results.get("results", []) for f in r["findings"]
                     if f["severity"] == "error" or f["details"].get("change") == "fixed"})
    notes = [f["message"] for r in results.get("results", []) for f in r["findings"] if f["kind"] == "differential"]
    # what each blocking finding said, first line: a refusal or a crash says why only there
    said = sorted({f"{f['check']}/{f['kind']}: {f['message'].splitlines()[0][:300]}"
                   for r in results.get("results", []) for f in r["findings"] if f["severity"] == "error"})
    jobs = {r["check"]: [round(r.get("duration_s") or 0.0, 1), r.get("cases") or 0] for r in results.get("results", [])}
    # a job that did not pass or fail (not run, an error): its status and why, for a verdict no finding explains
    unrun = {r["check"]: f"{r['status']}: {str(r.get('reason') or '')[:300]}" for r in results.get("results", [])
             if r["status"] not in ("passed", "failed")}
    plan = sorted({f"{f['kind']}: {f['message'].splitlines()[0][:300]}" for f in results.get("plan_findings", [])
                   if f["severity"] == "error"})
    unexplained = p.returncode not in (0, 1) or (p.returncode == 1 and not errors)
    return {"exit": p.returncode, "wall_s": round(wall, 1), "jobs": jobs, "findings": errors, "differential": notes,
            "said": said[:12], "not_run": unrun, "plan": plan[:6],
            "tail": (p.stdout + p.stderr)[-1500:] if unexplained else ""}


def kernelbench(gate_path: Path, repo: Path, checkout: str, spec: str, cpu: bool) -> dict[str, object]:
    """The KernelBench-style check of ``spec`` at ``checkout`` (see ``bench/kernelbench_style.py``)."""
    git(repo, "checkout", "-q", checkout)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(gate_path), os.environ.get("PYTHONPATH")]))}
    if cpu:
        env["TRITON_INTERPRET"] = "1"
    script = Path(__file__).resolve().parent / "kernelbench_style.py"
    start = time.monotonic()
    p = subprocess.run([sys.executable, str(script), str(repo), spec, *(["--device", "cpu"] if cpu else [])],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    res: dict[str, object] = json.loads(lines[-1]) if lines else {"passed": False, "error": (p.stderr or "")[-500:]}
    res["wall_s"] = round(time.monotonic() - start, 1)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", default=[], help="LIBRARY=PATH of a clone with full history")
    ap.add_argument("--bug", action="append", help="bug ids (default: every bug whose library is given)")
    ap.add_argument("--gate-path", default=str(Path(__file__).resolve().parent.parent), help="gpu-gate source tree")
    ap.add_argument("--keep", help="keep the scratch repositories and reports here")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (Triton's interpreter): a dry run of the flow")
    ap.add_argument("--kernelbench", action="store_true", help="also run the KernelBench-style check at the buggy "
                                                                  "and the fixed commit")
    ap.add_argument("--runs", choices=("all", "pr", "nightly", "fix", "back", "none"), default="all",
                    help="pr: only the two pull-request runs; nightly: only the two --all runs; fix: only the fix "
                         "as a PR; back: only the bug back as a PR; none: no gate (with --kernelbench: only that)")
    args = ap.parse_args()
    # a relative path names a clone from here, not from the scratch repository git runs in
    libraries = {name: str(Path(path).resolve()) for name, path in (r.split("=", 1) for r in args.repo)}
    bugs = args.bug or [b for b, d in BUGS.items() if d["library"] in libraries]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="real-bugs-"))
    table = []
    for bug_id in bugs:
        bug = BUGS[bug_id]
        where = root / bug_id
        shas = scratch(Path(libraries[bug["library"]]), bug, where, cpu=args.cpu)
        repo = Path(shas["repo"])
        spec = f"gate/{bug['spec']}"
        runs = [("buggy, --all", shas["S"], ["--all", "--spec", spec], 1),
                ("fixed, --all", shas["F"], ["--all", "--spec", spec], 0),
                ("the fix as a PR", shas["F"], ["--base", shas["S"], "--head", shas["F"]], 0),
                ("the bug back as a PR", shas["R"], ["--base", shas["F"], "--head", shas["R"]], 1)]
        if args.runs == "none":
            runs = []
        elif args.runs in ("pr", "nightly"):
            runs = [r for r in runs if ("PR" in r[0]) == (args.runs == "pr")]
        elif args.runs != "all":
            runs = [r for r in runs if r[0] == {"fix": "the fix as a PR", "back": "the bug back as a PR"}[args.runs]]
        if args.kernelbench:
            said = {}
            for name, checkout in (("buggy", shas["S"]), ("fixed", shas["F"])):
                kb = kernelbench(Path(args.gate_path), repo, checkout, spec, args.cpu)
                kb.update({"bug": bug_id, "run": f"KernelBench-style, {name}"})
                print(json.dumps(kb), flush=True)
                said[name] = "could not run" if "error" in kb else "passed" if kb["passed"] else "failed"
                table.append(f"| {bug_id} | KernelBench-style, {name} | allclose at 1e-2 | {said[name]} | "
                             f"{str(kb.get('error', ''))[:120] or '-'} | {kb['wall_s']} s |")
            # a catch: it fails the buggy code and passes the fix; failing both tells the two apart no better
            catch = ("caught" if said == {"buggy": "failed", "fixed": "passed"} else "missed"
                     if said["buggy"] == "passed" else f"no verdict (buggy {said['buggy']}, fixed {said['fixed']})")
            table.append(f"| {bug_id} | KernelBench-style | caught? | {catch} | - | - |")
        for name, checkout, gate_args, expected in runs:
            res = gate(Path(args.gate_path), repo, checkout, gate_args + (["--cpu"] if args.cpu else []),
                       where / name.replace(" ", "_").replace(",", ""))
            res.update({"bug": bug_id, "run": name, "expected": expected})
            print(json.dumps(res), flush=True)
            if res["exit"] == expected:
                mark = "ok"
            elif name.startswith("fixed"):
                mark = "the fix's own debt"
            else:
                mark = "UNEXPECTED"
            table.append(f"| {bug_id} | {name} | {'red' if expected else 'green'} | exit {res['exit']} {mark} | "
                         f"{', '.join(f'{c}/{k} ({ch})' for c, k, ch in res['findings']) or '-'} | {res['wall_s']} s |")
    print("\n| bug | run | expected | got | error findings (change) | wall |\n|---|---|---|---|---|---|")
    print("\n".join(table))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
