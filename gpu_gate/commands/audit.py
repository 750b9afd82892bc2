"""``gpu-gate audit``: judge a directory of benchmark submissions against their problems.

Each submission is gated as a pull request: a small git repository per submission whose base commit
holds the problem, the spec gpu-gate wrote from it (``audit/kernelbench.py``) and the problem's own
``Model`` in the submission's place, and whose head commit puts the submission there. ``gpu-gate check``
runs on it, so the submission meets the same judge, workers, sandbox, cases and findings as any pull
request, and its errors are compared with torch's own on the same cases. The repositories and each
check's reports stay under ``OUT/repos`` and ``OUT/reports``; the table goes to ``OUT/audit.md``,
``audit.json`` and ``audit.xml`` (JUnit: one test case per submission).
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import GateError
from ..exitcodes import ExitCode
from ..findings import Finding, Severity
from .demo import _git

TABLE_FILES = {"markdown": "audit.md", "json": "audit.json", "junit": "audit.xml"}


@dataclasses.dataclass
class Row:
    problem: str
    submission: str
    verdict: str  # "green" | "red" | "error"
    kinds: list[str] = dataclasses.field(default_factory=list)
    worst_ratio: float | None = None  # the submission's worst error over torch's own on that case
    case: str | None = None
    repro: str | None = None
    message: str = ""
    backward: str = ""  # "checked" | "not defined" (forward only) | "" (not differentiable, or not judged)
    speed: dict[str, float] | None = None  # the submission's time over the reference's: ratio, low, high
    speed_flag: str = ""  # "implausible-speedup" where the speed check found one
    seconds: float = 0.0
    reports: str | None = None


def _identifier(stem: str) -> str:
    name = re.sub(r"\W", "_", stem)
    return name if name[:1].isalpha() else f"p_{name}"


def find_problems(where: Path, allow_none: bool = False) -> list[Path]:
    from ..audit.kernelbench import is_problem

    files = [where] if where.is_file() else sorted(where.rglob("*.py"))
    problems = [f for f in files if is_problem(f)]
    if not problems and not allow_none:
        raise GateError(f"{where}: no KernelBench problem found (a module with Model, get_inputs and get_init_inputs)",
                        hint="pass --problems DIR holding the problem modules")
    return problems


def match(submission: Path, root: Path, problems: Sequence[Path]) -> Path | None:
    """The problem a submission answers: the one whose name is a directory above it, else the longest
    problem name its file name starts with (``19_ReLU_sample_0.py`` answers ``19_ReLU.py``)."""
    parts = (root.name, *submission.relative_to(root).parts[:-1]) if submission.is_relative_to(root) else ()
    by_stem = {p.stem: p for p in problems}
    for part in reversed(parts):
        if part in by_stem:
            return by_stem[part]
    starts = [p for p in problems if submission.stem == p.stem or submission.stem.startswith(p.stem + "_")]
    return max(starts, key=lambda p: len(p.stem)) if starts else None


@dataclasses.dataclass
class Gate:
    """One submission, ready to gate: the base commit's files and the head commit's."""
    problem: str
    base: dict[str, str]
    head: dict[str, str]
    backward: str = ""


# The policy of an audit on a GPU when none is given: the defaults, and each submission timed against its
# problem's reference (speed advisory: the figures and any implausible speed-up are shown, never blocking).
AUDIT_POLICY = "version: 1\nchecks:\n  speed: advisory\n"


def build_repo(dest: Path, gate: Gate, submission: str, policy: Path | None, *, timed: bool = False) -> None:
    dest.mkdir(parents=True)
    for files in (gate.base, gate.head):
        for rel in files:
            if rel.startswith("/") or ".." in Path(rel).parts:
                raise GateError(f"{submission}: file {rel!r} leaves the repository")
    for rel, text in gate.base.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    if policy is not None:
        shutil.copyfile(policy, dest / ".gpu-gate.yml")
    elif timed:  # the submission timed against the reference: in the table, never a verdict of its own
        (dest / ".gpu-gate.yml").write_text(AUDIT_POLICY)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", f"problem {gate.problem}: its reference in the submission's place")
    _git(dest, "checkout", "-q", "-b", "submission")
    for rel, text in gate.head.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "--allow-empty", "-m", f"submission {submission}")


def _kernelbench_gate(sub: Path, problem: Path, probed: dict[str, Any], dtypes: Sequence[str]) -> Gate:
    from ..audit import kernelbench as kb

    text = sub.read_text(errors="replace")
    backward = kb.defines_backward(text)
    spec = kb.spec_text(probed, _identifier(problem.stem), dtypes=dtypes, backward=backward)
    return Gate(problem=problem.stem,
                base={f"{kb.PROBLEM_MODULE}.py": problem.read_text(), f"{kb.SUBMISSION_MODULE}.py": kb.BASE_SUBMISSION,
                      f"{kb.SPEC_DIR}/{_identifier(problem.stem)}_gate.py": spec},
                head={f"{kb.SUBMISSION_MODULE}.py": text},
                backward=("checked" if backward else "not defined") if probed.get("differentiable") else "")


def _sol_gate(solution: dict[str, Any], definition: Path, root: Path) -> Gate:
    from ..audit import sol

    defn = sol.load_json(definition)
    assert defn is not None
    why = sol.unsupported(defn) or ([p] if (p := sol.solution_problem(solution)) else [])
    if why:
        raise GateError(f"not supported by audit yet: {'; '.join(why)}")
    loads = sol.workloads(definition, str(defn["name"]), root)
    reduced = sol.probe_reductions(definition, sol.probe_sizes(defn, loads), sol.scalars(defn, loads))
    spec = sol.spec_text(defn, loads, reduced, solution)
    base = {**sol.base_files(defn, solution), f"{sol.SPEC_DIR}/{_identifier(str(defn['name']))}_gate.py": spec}
    head = sol.solution_files(solution)
    ours = sorted(p for p in head if p in (f"{sol.REFERENCE_MODULE}.py", ".gpu-gate.yml")
                  or p.startswith(f"{sol.SPEC_DIR}/"))
    if ours:
        raise GateError(f"the solution's sources would replace the audit's own files: {', '.join(sorted(ours))}")
    return Gate(problem=str(defn["name"]), base=base, head=head)


def row_from_reports(row: Row, reports: Path, code: int) -> Row:
    from ..record import RunRecord

    path = reports / "results.json"
    if not path.is_file():
        row.verdict, row.message = "error", f"gpu-gate check wrote no results (exit {code})"
        return row
    record = RunRecord.read(path)
    errors = [f for r in record.results if r.level == "required" for f in r.findings if f.severity == Severity.ERROR]
    errors += [f for f in record.plan_findings if f.severity == Severity.ERROR]
    failing = [r for r in record.results if r.level == "required" and r.status.value in ("failed", "error")]
    row.kinds = sorted({f.kind for f in errors} | {f"{r.check}-error" for r in failing if not r.findings})
    row.verdict = {int(ExitCode.PASSED): "green", int(ExitCode.POLICY_BREACHED): "red"}.get(code, "error")
    ratios: list[tuple[float, Finding]] = []
    worst: Finding | None
    for f in errors:
        err, base = f.details.get("error"), f.details.get("baseline_error")
        if isinstance(err, (int, float)) and isinstance(base, (int, float)):
            ratios.append((float("inf") if base == 0 and err > 0 else (err / base if base else 1.0), f))
    if ratios:
        row.worst_ratio, worst = max(ratios, key=lambda t: t[0])
    else:
        worst = errors[0] if errors else None
    for r in record.results:
        for f in r.findings if r.check == "speed" else ():
            if f.kind == "speed" and isinstance(f.details.get("ratio"), (int, float)):
                row.speed = {k: float(f.details[k]) for k in ("ratio", "low", "high")}
            elif f.kind == "implausible-speedup":
                row.speed_flag = f.kind
    if worst is not None:
        row.case, row.repro, row.message = worst.case, worst.repro, worst.message.splitlines()[0][:300]
    elif failing:
        row.message = (failing[0].reason or "")[:300]
    return row


def _ratio(r: float | None) -> str:
    if r is None:
        return ""
    return "inf" if r == float("inf") else f"{r:.3g}x"


def _speed(r: Row) -> str:
    """The submission's time over the reference's, with its interval (below 1: faster), and the flag."""
    if not r.speed:
        return ""
    text = f"{r.speed['ratio']:.3g} ({r.speed['low']:.3g}-{r.speed['high']:.3g})"
    return text + (f" **{r.speed_flag}**" if r.speed_flag else "")


def markdown(rows: Sequence[Row]) -> str:
    lines = ["# gpu-gate audit", "",
             f"{sum(r.verdict == 'green' for r in rows)} green, {sum(r.verdict == 'red' for r in rows)} red, "
             f"{sum(r.verdict == 'error' for r in rows)} not judged, of {len(rows)} submissions.", "",
             "| problem | submission | verdict | findings | worst error / torch's | backward | time / reference's "
             "| failing case | repro |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        repro = f"`{r.repro}`" if r.repro else ""
        lines.append(f"| {r.problem} | {r.submission} | {r.verdict.upper()} | {', '.join(r.kinds)} | "
                     f"{_ratio(r.worst_ratio)} | {r.backward} | {_speed(r)} | {r.case or ''} | {repro} |")
    notes = [r for r in rows if r.message and r.verdict != "green"]
    if notes:
        lines += ["", "## Why", ""]
        lines += [f"- **{r.problem} / {r.submission}**: {r.message}" for r in notes]
    return "\n".join(lines) + "\n"


def junit(rows: Sequence[Row]) -> str:
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    cases = []
    for r in rows:
        case = TestCase(name=r.submission, classname=f"audit.{r.problem}", elapsed_sec=r.seconds)
        if r.verdict == "red":
            case.add_failure_info(message=", ".join(r.kinds) or "red", output=r.message)
        elif r.verdict == "error":
            case.add_error_info(message="not judged", output=r.message)
        cases.append(case)
    return str(to_xml_report_string([TestSuite("gpu-gate audit", cases)]))


def as_json(rows: Sequence[Row]) -> dict[str, Any]:
    return {"submissions": [
        {**dataclasses.asdict(r), "worst_ratio": None if r.worst_ratio in (None, float("inf")) else r.worst_ratio,
         "worst_ratio_infinite": r.worst_ratio == float("inf")} for r in rows]}


def rows_from_json(data: dict[str, Any]) -> list[Row]:
    fields = {f.name for f in dataclasses.fields(Row)}
    rows = []
    for d in data["submissions"]:
        row = Row(**{k: v for k, v in d.items() if k in fields})
        if d.get("worst_ratio_infinite"):
            row.worst_ratio = float("inf")
        rows.append(row)
    return rows


def write_tables(out: Path, rows: Sequence[Row]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / v for k, v in TABLE_FILES.items()}
    paths["markdown"].write_text(markdown(rows))
    paths["json"].write_text(json.dumps(as_json(rows), indent=2) + "\n")
    paths["junit"].write_text(junit(rows))
    return list(paths.values())


def exit_code(rows: Sequence[Row]) -> int:
    if any(r.verdict == "error" for r in rows):
        return int(ExitCode.INTERNAL_ERROR) if all(r.verdict == "error" for r in rows) else int(ExitCode.POLICY_BREACHED)
    return int(ExitCode.POLICY_BREACHED if any(r.verdict == "red" for r in rows) else ExitCode.PASSED)


def merge(shards: Sequence[Path], out_dir: Path, *, json_stdout: bool = False) -> int:
    """The tables of an audit run in shards (``--shard I/N`` on several runners), as one: each shard's
    ``audit.json`` read, the rows in submission order, the three tables written to ``out_dir``."""
    from . import output as out

    rows: list[Row] = []
    for d in shards:
        path = d / TABLE_FILES["json"] if d.is_dir() else d
        try:
            rows += rows_from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise GateError(f"{path}: not an audit table ({e})", hint="pass the --out directories of the shards") from e
    seen: dict[str, Row] = {}
    for r in rows:
        if r.submission in seen:
            raise GateError(f"{r.submission}: in two shards' tables", hint="merge each shard's table once")
        seen[r.submission] = r
    rows.sort(key=lambda r: r.submission)
    paths = write_tables(out_dir, rows)
    out.verdict(f"audit table of {len(shards)} shard(s), {len(rows)} submissions: " + ", ".join(map(str, paths)))
    if json_stdout:
        out.data(json.dumps(as_json(rows)))
    return exit_code(rows)


def run(problems_dir: Path, submissions_dir: Path, out_dir: Path, check: Callable[[list[str]], int], *,
        cpu: bool, dtypes: Sequence[str] = (), policy: Path | None = None, flags: Sequence[str] = (),
        shard: tuple[int, int] | None = None, json_stdout: bool = False) -> int:
    """Audit every submission (or shard I/N of them, for a matrix of runners: ``merge`` joins the tables).
    With ``json_stdout`` the table's JSON is the only thing on stdout (each gate's own output goes to stderr)."""
    from . import output as out
    from ..extras import require

    require(("torch",), "gpu-gate audit")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise GateError(f"{out_dir}: already exists and is not an empty directory",
                        hint="pass --out NEW_DIR, or delete it")
    from ..audit import sol

    problems = find_problems(problems_dir, allow_none=True)
    defs = sol.definitions(problems_dir)
    if not problems and not defs:
        raise GateError(f"{problems_dir}: no problem found (a KernelBench module with Model, get_inputs and "
                        "get_init_inputs, or a SOL-ExecBench definition.json)", hint="pass --problems DIR")
    root = submissions_dir if submissions_dir.is_dir() else submissions_dir.parent
    subs = sorted(p for p in ([submissions_dir] if submissions_dir.is_file() else submissions_dir.rglob("*"))
                  if p.is_file() and p.name != "__init__.py" and (p.suffix == ".py" or (p.suffix == ".json" and
                                                                     sol.is_solution(sol.load_json(p)))))
    if not subs:
        raise GateError(f"{submissions_dir}: no submission found (a KernelBench *.py with ModelNew, or a "
                        "SOL-ExecBench solution *.json)", hint="pass --submissions DIR")
    if shard is not None:  # the same split on every runner: the sorted submissions, dealt round-robin
        every = len(subs)
        subs = [s for i, s in enumerate(subs) if i % shard[1] == shard[0] - 1]
        out.verdict(f"shard {shard[0]}/{shard[1]}: {len(subs)} of {every} submissions")
    rows: list[Row] = []
    found: dict[Path, dict[str, Any] | GateError] = {}
    start = time.monotonic()
    for n, sub in enumerate(subs, 1):
        t0 = time.monotonic()
        name = str(sub.relative_to(root))
        row = Row(problem="?", submission=name, verdict="error")
        try:
            _audit_one(row, sub, name, root, problems_dir, problems, defs, found, out_dir, check, cpu=cpu,
                       dtypes=dtypes, policy=policy, flags=flags, json_stdout=json_stdout)
        except Exception as e:  # noqa: BLE001 - one submission that breaks the audit loses no other's row
            row.verdict, row.kinds = "error", []
            row.message = f"internal error in gpu-gate while auditing {name}: {type(e).__name__}: {e}"[:300]
        row.seconds = round(time.monotonic() - t0, 1)
        rows.append(row)
        out.verdict(f"[{n}/{len(subs)}] {row.problem} / {row.submission}: {row.verdict.upper()}"
                    f"{' (' + ', '.join(row.kinds) + ')' if row.kinds else ''} {row.seconds:.1f}s, "
                    f"{time.monotonic() - start:.0f}s in all")
    paths = write_tables(out_dir, rows)
    out.verdict("audit table: " + ", ".join(str(p) for p in paths))
    if json_stdout:
        out.data(json.dumps(as_json(rows)))
    return exit_code(rows)


def _audit_one(row: Row, sub: Path, name: str, root: Path, problems_dir: Path, problems: Any,
               defs: dict[str, Path], found: dict[Path, dict[str, Any] | GateError], out_dir: Path,
               check: Callable[[list[str]], int], *, cpu: bool, dtypes: Sequence[str], policy: Path | None,
               flags: Sequence[str], json_stdout: bool) -> None:
    """Gate one submission and fill its row."""
    import contextlib
    import sys

    from ..audit import kernelbench as kb
    from ..audit import sol

    try:
        gate = None
        if sub.suffix == ".json":
            solution = sol.load_json(sub) or {}
            definition = defs.get(str(solution.get("definition")))
            if definition is None:
                row.message = f"{name}: its definition {solution.get('definition')!r} is not among the problems"
            else:
                row.problem = str(solution.get("definition"))
                gate = _sol_gate(solution, definition, problems_dir if problems_dir.is_dir() else definition.parent)
        else:
            problem = match(sub, root, problems)
            if problem is None:
                row.message = (f"{name}: matches no problem (name it after one, or put it in a directory named "
                               "after one)")
            else:
                row.problem = problem.stem
                if problem not in found:
                    try:
                        found[problem] = kb.probe(problem)
                    except GateError as e:
                        found[problem] = e
                probed = found[problem]
                if isinstance(probed, GateError):
                    raise probed
                gate = _kernelbench_gate(sub, problem, probed, dtypes)
    except GateError as e:
        row.message, gate = str(e), None
    if gate is not None:
        row.backward = gate.backward
        slug = re.sub(r"[^\w.-]", "_", str(Path(name).with_suffix("")))
        repo = out_dir / "repos" / row.problem / slug
        reports = out_dir / "reports" / row.problem / slug
        build_repo(repo, gate, name, policy, timed=not cpu)
        # With --format json, stdout carries the audit's JSON alone: each gate's own output goes to stderr.
        quiet = contextlib.redirect_stdout(sys.stderr) if json_stdout else contextlib.nullcontext()
        with quiet:
            # --full: a judgement of the submission, not a developer's loop (see local_loop)
            code = check(["check", "--repo", str(repo), "--base", "main", "--head", "submission",
                          "--out", str(reports), "--no-cache", "--full", *flags, *(["--cpu"] if cpu else [])])
        row.reports = str(reports)
        row_from_reports(row, reports, code)
        if row.repro:
            row.repro = f"cd {repo} && {row.repro}"
