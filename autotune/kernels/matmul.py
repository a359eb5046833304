"""C = activation(A @ B + bias): a matmul with a fused epilogue.

fp32 inputs: tl.dot rounds them to tf32 on sm_80+ by default. This kernel
takes the input precision as a constexpr and the launcher follows torch:
"ieee" (true fp32) under torch's default float32 matmul precision
("highest"), "tf32" when torch.set_float32_matmul_precision("high") or
"medium" allows it, so the tuned kernel computes what torch.matmul would.
The reference returns tolerances derived from the dtype, the precision and
K (autotune.measure.tuner.dot_tolerance): a tf32 candidate is not judged wrong for
being tf32.
"""
import torch
import triton
import triton.language as tl

from autotune import Config, autotune


@triton.jit
def _apply_activation(x, ACTIVATION: tl.constexpr):
    if ACTIVATION == "relu":
        x = tl.maximum(x, 0.0)
    elif ACTIVATION == "leaky_relu":
        x = tl.where(x >= 0, x, 0.01 * x)
    return x


CONFIGS = [
    Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 4},
           num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in [
        (16, 16, 16, 2, 2), (16, 32, 16, 4, 2), (32, 16, 32, 4, 3),
        (32, 32, 32, 4, 3), (64, 32, 32, 4, 4), (32, 64, 32, 8, 4)]
]


# The GPU space, sized for Hopper (sm_90: 228 KB of shared memory per
# block) and Ampere (sm_80: 164 KB), bf16/fp16 inputs accumulated in fp32:
# tiles of 64 to 256, BLOCK_K 32 to 128, 3 to 5 stages, 4 or 8 warps,
# grouped ordering over 8 row blocks. Each (BLOCK_M, BLOCK_N, BLOCK_K,
# stages) keeps stages x (BLOCK_M + BLOCK_N) x BLOCK_K x 2 bytes within
# sm_80's shared memory; the compile check in CI compiles every one for
# sm_90 and sm_80 and fails on any that does not fit. fp32 inputs use the
# same space: the widest tiles then need more shared memory than a block
# has and fail as OUT_OF_RESOURCES while tuning, which never wins.
GPU_CONFIGS = [
    Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
           num_warps=w, num_stages=s)
    for bm, bn, bk, s, w in [
        (128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 256, 32, 4, 8),
        (256, 128, 32, 4, 8), (256, 64, 64, 4, 8), (64, 256, 64, 4, 8),
        (128, 128, 64, 4, 8), (128, 128, 64, 3, 4), (128, 128, 32, 5, 4),
        (128, 128, 128, 3, 8), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
        (128, 64, 32, 5, 4), (64, 128, 32, 5, 4), (128, 64, 128, 3, 4),
        (64, 128, 128, 3, 4), (64, 64, 64, 5, 4), (64, 64, 128, 3, 4),
        (256, 64, 32, 5, 4), (64, 256, 32, 5, 4)]
]


def configs_for_backend():
    """The GPU space on a GPU; the small interpreter space (CONFIGS) on
    Triton's interpreter, where one interpreted 256-wide tile takes
    seconds. Decided when the module is imported, as Triton decides then
    whether a kernel is interpreted."""
    from autotune.measure import backends
    return CONFIGS if backends.interpreter_selected() else GPU_CONFIGS


# Argument types for compiling every config for a GPU target on the CPU
# (tools/compile_check.py, which compiles the GPU space): bf16 and fp16
# inputs, with both activations, specialised as Triton's launcher
# specialises contiguous tensors whose sizes are multiples of 16 (4096^3,
# the skinny shapes of the GPU check): sizes, pointers and row strides
# divisible by 16 (":16"), unit strides constant. Without those facts the
# loads are neither vectorised nor pipelined, and the shared memory and
# registers reported are not those of a real launch.
COMPILE_SIGNATURES = {"matmul_bias_act_kernel": [
    dict({"a": f"*{dt}:16", "b": f"*{dt}:16", "bias": f"*{dt}:16",
          "c": f"*{dt}:16"},
         **{n: "i32:16" for n in ("M", "N", "K", "stride_am", "stride_bk",
                                  "stride_cm")},
         stride_ak=1, stride_bn=1, stride_cn=1,
         ACTIVATION=activation, INPUT_PRECISION="ieee")
    for dt, activation in (("bf16", "relu"), ("fp16", "leaky_relu"))]}


def _reference(a, b, bias, c, M, N, K, stride_am, stride_ak, stride_bk,
               stride_bn, stride_cm, stride_cn, ACTIVATION,
               INPUT_PRECISION="ieee", **_):
    c.copy_(reference(a, b, bias, ACTIVATION).to(c.dtype))
    return tolerance(a, b, INPUT_PRECISION)


def input_precision(dtype):
    """tl.dot's input precision for `dtype` inputs, following torch's
    float32 matmul precision (tf32 only where torch would use it)."""
    if dtype == torch.float32 and \
            torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return "ieee"


def tolerance(a, b, precision=None):
    """(rtol, atol) for comparing this kernel's output with reference()."""
    from autotune.measure.tuner import dot_tolerance
    precision = precision or input_precision(a.dtype)
    scale = (a.float().pow(2).mean().sqrt()
             * b.float().pow(2).mean().sqrt()).item()
    return dot_tolerance(a.dtype, a.shape[1], precision, scale)


def _work(a, M, N, K, INPUT_PRECISION="ieee", **_):
    """What one launch computes, for its achieved FLOP/s: a multiply-add
    (2 FLOPs) per M*N*K, and the bias and activation on each output. Its
    bytes are left to the default (the four tensors, each once)."""
    precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
        a.dtype, "tf32" if INPUT_PRECISION == "tf32" else "fp32")
    return {"flops": 2.0 * M * N * K + 2.0 * M * N, "precision": precision}


@autotune(configs=configs_for_backend(), key=["M", "N", "K"],
          reference=_reference,
          outputs=["c"], work_model=_work)
@triton.jit
def matmul_bias_act_kernel(a, b, bias, c, M, N, K, stride_am, stride_ak,
                           stride_bk, stride_bn, stride_cm, stride_cn,
                           ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr,
                           INPUT_PRECISION: tl.constexpr = "ieee"):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: neighbouring programs share tiles of A in L2.
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size)
    pid_n = (pid % (GROUP_M * num_n)) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        a_tile = tl.load(a + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                         mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b_tile = tl.load(b + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                         mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_tile, b_tile, input_precision=INPUT_PRECISION)
    acc += tl.load(bias + rn, mask=rn < N, other=0.0)[None, :]
    acc = _apply_activation(acc, ACTIVATION)
    tl.store(c + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
             acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_bias_act(a, b, bias, activation="relu"):
    M, K = a.shape
    K2, N = b.shape
    assert K == K2 and bias.shape == (N,)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"])  # noqa: E731
                         * triton.cdiv(N, meta["BLOCK_N"]),)
    matmul_bias_act_kernel[grid](a, b, bias, c, M, N, K, a.stride(0),
                                 a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1),
                                 ACTIVATION=activation,
                                 INPUT_PRECISION=input_precision(a.dtype))
    return c


def reference(a, b, bias, activation="relu"):
    out = a.float() @ b.float() + bias.float()
    if activation == "relu":
        out = torch.relu(out)
    elif activation == "leaky_relu":
        out = torch.nn.functional.leaky_relu(out, 0.01)
    return out.to(a.dtype)


def search_space():
    """The space the evolutionary search and the parallel tuner explore."""
    from autotune.search.space import Space
    return Space({"BLOCK_M": [16, 32, 64], "BLOCK_N": [16, 32, 64],
                  "BLOCK_K": [16, 32], "GROUP_M": [4]},
                 constraints=["BLOCK_M * BLOCK_N <= 2048"],
                 num_warps=[2, 4], num_stages=[2, 3])


def candidate_objective(device, M=48, N=48, K=64, activation="relu",
                        threads=1):
    """Objective for a parallel tuning worker: measures configs of one
    matmul fusion on this worker's device (a GPU, or one CPU thread under
    the interpreter). Picklable through functools.partial."""
    from autotune.measure import backends
    from autotune.measure import tuner
    from autotune.search.evolutionary import Measurement
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    backend = backends.select_backend("auto")
    dev = backend.device
    a, b = torch.randn(M, K, device=dev), torch.randn(K, N, device=dev)
    bias, c = torch.randn(N, device=dev), torch.empty(M, N, device=dev)
    kernel = matmul_bias_act_kernel.kernel
    precision = input_precision(a.dtype)

    def launch(config):
        grid = (triton.cdiv(M, config.kwargs["BLOCK_M"])
                * triton.cdiv(N, config.kwargs["BLOCK_N"]),)
        kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1),
                     b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     ACTIVATION=activation, INPUT_PRECISION=precision,
                     **config.all_kwargs())

    def write_reference(**_):
        c.copy_(reference(a, b, bias, activation))
        return tolerance(a, b, precision)
    evaluator = tuner.CandidateEvaluator(
        backend, launch, {"a": a, "b": b, "bias": bias, "c": c},
        outputs=["c"], reference=write_reference,
        name="matmul_bias_act_kernel")

    def objective(config):
        candidate, _ = evaluator(config)
        return Measurement.of_candidate(config, candidate)
    return objective
