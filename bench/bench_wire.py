"""Judge <-> worker transport: tensors through the socket's stream against sealed memory files.

A worker process (a child, as the executor starts one, without the sandbox) encodes N tensors of
``--mb`` MiB each on the device (``cuda`` where torch sees one, else ``cpu``) and sends them, one
message per tensor, as a reference worker sends its float64 outputs; the judge side receives each
and rebuilds it on the same device. Both transports run in the same process pair, interleaved
``--repeats`` times: ``stream`` (every blob in the socket, as before shared memory) and ``shared``
(from :data:`gpu_gate.protocol.shared.MIN_BYTES` on, a sealed memfd). Prints one line per run and a
table last: the median seconds and GB/s, and the bytes each side counted in the stream.

    python bench/bench_wire.py [--mb 64] [--count 16] [--repeats 3]

Not a test.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import statistics
import time

from gpu_gate.protocol import shared, wire
from gpu_gate.protocol.messages import tensors


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _worker(sock: socket.socket, mb: int, count: int, rounds: list[str]) -> None:
    import torch

    device = _device()
    data = [torch.randn(mb << 18, dtype=torch.float32, device=device) for _ in range(count)]  # mb MiB each
    for mode in rounds:
        shared.MIN_BYTES = 1 << 20 if mode == "shared" else 1 << 62
        for t in data:
            blobs: wire.Blobs = []
            meta = tensors.encode_tensor(t, blobs)
            wire.send(sock, {"op": "truth", "meta": meta.to_json()}, blobs)
    wire.send(sock, {"op": "stats", "stats": wire.stats()})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    device = _device()
    rounds = ["stream", "shared"] * args.repeats
    judge, worker = socket.socketpair()
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=_worker, args=(worker, args.mb, args.count, rounds))
    child.start()
    worker.close()
    times: dict[str, list[float]] = {"stream": [], "shared": []}
    for mode in rounds:
        before = dict(wire.STATS)
        start = time.monotonic()
        for _ in range(args.count):
            header, blobs = wire.recv(judge)
            meta = tensors.TensorMeta.from_json(header["meta"], tensors.Ledger([len(b) for b in blobs], "bench"),
                                                "bench")
            t = tensors.decode_tensor(meta, blobs, device)
            del t, blobs
        if device == "cuda":
            torch.cuda.synchronize()
        s = time.monotonic() - start
        times[mode].append(s)
        print(f"{mode:7s} {args.count} x {args.mb} MiB on {device}: {s:.3f} s, stream "
              f"{wire.STATS['received_mb'] - before['received_mb']:.0f} MB, shared "
              f"{wire.STATS['received_shared_mb'] - before['received_shared_mb']:.0f} MB", flush=True)
    header, _ = wire.recv(judge)
    child.join()
    total_gb = args.mb * args.count / 1024
    print(f"\nworker's counts: {header['stats']}")
    print(f"\n| transport | median s | GB/s | ({args.count} x {args.mb} MiB, {device}, {args.repeats} repeats) |")
    print("| --- | --- | --- | --- |")
    for mode, ts in times.items():
        m = statistics.median(ts)
        print(f"| {mode} | {m:.3f} | {total_gb / m:.2f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
