from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpu_gate.store import dependencies, results as cache_mod
from gpu_gate.store.dependencies import cache_key
from gpu_gate.store.results import ResultCache
from gpu_gate.findings import Finding, JobResult, Status
from gpu_gate.protocol.jobs import Job, SpecRef

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130"}
POLICY = "policy-sha256:abc"
DEPS = ["gate/rmsnorm_gate.py", "mylib/common.py"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "csrc").mkdir(parents=True)
    (root / "gate").mkdir()
    (root / "mylib").mkdir()
    (root / "csrc" / "rmsnorm.cu").write_text("__global__ void rmsnorm(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    (root / "gate" / "rmsnorm_gate.py").write_text("from mylib.common import EPS\n")
    (root / "mylib" / "common.py").write_text("EPS = 1e-6\n")
    return root


def make_job(**overrides: object) -> Job:
    fields: dict[str, object] = dict(
        id="equivalence-rmsnorm",
        check="equivalence",
        level="required",
        kernels=("csrc/rmsnorm.cu",),
        spec=SpecRef("gate/rmsnorm_gate.py", "rmsnorm_gate"),
        options={"cases": 200, "dtypes": ["float32", "bfloat16"]},
    )
    fields.update(overrides)
    return Job(**fields)  # type: ignore[arg-type]


def red_result() -> JobResult:
    return JobResult(
        job_id="equivalence-rmsnorm",
        check="equivalence",
        status=Status.FAILED,
        spec="gate/rmsnorm_gate.py::rmsnorm_gate",
        kernels=("csrc/rmsnorm.cu",),
        findings=[Finding(check="equivalence", kind="mismatch", message="Mismatched elements: 3 / 100 (3.0%)")],
        duration_s=12.5,
        cases=200,
    )


def key_for(repo: Path, job: Job | None = None, policy: str = POLICY, env: dict[str, str] | None = None) -> str:
    return cache_key(job or make_job(), repo, DEPS, policy, env or ENV)


def test_identical_inputs_hit(repo: Path, tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    ok = JobResult(job_id="j", check="equivalence", status=Status.PASSED, cases=200)
    assert cache.put(key_for(repo), ok, "c0ffee1") is None
    got = cache.get(key_for(repo))
    assert got is not None
    assert got.status is Status.PASSED and got.cases == 200
    assert got.cached_from == "c0ffee1"


def test_key_is_a_sha256_hex_digest_and_stable(repo: Path) -> None:
    k = key_for(repo)
    assert len(k) == 64 and int(k, 16) >= 0
    assert key_for(repo) == k


@pytest.mark.parametrize("path", ["csrc/rmsnorm.cu", "gate/rmsnorm_gate.py", "mylib/common.py"])
def test_one_byte_changed_in_a_source_misses(repo: Path, tmp_path: Path, path: str) -> None:
    cache = ResultCache(tmp_path / "cache")
    cache.put(key_for(repo), red_result(), "aaa")
    data = bytearray((repo / path).read_bytes())
    data[0] ^= 0x01
    (repo / path).write_bytes(bytes(data))
    assert cache.get(key_for(repo)) is None


def test_deleted_dependency_misses(repo: Path, tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    cache.put(key_for(repo), red_result(), "aaa")
    (repo / "mylib" / "common.py").unlink()
    assert cache.get(key_for(repo)) is None


def test_policy_env_and_options_are_part_of_the_key(repo: Path, tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    cache.put(key_for(repo), red_result(), "aaa")
    assert cache.get(key_for(repo, policy=POLICY + "d")) is None
    assert cache.get(key_for(repo, env={**ENV, "driver": "580.159.05"})) is None
    assert cache.get(key_for(repo, env={**ENV, "compute-sanitizer": "2025.3.1"})) is None
    assert cache.get(key_for(repo, job=make_job(options={"cases": 201, "dtypes": ["float32", "bfloat16"]}))) is None
    assert cache.get(key_for(repo, job=make_job(check="racecheck"))) is None
    assert cache.get(key_for(repo)) is not None


def test_gpu_gate_version_is_part_of_the_key(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = key_for(repo)
    monkeypatch.setattr(dependencies, "gpu_gate_version", lambda: "99.0.0")
    assert key_for(repo) != before


def test_option_order_does_not_matter(repo: Path) -> None:
    a = make_job(options={"cases": 200, "dtypes": ["float32"]})
    b = make_job(options={"dtypes": ["float32"], "cases": 200})
    assert key_for(repo, job=a) == key_for(repo, job=b)


def test_red_result_is_cached_with_its_findings_and_commit(repo: Path, tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    cache.put(key_for(repo), red_result(), "deadbeef")
    got = cache.get(key_for(repo))
    assert got is not None
    assert got.status is Status.FAILED
    assert got.findings[0].message == "Mismatched elements: 3 / 100 (3.0%)"
    assert got.cached_from == "deadbeef"


def test_a_reused_result_keeps_its_original_commit(repo: Path, tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    cache.put(key_for(repo), red_result(), "first")
    reused = cache.get(key_for(repo))
    assert reused is not None
    cache.put(key_for(repo), reused, "second")
    again = cache.get(key_for(repo))
    assert again is not None and again.cached_from == "first"


@pytest.mark.parametrize("status", [Status.ERROR, Status.NOT_RUN])
def test_error_and_not_run_are_not_cached(repo: Path, tmp_path: Path, status: Status) -> None:
    cache = ResultCache(tmp_path / "cache")
    res = JobResult(job_id="j", check="memcheck", status=status, reason="timed out after 600s")
    assert cache.put(key_for(repo), res, "aaa") is None
    assert cache.get(key_for(repo)) is None
    assert not list((tmp_path / "cache").rglob("*.json"))


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"format": 1}', b"\xff\xfe\x00", b"[1, 2]"])
def test_corrupt_entry_is_a_miss(repo: Path, tmp_path: Path, content: bytes) -> None:
    cache = ResultCache(tmp_path / "cache")
    key = key_for(repo)
    cache.put(key, red_result(), "aaa")
    entry = next((tmp_path / "cache").rglob(f"{key}.json"))
    entry.write_bytes(content)
    assert cache.get(key) is None


def test_entry_stored_under_another_key_is_a_miss(repo: Path, tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    key = key_for(repo)
    cache.put(key, red_result(), "aaa")
    other = key_for(repo, policy="other")
    src = next((tmp_path / "cache").rglob(f"{key}.json"))
    dst = tmp_path / "cache" / other[:2] / f"{other}.json"
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())
    assert cache.get(other) is None


def test_unwritable_cache_dir_returns_a_note(repo: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    cache = ResultCache(blocker / "cache")
    note = cache.put(key_for(repo), red_result(), "aaa")
    assert note is not None and note.startswith("result cache: could not store")
    assert cache.get(key_for(repo)) is None


def test_full_disk_returns_a_note_and_leaves_no_temp_file(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_mod.os, "replace", full)
    cache = ResultCache(tmp_path / "cache")
    note = cache.put(key_for(repo), red_result(), "aaa")
    assert note is not None and "No space left on device" in note
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gpu_gate.store.results import ResultCache
    from gpu_gate.findings import Finding, JobResult, Status
    cache = ResultCache(Path(sys.argv[1]))
    tag = sys.argv[3]
    for i in range(150):
        findings = [Finding(check="equivalence", kind="mismatch", message=tag * 2000)]
        res = JobResult(job_id=tag, check="equivalence", status=Status.FAILED, cases=i, findings=findings)
        assert cache.put(sys.argv[2], res, tag) is None
    """
)


def test_concurrent_writers_never_leave_a_torn_entry(repo: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    key = key_for(repo)
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(cache_dir), key, tag], stderr=subprocess.PIPE)
        for tag in ("A", "B")
    ]
    seen = 0
    deadline = time.monotonic() + 60
    while any(w.poll() is None for w in writers) and time.monotonic() < deadline:
        got = ResultCache(cache_dir).get(key)
        if got is not None:
            seen += 1
            # Each entry is whole: its findings and commit come from the same writer.
            assert got.findings[0].message == got.job_id * 2000
            assert got.cached_from == got.job_id
        elif seen:
            pytest.fail("an entry disappeared or was torn while another process replaced it")
    for w in writers:
        _, err = w.communicate(timeout=60)
        assert w.returncode == 0, err.decode()
    final = ResultCache(cache_dir).get(key)
    assert final is not None and final.cases == 149
    assert not list(cache_dir.rglob("*.tmp"))
    json.loads(next(cache_dir.rglob(f"{key}.json")).read_text())


def test_the_machine_fingerprint_names_the_sanitizer_version_on_a_gpu_runner(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A new compute-sanitizer can find what the old one missed: its version is part of the key."""
    from gpu_gate.store.dependencies import environment_fingerprint

    tool = tmp_path / "compute-sanitizer"

    def version(v: str) -> None:
        tool.write_text(f"#!/bin/sh\necho 'NVIDIA (R) Compute Sanitizer'\necho 'Version {v} (build 1) (public-release)'\n")
        tool.chmod(0o755)

    version("2025.3.1.0")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi or nvcc: only the sanitizer varies
    old = environment_fingerprint(("0",), str(tool))
    assert old["compute-sanitizer"] == "Version 2025.3.1.0 (build 1) (public-release)"
    assert old["python"] == f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    version("2026.1.0.0")
    assert environment_fingerprint(("0",), str(tool)) != old
    assert "compute-sanitizer" not in environment_fingerprint((), str(tool))  # CPU runs have no sanitizer jobs


def test_a_run_asks_nvidia_smi_once_for_the_gpus_and_the_fingerprint(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi takes seconds where the driver is not kept loaded: a cached run that asked it
    twice (which GPUs, then their names for the key) waited for it twice."""
    from gpu_gate.store.dependencies import environment_fingerprint
    from gpu_gate.executor.slots import detect_gpus, gpu_inventory

    calls = tmp_path / "calls"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho x >> {calls}\necho '0, NVIDIA H100 80GB HBM3, 580.95'\n"
                   f"echo '1, NVIDIA H100 80GB HBM3, 580.95'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu_inventory.cache_clear()
    try:
        assert detect_gpus() == ("0", "1")
        env = environment_fingerprint(("0", "1"))
        assert env["gpus"] == "NVIDIA H100 80GB HBM3, 580.95\nNVIDIA H100 80GB HBM3, 580.95"
        assert calls.read_text().count("x") == 1
    finally:
        gpu_inventory.cache_clear()


# --- entries say what produced them, and a hit is checked against it ------------------------------------


def _entry(cache: ResultCache, key: str) -> tuple[Path, dict[str, object]]:
    import json

    [path] = list(cache.dir.glob(f"*/{key}.json"))
    return path, json.loads(path.read_text())


def test_an_entry_carries_its_seed_and_run_record_and_a_hit_checks_both(repo: Path, tmp_path: Path) -> None:
    import json

    from gpu_gate.store.dependencies import run_record

    cache = ResultCache(tmp_path / "cache")
    job = make_job(seed=1234)
    run = run_record(job, repo, DEPS)
    assert cache.put(key_for(repo, job), red_result(), "aaa", run) is None
    path, entry = _entry(cache, key_for(repo, job))
    assert entry["seed"] == 1234 and entry["run"] == run and len(str(entry["run_digest"])) == 64
    assert cache.get(key_for(repo, job), run) is not None  # the legitimate hit
    # The next commit plans a new seed for the same unchanged job: still a hit, with the old seed's result.
    assert cache.get(key_for(repo, job), run_record(make_job(seed=99), repo, DEPS)) is not None
    # A record edited to describe other bytes no longer matches its digest.
    forged = dict(entry, run={**run, "files": {**run["files"], "csrc/rmsnorm.cu": "0" * 64}})
    path.write_text(json.dumps(forged))
    assert cache.get(key_for(repo, job), run) is None
    # An intact record of another run (different file bytes) is not this run.
    other = {**run, "files": {**run["files"], "mylib/common.py": "1" * 64}}
    import hashlib

    digest = hashlib.sha256(json.dumps(other, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()
    path.write_text(json.dumps(dict(entry, run=other, run_digest=digest)))
    assert cache.get(key_for(repo, job), run) is None
    # An entry with no record at all (written by anyone but the gate, or by an older gate) is a miss.
    path.write_text(json.dumps({k: v for k, v in entry.items() if k not in ("run", "run_digest", "seed")}))
    assert cache.get(key_for(repo, job), run) is None


def test_clear_removes_entries_and_nothing_else(repo: Path, tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    cache.put(key_for(repo), red_result(), "aaa")
    keep = tmp_path / "cache" / "README.md"
    keep.write_text("not an entry\n")
    assert cache.clear() == 1
    assert cache.get(key_for(repo)) is None and keep.exists()


def test_why_a_job_was_planned_is_not_what_it_runs(repo: Path, tmp_path: Path) -> None:
    """Seen on the GPU: the second run of an unchanged pull request plans the same job with one more
    reason (the files its spec read when it last ran) and missed the cache. The reasons are words for
    the reader; a change to anything that runs is still a miss."""
    from gpu_gate.store.dependencies import run_record

    cache = ResultCache(tmp_path / "cache")
    job = make_job(seed=1, why=("covers csrc/rmsnorm.cu (cuda, added)",))
    assert cache.put(key_for(repo, job), red_result(), "aaa", run_record(job, repo, DEPS)) is None
    again = make_job(seed=2, why=("covers csrc/rmsnorm.cu (cuda, added)", "read csrc/rmsnorm.cu when it last ran"))
    assert cache.get(key_for(repo, again), run_record(again, repo, DEPS)) is not None
    other = make_job(seed=2, why=again.why, options={"cases": 201, "dtypes": ["float32", "bfloat16"]})
    assert cache.get(key_for(repo, job), run_record(other, repo, DEPS)) is None
