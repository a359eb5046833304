"""Blocked matmul tuned over triton.Config objects, pruned by an early
prune (blocks larger than the problem) and a perf model keeping the top 2."""
import torch
import triton
import triton.language as tl


def drop_oversized_blocks(configs, named_args, **kwargs):
    m, n, k = named_args["M"], named_args["N"], named_args["K"]
    kept = [c for c in configs
            if c.kwargs["BM"] <= m and c.kwargs["BN"] <= n
            and c.kwargs["BK"] <= k]
    return kept or configs[:1]


def estimated_cost(M, N, K, BM, BN, BK, num_warps, **_):
    # Fewer, larger tiles first; warps break ties.
    return triton.cdiv(M, BM) * triton.cdiv(N, BN) * triton.cdiv(K, BK) \
        + num_warps / 100


@triton.autotune(
    configs=[
        triton.Config({"BM": 16, "BN": 16, "BK": 16}, num_warps=2),
        triton.Config({"BM": 32, "BN": 16, "BK": 16}, num_warps=4,
                      num_stages=2),
        triton.Config({"BM": 16, "BN": 32, "BK": 32}, num_warps=4),
        triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_warps=8),
    ],
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": drop_oversized_blocks,
                      "perf_model": estimated_cost, "top_k": 2},
)
@triton.jit
def matmul_kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        x = tl.load(a + rows[:, None] * sam + ks[None, :] * sak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        y = tl.load(b + ks[:, None] * sbk + cols[None, :] * sbn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rows[:, None] * scm + cols[None, :] * scn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]),  # noqa: E731
                         triton.cdiv(N, meta["BN"]))
    matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(),
                        *c.stride())
    return c


def _inputs():
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    return (torch.randn(48, 40, generator=g),
            torch.randn(40, 24, generator=g))


def run():
    a, b = _inputs()
    return {"c": matmul(a, b)}


def expected():
    a, b = _inputs()
    return {"c": a @ b}
