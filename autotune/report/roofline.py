"""How good is a winner: what its launch achieves (bytes/s, FLOP/s, from
the work its entry records and the winner's measured time) against the
device's roof, and one line of advice for a fusion far below it, drawn
only from what was measured (docs/roofline.md).

The roof: the copy bandwidth measured on the device when the entry was
tuned (runtime/work.py), else the memory bandwidth of the GPU's public
datasheet (KNOWN_GPUS); FLOP peaks always come from the datasheet. Every
figure says where it came from. Entries timed on Triton's interpreter get
their figures computed and labelled as not GPU figures, and no roof.
"""
from typing import NamedTuple

from autotune.records import NO_WORK, hardware_of


class Gpu(NamedTuple):
    name: str
    device_names: tuple      # torch.cuda.get_device_properties(...).name
    bandwidth: float         # memory bandwidth, bytes/s
    peaks: dict              # precision -> dense FLOP/s
    source: str


def _peaks(bf16, tf32, fp32):
    return {"bf16": bf16, "fp16": bf16, "tf32": tf32, "fp32": fp32}


# Public datasheet figures, dense (without structured sparsity). The
# device names are those CUDA reports; a name not listed (H100 PCIe, H200
# NVL, ...) has other figures and gets no datasheet roof.
KNOWN_GPUS = (
    Gpu("H100 SXM", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"),
        3.35e12, _peaks(989.4e12, 494.7e12, 66.9e12),
        "NVIDIA H100 SXM datasheet"),
    Gpu("H200", ("NVIDIA H200",), 4.8e12,
        _peaks(989.4e12, 494.7e12, 66.9e12), "NVIDIA H200 SXM datasheet"),
    Gpu("A100 SXM 80GB", ("NVIDIA A100-SXM4-80GB",), 2.039e12,
        _peaks(312e12, 156e12, 19.5e12), "NVIDIA A100 datasheet"),
    Gpu("A100 PCIe 80GB", ("NVIDIA A100 80GB PCIe",), 1.935e12,
        _peaks(312e12, 156e12, 19.5e12), "NVIDIA A100 datasheet"),
    Gpu("A100 40GB", ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
        1.555e12, _peaks(312e12, 156e12, 19.5e12), "NVIDIA A100 datasheet"),
    Gpu("L4", ("NVIDIA L4",), 300e9, _peaks(121e12, 60e12, 30.3e12),
        "NVIDIA L4 datasheet"),
)

# Below this share of its roof a fusion gets a line of advice.
FAR_BELOW = 0.5

NOT_GPU = "interpreter timings: not GPU figures"
LOWER_BOUND = "tensor arguments, each counted once: a lower bound"
MODELLED = "the kernel's work model"


def device_name(device):
    """The GPU name of a device key ("NVIDIA H100 80GB HBM3" of
    "NVIDIA H100 80GB HBM3/sm_90/sms=132/triton-3.9.0")."""
    return hardware_of(device).split("/", 1)[0]


def known_gpu(device):
    """The KNOWN_GPUS row of a device key, or None."""
    name = device_name(device)
    return next((g for g in KNOWN_GPUS if name in g.device_names), None)


def on_interpreter(device):
    return device.startswith("cpu/") or "/triton-interpreter" in device


class Roof(NamedTuple):
    bandwidth: float = 0.0          # bytes/s; 0: unknown
    bandwidth_source: str = ""
    peak: float = 0.0               # FLOP/s at the work's precision
    peak_source: str = ""


def roof_of(device, work):
    """The roof an entry's work is held against, each part labelled."""
    if on_interpreter(device):
        return Roof()
    gpu = known_gpu(device)
    bandwidth, bandwidth_source = 0.0, ""
    if work.copy_bandwidth > 0:
        bandwidth = work.copy_bandwidth
        bandwidth_source = "copy bandwidth measured when tuned"
    elif gpu is not None:
        bandwidth = gpu.bandwidth
        bandwidth_source = f"{gpu.source} memory bandwidth"
    peak, peak_source = 0.0, ""
    if gpu is not None and work.precision in gpu.peaks:
        peak = gpu.peaks[work.precision]
        peak_source = f"{gpu.source} dense {work.precision} peak"
    return Roof(bandwidth, bandwidth_source, peak, peak_source)


def figures(device, work, run_time_us):
    """The record's "roofline" part: what the launch moves and computes,
    what the winner achieves, the roof and the share of it; None for an
    entry that recorded no work."""
    if work is None or work == NO_WORK:
        return None
    out = {"bytes": work.bytes,
           "bytes_counted": MODELLED if work.source == "model"
           else LOWER_BOUND,
           "flops": work.flops or None,
           "precision": work.precision or None,
           "gpu_figures": not on_interpreter(device),
           "note": NOT_GPU if on_interpreter(device) else None}
    seconds = run_time_us * 1e-6
    achieved_bytes = work.bytes / seconds if seconds > 0 else None
    achieved_flops = work.flops / seconds if seconds > 0 and work.flops \
        else None
    intensity = work.flops / work.bytes if work.flops and work.bytes \
        else None
    roof = roof_of(device, work)
    out.update(bytes_per_s=achieved_bytes, flops_per_s=achieved_flops,
               arithmetic_intensity=intensity,
               roof_bandwidth=roof.bandwidth or None,
               roof_bandwidth_source=roof.bandwidth_source or None,
               roof_peak_flops=roof.peak or None,
               roof_peak_source=roof.peak_source or None,
               bound=None, share_of_roof=None, share_of=None)
    if achieved_bytes is None:
        return out
    if intensity is not None and roof.bandwidth and roof.peak:
        # Where the roof's two parts meet: below it, bandwidth bounds.
        ridge = roof.peak / roof.bandwidth
        if intensity < ridge:
            out.update(bound="memory",
                       share_of_roof=achieved_bytes / roof.bandwidth,
                       share_of=roof.bandwidth_source)
        else:
            out.update(bound="compute",
                       share_of_roof=achieved_flops / roof.peak,
                       share_of=roof.peak_source)
    elif roof.bandwidth:
        # Bytes alone: held against the bandwidth, bound not known.
        out.update(share_of_roof=achieved_bytes / roof.bandwidth,
                   share_of=roof.bandwidth_source)
    return out


def advice(record):
    """One line for a fusion far below its roof (a fusion record with its
    "roofline" part and candidates), from what was measured only: which
    of the winner's parameters sit at the edge of what was offered, and
    whether larger values failed; None when it is not far below or its
    share is unknown."""
    figures_ = record.get("roofline") or {}
    share = figures_.get("share_of_roof")
    if share is None or share >= FAR_BELOW:
        return None
    bound = figures_.get("bound")
    head = (f"{bound}-bound at " if bound else "bytes only (no work model): "
            "at ") + f"{share * 100:.0f} % of {figures_['share_of']}"
    rows = record.get("candidates") or []
    winner = next((r for r in rows if r.get("winner")), None)
    if winner is None or len(rows) < 2:
        return head + ": only one config was measured; offer more"
    return head + ": " + _edges(winner, rows)


def _numbers(config):
    return {n: v for n, v in config.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _edges(winner, rows):
    """What the winner's place among the measured configs says: the
    parameters where nothing larger was offered, and the larger values
    that failed."""
    configs = [_numbers(_parse_short(r["config"])) for r in rows]
    best = _numbers(_parse_short(winner["config"]))
    at_edge, failed = [], {}
    for name, value in best.items():
        offered = {c[name] for c in configs if name in c}
        if len(offered) > 1 and value >= max(offered):
            at_edge.append(name)
    for row, config in zip(rows, configs):
        if row.get("failure"):
            for name, value in best.items():
                if config.get(name, value) > value:
                    failed.setdefault(name, set()).add(row["failure"])
    blocks = [n for n in at_edge if n not in ("num_warps", "num_stages")]
    warps = "num_warps" in at_edge
    said = []
    if blocks:
        said.append(f"the winner is the largest {', '.join(blocks)} offered"
                    + (" with the most warps offered" if warps else "")
                    + "; try larger blocks or more warps")
    elif warps:
        said.append("the winner has the most warps offered; try more warps")
    said += [f"larger {name} failed ({', '.join(sorted(kinds))})"
             for name, kinds in sorted(failed.items())]
    if said:
        return "; ".join(said)
    return ("the winner is inside the offered range, so a wider search "
            "would not obviously help; look at the kernel's memory access "
            "pattern (coalescing, data read more than once)")


def _parse_short(text):
    """{NAME: value} of a config's short text (records.Config.short):
    numbers as numbers, anything else as its text."""
    out = {}
    for part in str(text).split(" "):
        name, sep, value = part.partition("=")
        if not sep:
            continue
        try:
            out[name] = int(value)
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                out[name] = value
    return out


def format_rate(value, unit):
    """"1.23 TB/s", "456 GFLOP/s": a rate with an SI prefix."""
    if value is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"),
                          (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
