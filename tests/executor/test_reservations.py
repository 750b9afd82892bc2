"""Gates on one runner share each GPU's memory by reservation: two gates at once on a (fake) GPU
too small for both jobs' needs: neither fails, the second waits for the first, and a job's time
limit counts its own time, not the wait. Real executors, real job subprocesses; only the GPU's
inventory (its memory) is injected, since this machine has none."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.reservations import Reservations
from gpu_gate.executor.scheduling import execute
from gpu_gate.executor.slots import memory_need
from gpu_gate.findings import Status
from test_executor import _jobs

# The job says when it ran and what the gate reserved for it (on stderr: it can write nowhere else).
SPAN = ("import json, sys, time; t0 = time.time(); time.sleep(2.0); "
        "print('span', json.dumps([t0, time.time()]), file=sys.stderr, flush=True); return x * 2")


def test_a_reservation_is_refused_while_another_holds_the_memory_and_given_back(tmp_path: Path) -> None:
    gib = 1 << 30
    one, two = Reservations(lambda g: 4 * gib, tmp_path), Reservations(lambda g: 4 * gib, tmp_path)
    first = one.try_reserve("0", 3 * gib)
    assert first is not None
    assert two.try_reserve("0", 2 * gib) is None  # another gate's ledger: it sees the first's reservation
    assert two.try_reserve("1", 2 * gib) is not None  # another GPU
    one.release("0", first)
    assert two.try_reserve("0", 2 * gib) is not None
    # a lone job always starts, however much it needs
    assert Reservations(lambda g: 4 * gib, tmp_path / "x").try_reserve("0", 9 * gib) is not None


def test_a_dead_gates_reservation_is_dropped(tmp_path: Path) -> None:
    ledger = tmp_path / "gpu0.json"
    ledger.write_text(json.dumps({"gone": {"pid": 2 ** 22 + 12345, "bytes": 1 << 40}}))
    assert Reservations(lambda g: 4 << 30, tmp_path).try_reserve("0", 3 << 30) is not None


def test_two_gates_on_one_small_gpu_share_it_by_reservation(tmp_path: Path) -> None:
    results: dict[str, list] = {}
    ledgers = tmp_path / "runner"
    repos = []
    for name in ("a", "b"):
        root = tmp_path / name
        root.mkdir()
        repos.append((name, root, _jobs(root, {f"k{name}": SPAN})))
    need = memory_need(repos[0][2][0])
    # a GPU with room for one job's reservation, not two (the headroom aside)
    total = need + need // 2 + (512 << 20)

    def gate(name: str, root: Path, jobs: list) -> None:
        opts = ExecOptions(repo_root=root, gpus=("0",), timeout_s=600, health_probe=lambda g: None,
                           free_memory=lambda g: total, gpu_memory=lambda g: total, reservations_dir=ledgers,
                           jobs_per_gpu=2)
        results[name] = execute(jobs, opts)

    threads = [threading.Thread(target=gate, args=spec) for spec in repos]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = []
    for name, rs in results.items():
        assert [r.status for r in rs] == [Status.PASSED], [(r.reason, r.findings) for r in rs]
        spans += [json.loads(line[5:]) for r in rs for line in (r.log_tail or "").splitlines()
                  if line.startswith("span ")]
    spans.sort()
    assert len(spans) >= 2
    # the second gate's job ran only once the first's had given its reservation back
    firsts = [s for s in spans if s[0] < spans[0][1]]
    assert len(firsts) <= 1 or all(b <= a for (_, b), (a, _) in zip(spans, spans[1:])), spans
    assert Reservations(lambda g: total, ledgers).held("0") == 0  # every reservation given back
