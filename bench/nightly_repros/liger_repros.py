"""Standalone repros of what the nightly found in Liger-Kernel: plain torch and liger_kernel, no gpu-gate.

    PYTHONPATH=<Liger-Kernel>/src python liger_repros.py

Each check prints one line: the op, the inputs, and what it measured against torch in float64 (and,
where it says so, against torch's own error in the same dtype)."""
import torch
import torch.nn.functional as F
from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
from liger_kernel.ops.group_norm import LigerGroupNormFunction
from liger_kernel.ops.layer_norm import LigerLayerNormFunction
from liger_kernel.ops.rope import LigerRopeFunction

dev = "cuda"
torch.manual_seed(0)


def cos_sin(pos, hd, dtype):
    e = torch.arange(0, hd, 2, dtype=torch.float64, device=dev) / hd
    a = pos[..., None].double() / 10000.0 ** e
    both = torch.cat([a, a], dim=-1)
    return both.cos().to(dtype), both.sin().to(dtype)


def rot(x, cos, sin):
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


def rope(batch, qh, kh, seq, hd, dtype, runs=30):
    """In-place rotary on the layout a HF attention layer hands over: (b, s, h, d) projections viewed
    as (b, h, s, d). The same inputs, ``runs`` times: how many results differ from the first."""
    q0 = torch.randn(batch, seq, qh, hd, device=dev).to(dtype)
    k0 = torch.randn(batch, seq, kh, hd, device=dev).to(dtype)
    pos = torch.randint(0, 4096, (batch, seq), device=dev)
    cos, sin = cos_sin(pos, hd, dtype)
    first, differ = None, 0
    for _ in range(runs):
        q, k = q0.clone().transpose(1, 2), k0.clone().transpose(1, 2)
        qo, ko = LigerRopeFunction.apply(q, k, cos, sin)
        torch.cuda.synchronize()
        got = (qo.clone(), ko.clone())
        if first is None:
            first = got
        elif not all(torch.equal(a, b) for a, b in zip(first, got)):
            differ += 1
    c64, s64 = cos_sin(pos, hd, torch.float64)
    tq = rot(q0.double().transpose(1, 2), c64.unsqueeze(1), s64.unsqueeze(1))
    tk = rot(k0.double().transpose(1, 2), c64.unsqueeze(1), s64.unsqueeze(1))
    err = max((first[0].double() - tq).abs().max().item(), (first[1].double() - tk).abs().max().item())
    print(f"rope batch={batch} q_heads={qh} kv_heads={kh} seq={seq} head_dim={hd} {dtype}: "
          f"{differ}/{runs - 1} runs differ from the first; max error {err:.3g}")


def norm_case(what, x, w, b, ours, theirs):
    x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
    y = ours(x, w, b)
    dy = torch.randn_like(y)
    y.backward(dy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    y64 = theirs(x64, w64, b64)
    y64.backward(dy.double())
    xl, wl, bl = (t.detach().clone().requires_grad_() for t in (x, w, b))
    yl = theirs(xl, wl, bl)
    yl.backward(dy)
    parts = []
    for name, a, r, t in (("out", y, y64, yl), ("dx", x.grad, x64.grad, xl.grad), ("dw", w.grad, w64.grad, wl.grad)):
        bad = (~torch.isfinite(a.float())).sum().item()
        e = (a.double() - r).norm().item() / max(r.norm().item(), 1e-30)
        et = (t.double() - r).norm().item() / max(r.norm().item(), 1e-30)
        parts.append(f"{name}: rel err {e:.3g} (torch {et:.3g}){f', {bad} non-finite' if bad else ''}")
    print(f"{what}: " + "; ".join(parts))


for shape in [(2, 2, 2, 1, 64), (1, 14, 2, 128, 64), (1, 32, 8, 128, 64), (2, 32, 8, 256, 128), (1, 2, 1, 16, 2)]:
    for dtype in (torch.float32, torch.bfloat16):
        rope(*shape, dtype)

for offset in (0.0, 64.0, 1000.0):
    for batch, ch, sp in ((1, 4, 2), (7, 8, 4096)):
        x = (torch.randn(batch, ch, sp, device=dev) + offset).to(torch.bfloat16)
        w = (torch.randn(ch, device=dev) + offset).to(torch.bfloat16)
        b = (torch.randn(ch, device=dev) + offset).to(torch.bfloat16)
        norm_case(f"group_norm bf16 x~N({offset:g},1) {tuple(x.shape)} 4 groups", x, w, b,
                  lambda x, w, b: LigerGroupNormFunction.apply(x, w, b, x.shape[1], 4, 1e-6),
                  lambda x, w, b: F.group_norm(x, 4, w, b, 1e-6))

for offset in (0.0, 8.0, 64.0):
    for rows, hidden in ((1, 2), (4096, 4096)):
        x = (torch.rand(rows, hidden, device=dev) + offset).to(torch.bfloat16)
        w = (torch.randn(hidden, device=dev) + 1).to(torch.bfloat16)
        b = torch.randn(hidden, device=dev).to(torch.bfloat16)
        norm_case(f"layer_norm bf16 x~U({offset:g},{offset + 1:g}) {tuple(x.shape)}", x, w, b,
                  lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-6),
                  lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-6))

for tokens, vocab in ((4, 2), (768, 768), (512, 32000)):
    for layout in ("contiguous", "transposed"):
        base = torch.randn(tokens, vocab, device=dev) + 64
        logits = (base if layout == "contiguous" else base.t().contiguous().t()).to(torch.bfloat16)
        target = torch.randint(0, vocab, (tokens,), device=dev)
        target[::3] = -100
        x = logits.clone().requires_grad_() if layout == "contiguous" else \
            logits.t().contiguous().t().detach().requires_grad_()
        loss, *_ = LigerCrossEntropyFunction.apply(x, target, None, -100, 0.0, 0.0, "mean", None)
        loss.backward()
        x64 = logits.detach().double().requires_grad_()
        F.cross_entropy(x64, target, ignore_index=-100).backward()
        e = (x.grad.double() - x64.grad).abs().max().item()
        print(f"cross_entropy bf16 logits {tokens}x{vocab} {layout} (stride {tuple(x.stride())}): "
              f"max |dlogits - truth| {e:.3g}, max |truth| {x64.grad.abs().max().item():.3g}")
