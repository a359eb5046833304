"""What a tuned launch moves and computes, recorded with its entry (the
schema's Work) so that the reports can say what the winner achieves
against the device's roof (autotune/report/roofline.py).

By default the bytes are the sizes of the launch's tensor arguments, each
counted once: a lower bound (a kernel that reads a tensor twice, or only
part of one, is not seen), and no FLOPs. A kernel's work model, given as
`work_model=` to `autotune.autotune` or in `prune_configs_by` beside
Triton's `perf_model` (a key Triton's own autotuner ignores, so the same
decoration runs unchanged without this project), says its FLOPs and/or
bytes. The copy bandwidth of the tuning GPU is measured once per process
and device, and stored with the entry as the roof its bytes/s are held
against.
"""
import inspect
import math

from autotune.errors import WorkModelError
from autotune.records import PRECISIONS, Work

# The model's keys (a number alone means FLOPs).
MODEL_KEYS = ("flops", "bytes", "precision")

# torch dtype name -> the peak FLOPs on such tensors are held against: the
# precision tl.dot runs fp32 inputs at by default is tf32.
_PRECISION_OF_DTYPE = {"bfloat16": "bf16", "float16": "fp16",
                       "float32": "tf32"}

# Copy bandwidth (bytes/s) measured on each device key, once a process.
_COPY_BANDWIDTH = {}

# The copy the bandwidth is measured with: 2 x 128 MiB, past the L2 of any
# GPU this project knows (50 MiB on an H100).
_COPY_BYTES = 1 << 27


def argument_bytes(named):
    """The bytes of the tensor arguments of a launch, each tensor counted
    once (an argument passed twice, or in place as input and output, is
    one tensor)."""
    seen = set()
    total = 0
    for value in named.values():
        if not (hasattr(value, "data_ptr") and hasattr(value, "numel")
                and hasattr(value, "element_size")):
            continue
        size = int(value.numel()) * int(value.element_size())
        identity = (value.data_ptr(), size)
        if identity in seen:
            continue
        seen.add(identity)
        total += size
    return total


def tensor_precision(named):
    """The precision FLOPs on the launch's floating tensors run at by
    default ("bf16", "fp16", "tf32"), the narrowest among them; "" when
    it has none."""
    found = set()
    for value in named.values():
        dtype = getattr(value, "dtype", None)
        name = str(dtype).rpartition(".")[2] if dtype is not None else ""
        if name in _PRECISION_OF_DTYPE:
            found.add(_PRECISION_OF_DTYPE[name])
    for precision in PRECISIONS:
        if precision in found:
            return precision
    return ""


def call_model(model, named, config):
    """(flops, bytes or None, precision or None) of the user's work model
    for one launch: called with the launch's named arguments and the
    winner's meta-parameters, as Triton calls a perf_model (only those it
    names, unless it takes **kwargs)."""
    arguments = {**named, **config.all_kwargs()}
    try:
        params = inspect.signature(model).parameters.values()
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind is p.VAR_KEYWORD
                                      for p in params):
        names = {p.name for p in params}
        arguments = {k: v for k, v in arguments.items() if k in names}
    try:
        value = model(**arguments)
    except Exception as e:  # noqa: BLE001 -- the user's code, any error
        raise WorkModelError(f"raised {type(e).__name__}: {e}") from None
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(MODEL_KEYS))
        if unknown:
            raise WorkModelError(
                f"returned the key(s) {', '.join(map(repr, unknown))}; "
                f"expected {', '.join(map(repr, MODEL_KEYS))}")
        flops, moved = value.get("flops", 0), value.get("bytes")
        precision = value.get("precision")
    else:
        flops, moved, precision = value, None, None
    for what, number in (("flops", flops), ("bytes", moved)):
        if number is None:
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)) \
                or not 0 <= number < math.inf:
            raise WorkModelError(f"returned {what}={number!r}; expected a "
                                 "finite number >= 0")
    if precision is not None and precision not in PRECISIONS:
        raise WorkModelError(f"returned precision={precision!r}; expected "
                             f"one of {', '.join(PRECISIONS)}")
    return float(flops), None if moved is None else float(moved), precision


def launch_work(named, config, model=None, copy_bandwidth=0.0):
    """The Work of one launch of `config` with the arguments `named`; a
    model's error is raised as WorkModelError (the caller says it, and
    records the arguments' bytes instead)."""
    moved = float(argument_bytes(named))
    source = "arguments"
    flops = 0.0
    precision = tensor_precision(named)
    if model is not None:
        flops, model_bytes, model_precision = call_model(model, named, config)
        if model_bytes is not None:
            moved, source = model_bytes, "model"
        precision = model_precision or precision
    return Work(moved, flops, source, precision if flops else "",
                copy_bandwidth)


def with_work(entry, named, tuner, backend):
    """The tuned entry with what its winner's launch moves and computes,
    by the tuner's work model (tuner.work_model, None for the default);
    a model that fails is said once (tuner._warn_once), and the tensor
    arguments' bytes are recorded instead."""
    bandwidth = copy_bandwidth(backend)
    try:
        work = launch_work(named, entry.best, tuner.work_model, bandwidth)
    except WorkModelError as e:
        tuner._warn_once("work_model", (
            f"autotune: {tuner.name}: work_model {e}; the entry records "
            "its tensor arguments' bytes instead"))
        work = launch_work(named, entry.best, None, bandwidth)
    return entry.replace(work=work)


def copy_bandwidth(backend):
    """Read + write bytes/s of a device-to-device copy on the backend's
    GPU, measured once a process per device; 0.0 on the interpreter (not
    a GPU figure) or when the copy's buffers do not fit."""
    if backend.name != "gpu":
        return 0.0
    key = backend.device_key()
    if key not in _COPY_BANDWIDTH:
        _COPY_BANDWIDTH[key] = _measure_copy(backend.device)
    return _COPY_BANDWIDTH[key]


def _measure_copy(device):
    # Heavy imports, only on a GPU.
    import torch
    from triton.testing import do_bench
    try:
        src = torch.empty(_COPY_BYTES, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        ms = do_bench(lambda: dst.copy_(src), warmup=5, rep=25)
    except (RuntimeError, MemoryError):  # out of memory: no figure
        return 0.0
    finally:
        src = dst = None
    return 2.0 * _COPY_BYTES / (ms * 1e-3) if ms > 0 else 0.0
