"""Jobs: one spec (or one kernel file) x one check. Plain, JSON-serialisable data."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class SpecRef:
    file: str  # repo-relative path of the spec module
    name: str  # the decorated function's name (or the spec's explicit name)

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    @classmethod
    def parse(cls, text: str) -> SpecRef:
        file, sep, name = text.partition("::")
        if not sep or not file or not name:
            raise ValueError(f"not a spec id: {text!r} (expected PATH::NAME)")
        return cls(file, name)


@dataclasses.dataclass(frozen=True)
class Job:
    id: str
    check: str
    level: str  # "required" | "advisory"
    kernels: tuple[str, ...]  # repo-relative kernel files this job covers
    spec: SpecRef | None = None  # for spec-scoped checks
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # the check's resolved policy options
    cost: float = 1.0
    seed: int = 0
    case: str | None = None  # re-run just this case (repro)
    python_path: tuple[str, ...] = ("",)  # repo-relative sys.path entries for the spec ("" is the root)
    why: tuple[str, ...] = ()  # why the plan selected this spec ("imports kernels/ops.py, changed")

    def to_json(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["kernels"] = list(self.kernels)
        d["python_path"] = list(self.python_path)
        d["why"] = list(self.why)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Job:
        d = dict(d)
        spec = d.pop("spec", None)
        d["kernels"] = tuple(d.get("kernels", ()))
        d["python_path"] = tuple(d.get("python_path", ("",)))
        d["why"] = tuple(d.get("why", ()))
        return cls(spec=SpecRef(**spec) if spec else None, **d)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True))

    @classmethod
    def read(cls, path: Path) -> Job:
        return cls.from_json(json.loads(path.read_text()))

    @property
    def label(self) -> str:
        target = self.spec.id if self.spec else ", ".join(self.kernels)
        return f"{self.check} {target}"


# What a pull request's job carries for the base's side (see gpu_gate.rules.apply): the base's spec
# source, which judges, and the base's commit, whose code runs beside the head's on the same cases.
BASE_SPEC = "base_spec"
DIFFERENTIAL = "base_commit"  # the job also runs the base's code at this commit (differential runs)
# The commit whose tree the truth comes from: the reference worker loads the spec, its reference and
# every repository module they import from that tree (the rules' revision), never from the head's.
TRUTH = "truth_commit"


def base_commit(job: Job) -> str | None:
    value = job.options.get(DIFFERENTIAL)
    return value if isinstance(value, str) and value else None


def truth_commit(job: Job) -> str | None:
    value = job.options.get(TRUTH)
    return value if isinstance(value, str) and value else None


def carried(job: Job) -> dict[str, Any] | None:
    value = job.options.get(BASE_SPEC)
    return value if isinstance(value, dict) and isinstance(value.get("source"), str) else None


def base_copy(job: Job, workdir: Path) -> Path | None:
    """The base's spec module written where the judge keeps its own files (never into the repository)."""
    spec = carried(job)
    if spec is None:
        return None
    folder = workdir / "base-spec"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(str(spec.get("file") or "spec.py")).name
    path.write_text(spec["source"], encoding="utf-8")
    return path


def with_head_call(job: Job) -> Job:
    """The base's spec with the head's call to the kernel: the head's spec differs from the base's only
    in that call (gpu_gate.rules.plumbing), so the reference, the rules and the base's code stay the
    base's, and the candidate's worker calls the head's kernel through the head's spec."""
    spec = carried(job)
    if spec is None:
        return job
    return dataclasses.replace(job, options={**job.options, BASE_SPEC: {**spec, "call": "head"}})


def for_candidate(job: Job) -> Job:
    """The job as the candidate's worker loads it: with the head's call, the head's spec file."""
    spec = carried(job)
    if spec is None or spec.get("call") != "head":
        return job
    return dataclasses.replace(job, options={k: v for k, v in job.options.items() if k != BASE_SPEC})


def without_base(job: Job) -> Job:
    """The job judged by the head's spec: the base's spec, the base's code and the base's tree for
    the truth are out (the base's code cannot run the head's spec when the call signature changed)."""
    return dataclasses.replace(job, options={k: v for k, v in job.options.items()
                                             if k not in (BASE_SPEC, DIFFERENTIAL, TRUTH)})
