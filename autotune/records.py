"""In-memory model of autotuning results: configs, cache keys and entries.

Entries are plain Python objects rather than protobuf messages: lookups on
the hot path and the fast text codec never touch the protobuf runtime.
Conversion to and from the schema lives in autotune.codec.
"""
import json
import re
from typing import NamedTuple

from autotune.errors import CacheFileError

# Bumped when the meaning of a cache key changes (what goes into the
# signature or the fingerprint), so old entries miss instead of misleading.
KEY_VERSION = 1

FAILURE_KINDS = ("NONE", "COMPILE_ERROR", "OUT_OF_RESOURCES", "WRONG_RESULT",
                 "TIMEOUT", "RUNTIME_ERROR")


class Config:
    """One point of a search space, as triton.Config describes it: the same
    fields and defaults (num_stages=3), so a triton.Config converts with
    nothing lost but its pre_hook, which is kept on the object but is not
    part of its identity (a function cannot be cached).

    Hashable and ordered so that configs can be deduplicated and tie-broken
    deterministically. maxnreg and ir_override are stored in the cached
    params text under their own names (a kernel argument cannot have either
    name: Triton takes them as launch options).
    """

    __slots__ = ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg",
                 "ir_override", "pre_hook", "_key", "_params_text", "_short")

    def __init__(self, kwargs=None, num_warps=4, num_stages=3, num_ctas=1,
                 maxnreg=None, pre_hook=None, ir_override=None):
        self.kwargs = dict(sorted((kwargs or {}).items()))
        for name, value in self.kwargs.items():
            if name in LAUNCH_OPTION_PARAMS:
                raise TypeError(f"config parameter {name}: a launch option, "
                                f"not a kernel parameter; pass {name}= to "
                                "Config")
            if type(value).__name__ == "constexpr":  # tl.constexpr(8) -> 8
                value = self.kwargs[name] = value.value
            if not isinstance(value, (bool, int, float, str)) and \
                    not _is_triton_dtype(value):
                raise TypeError(
                    f"config parameter {name}={value!r}: only bool, int, "
                    "float, str and triton.language dtype values can be "
                    "cached")
        self.num_warps = int(num_warps)
        self.num_stages = int(num_stages)
        self.num_ctas = int(num_ctas)
        self.maxnreg = None if maxnreg is None else int(maxnreg)
        self.ir_override = None if ir_override is None else str(ir_override)
        self.pre_hook = pre_hook
        self._key = (tuple((k, type(v).__name__, _sortable(v))
                           for k, v in self.kwargs.items()),
                     self.num_warps, self.num_stages, self.num_ctas,
                     self.maxnreg or 0, self.ir_override or "")
        self._params_text = None
        self._short = None

    @classmethod
    def from_triton(cls, config):
        """This project's Config for a triton.Config (or any object with its
        fields; fields a Triton version lacks take Triton's defaults)."""
        if isinstance(config, Config):
            return config
        return cls(dict(config.kwargs), getattr(config, "num_warps", 4),
                   getattr(config, "num_stages", 3),
                   getattr(config, "num_ctas", 1) or 1,
                   getattr(config, "maxnreg", None),
                   getattr(config, "pre_hook", None),
                   getattr(config, "ir_override", None))

    @property
    def params_text(self):
        """Canonical `NAME=VALUE ...` form stored in caches (see the schema)."""
        if self._params_text is None:
            pairs = [f"{k}={_format_param(v)}" for k, v in self.kwargs.items()]
            if self.maxnreg is not None:
                pairs.append(f"maxnreg={self.maxnreg}")
            if self.ir_override is not None:
                pairs.append(f"ir_override={_format_param(self.ir_override)}")
            self._params_text = " ".join(pairs)
        return self._params_text

    @classmethod
    def from_params_text(cls, text, num_warps=4, num_stages=3, num_ctas=1):
        kwargs = {}
        if '"' in text:
            pairs = _PARAM_RE.findall(text)
            if " ".join(f"{n}={v}" for n, v in pairs) != text:
                raise ValueError(f"malformed config params {text!r}")
        else:
            pairs = [p.split("=", 1) for p in text.split(" ")] if text else []
        for pair in pairs:
            if len(pair) != 2 or not pair[0]:
                raise ValueError(f"malformed config params {text!r}")
            kwargs[pair[0]] = _parse_param(pair[1], text)
        maxnreg = kwargs.pop("maxnreg", None)
        ir_override = kwargs.pop("ir_override", None)
        try:
            return cls(kwargs, num_warps, num_stages, num_ctas, maxnreg,
                       ir_override=ir_override)
        except TypeError as e:
            raise ValueError(f"config params {text!r}: {e}")

    @property
    def sort_key(self):
        return self._key

    def all_kwargs(self):
        """Meta-parameters plus launch options, as passed to a launch (the
        options Triton's Config.all_kwargs passes, None ones left out)."""
        out = dict(self.kwargs)
        out["num_warps"] = self.num_warps
        out["num_ctas"] = self.num_ctas
        out["num_stages"] = self.num_stages
        if self.maxnreg is not None:
            out["maxnreg"] = self.maxnreg
        if self.ir_override is not None:
            out["ir_override"] = self.ir_override
        return out

    def __eq__(self, other):
        return isinstance(other, Config) and self._key == other._key

    def __lt__(self, other):
        return self._key < other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        params = ", ".join(f"{k}={_format_param(v) if _is_triton_dtype(v) else repr(v)}"
                           for k, v in self.kwargs.items())
        extra = "".join(f", {n}={getattr(self, n)!r}"
                        for n in ("maxnreg", "ir_override")
                        if getattr(self, n) is not None)
        return (f"Config({params + ', ' if params else ''}"
                f"num_warps={self.num_warps}, "
                f"num_stages={self.num_stages}{extra})")

    def short(self):
        if self._short is None:
            self._short = self._format_short()
        return self._short

    def _format_short(self):
        parts = [f"{k}={_format_param(v) if _is_triton_dtype(v) else v}"
                 for k, v in self.kwargs.items()]
        parts += [f"num_warps={self.num_warps}", f"num_stages={self.num_stages}"]
        if self.num_ctas != 1:
            parts.append(f"num_ctas={self.num_ctas}")
        for name in ("maxnreg", "ir_override"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)}")
        return " ".join(parts)


# Launch options that travel in the params text (the schema has no field
# for them).
LAUNCH_OPTION_PARAMS = ("maxnreg", "ir_override")

_PARAM_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s"]+)')


def _is_triton_dtype(value):
    return type(value).__name__ == "dtype" and \
        type(value).__module__.startswith("triton.language")


_DTYPE_NAMES = {}


def _dtype_attr_name(value):
    """The triton.language attribute that names the dtype: tl.float16."""
    if not _DTYPE_NAMES:
        import triton.language as tl
        for attr in sorted(dir(tl)):
            obj = getattr(tl, attr)
            if type(obj) is tl.dtype and not attr.startswith("_"):
                _DTYPE_NAMES.setdefault(obj, attr)
    name = _DTYPE_NAMES.get(value)
    if name is None:
        raise TypeError(f"dtype {value!r} has no triton.language name, so it "
                        "cannot be cached")
    return name


def _sortable(value):
    """A config value as its identity holds it. A float is (is NaN, value):
    NaN never equals itself (nor hashes alike, from Python 3.10), yet a
    config with EPS=nan read back from a cache is the config the decoration
    offers, so every NaN is one value, sorted after the numbers."""
    if isinstance(value, float):
        return (True, 0.0) if value != value else (False, value)
    return "tl." + _dtype_attr_name(value) if _is_triton_dtype(value) \
        else value


def same_value(a, b):
    """Config values as Config compares them: equal, or both NaN."""
    return a == b or (isinstance(a, float) and isinstance(b, float)
                      and a != a and b != b)


def _format_param(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if _is_triton_dtype(value):
        return "tl." + _dtype_attr_name(value)
    return json.dumps(value)


def _parse_param(raw, text):
    try:
        if raw.startswith('"'):
            return json.loads(raw)
        if raw in ("true", "false"):
            return raw == "true"
        if raw.startswith("tl."):
            import triton.language as tl
            value = getattr(tl, raw[3:], None)
            if not isinstance(value, tl.dtype):
                raise ValueError(raw)
            return value
        try:
            return int(raw)
        except ValueError:
            return float(raw)
    except ValueError:
        raise ValueError(f"malformed value {raw!r} in config params {text!r}")


class CacheKey(NamedTuple):
    device: str
    kernel: str
    fingerprint: str
    signature: str
    key_version: int = KEY_VERSION

    def describe(self):
        return (f"kernel {self.kernel} [{self.signature}] on {self.device}")

    @property
    def fusion(self):
        """The fusion this key is of, on its hardware: (device without the
        versions it names, kernel, signature). An edited kernel (another
        fingerprint) or a re-tune under another Triton is the same fusion:
        what a newer entry replaces, an incumbent's fusion, what a reviewer
        compares."""
        return hardware_of(self.device), self.kernel, self.signature


class Candidate(NamedTuple):
    config: Config
    run_time_us: float = 0.0
    failure: str = "NONE"
    failure_detail: str = ""

    @property
    def ok(self):
        return self.failure == "NONE"


def major_minor(version):
    """"3.6" of "3.6.0+git1234"; None when `version` does not start with
    two numbers."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else None


# The versions a device key names: the Triton its timings were taken under
# (`NVIDIA H200/sm_90/sms=132/triton-3.6.0`). Two device keys that differ
# only in them are the same hardware; an update that re-measures a fusion
# under a new Triton replaces the old version's entry.
_DEVICE_VERSIONS = re.compile(r"/triton-[^/]*$")


def hardware_of(device):
    """A device key without the versions it names."""
    return _DEVICE_VERSIONS.sub("", device)


def device_triton_version(device):
    """The Triton version a device key names ("3.6.0" of
    "NVIDIA H200/sm_90/sms=132/triton-3.6.0"), or ""."""
    match = _DEVICE_VERSIONS.search(device or "")
    return match.group(0)[len("/triton-"):] if match else ""


def tuned_with_triton(entry):
    """The Triton version `entry` was tuned with: its provenance's, else
    (entries of older caches, whose provenance lacks it) the one its
    device key names; "" when neither says."""
    return entry.provenance.triton_version or \
        device_triton_version(entry.key.device)


class Provenance(NamedTuple):
    triton_version: str = ""
    torch_version: str = ""
    cuda_version: str = ""
    timestamp: str = ""
    timing_spread: float = 0.0
    tuner: str = ""
    tuning_seconds: float = 0.0
    # How the candidates were measured (backend, timing call, selection
    # rule); entries measured differently are not compared head to head.
    method: str = ""
    # Run time of the first offered config (an untuned launch's).
    default_run_time_us: float = 0.0

    def speedup(self, run_time_us):
        """What tuning bought: the first offered config's time over the
        winner's; None when it was not recorded."""
        if self.default_run_time_us > 0 and run_time_us > 0:
            return self.default_run_time_us / run_time_us
        return None


EMPTY_PROVENANCE = Provenance()


class CompileRequest(NamedTuple):
    """One launch of an entry's winner as Triton's launcher specialised it:
    what `autotune_cache compile` needs to build the binary for a GPU
    without the test's tensors (autotune/binaries/compile_requests.py
    writes and reads the two strings)."""
    kernel: str            # "module:qualname" of the Python function
    arguments: str         # NAME:TYPE:ATTR / NAME=JSON, space-separated
    options: str           # NAME=VALUE sorted, space-separated
    triton_version: str = ""


class Work(NamedTuple):
    """What one launch of a fusion moves and computes (the schema's Work):
    what its achieved bytes/s and FLOP/s are computed from
    (autotune/report/roofline.py)."""
    bytes: float = 0.0
    flops: float = 0.0         # 0: not modelled
    # "arguments": the tensor arguments' sizes, each counted once (a lower
    # bound on the bytes); "model": the kernel's own work model.
    source: str = ""
    precision: str = ""        # "bf16", "fp16", "tf32", "fp32" or ""
    # Read + write bytes/s of a device copy, measured when tuned; 0: not.
    copy_bandwidth: float = 0.0


NO_WORK = Work()
WORK_SOURCES = ("arguments", "model")
PRECISIONS = ("bf16", "fp16", "tf32", "fp32")


class Entry:
    """The result for one fusion on one device.

    `candidates` and `provenance` may be decoded lazily (see autotune.codec):
    a 100,000-entry file only needs keys and best configs to serve lookups.
    `decode` is then a (decoder, payload) pair, not a closure, to keep the
    number of objects the garbage collector tracks low.
    """

    __slots__ = ("key", "_best", "_run_time_us", "_candidates", "_provenance",
                 "_decode", "raw", "_compile_requests", "_work")

    def __init__(self, key, best, run_time_us, candidates=(),
                 provenance=EMPTY_PROVENANCE, decode=None,
                 compile_requests=(), work=NO_WORK):
        # best=None with a decoder: the best config and its time are decoded
        # on first use too (binary files: a lookup touches few entries).
        self.key = key
        self._best = best
        self._run_time_us = float(run_time_us) if best is not None else None
        self._candidates = tuple(candidates) if decode is None else None
        self._provenance = provenance if decode is None else None
        self._decode = decode
        # Decoded with the candidates (rarely used: `autotune_cache
        # compile` and show read them).
        self._compile_requests = tuple(compile_requests) \
            if decode is None else None
        # Decoded alone, on first use (the reports read it).
        self._work = work if decode is None else None
        # Where the entry was decoded from, kept after decoding: writing it
        # back in the same format can copy it instead of re-encoding.
        self.raw = decode

    def _materialize(self):
        decoder, payload = self._decode
        if self._best is None:
            self._best, self._run_time_us = decoder.head(payload)
        self._candidates, self._provenance = decoder(payload)
        self._compile_requests = decoder.compile_requests(payload)
        if self._work is None:
            self._work = decoder.work(payload)
        self._decode = None

    @property
    def best(self):
        if self._best is None:
            decoder, payload = self._decode
            self._best, self._run_time_us = decoder.head(payload)
        return self._best

    @property
    def run_time_us(self):
        if self._best is None:
            self.best  # noqa: B018 -- decodes best and its run time
        return self._run_time_us

    @property
    def candidates(self):
        if self._decode is not None:
            self._materialize()
        return self._candidates

    @property
    def provenance(self):
        if self._provenance is None:
            # Decoded alone: tools list the dates and versions of whole
            # files without decoding every candidate.
            decoder, payload = self._decode
            self._provenance = decoder.provenance(payload)
        return self._provenance

    @property
    def compile_requests(self):
        if self._compile_requests is None:
            # Decoded alone: an entry whose candidates do not decode still
            # tells how its binary is built.
            decoder, payload = self._decode
            self._compile_requests = decoder.compile_requests(payload)
        return self._compile_requests

    @property
    def work(self):
        if self._work is None:
            decoder, payload = self._decode
            self._work = decoder.work(payload)
        return self._work

    def replace(self, **changes):
        fields = dict(key=self.key, best=self.best,
                      run_time_us=self.run_time_us,
                      candidates=self.candidates, provenance=self.provenance,
                      compile_requests=self.compile_requests,
                      work=self.work)
        fields.update(changes)
        return Entry(**fields)

    def same_result(self, other):
        return self.best == other.best

    def __eq__(self, other):
        return (isinstance(other, Entry) and self.key == other.key
                and self.best == other.best
                and self.run_time_us == other.run_time_us
                and self.candidates == other.candidates
                and self.provenance == other.provenance
                and self.compile_requests == other.compile_requests
                and self.work == other.work)

    __hash__ = None

    def __repr__(self):
        return (f"Entry({self.key.describe()}: {self.best.short()}, "
                f"{self.run_time_us:.3f} us)")


class SelectionRule(NamedTuple):
    """The head-to-head rule: how an incumbent is held against a challenger
    (a re-tune, an update; measure/selection.py duel), and what the merge
    rule (cache/merge.py) applies to two stored entries. A fresh tune
    without an incumbent is decided by the contest instead
    (autotune.measure.selection:ContestRule: a short screen, then rounds
    where the timings cannot yet separate candidates).

    A duel is rounds of one timing of each config, the order alternating
    between rounds so drift cancels; the challenger wins when the 95%
    confidence interval of the time ratio (Student's t on the log ratios
    of the rounds) lies entirely below 1 - min_improvement (1 -
    incumbent_improvement when the holder is the incumbent). Decided from
    min_rounds on, as soon as the interval lies below or above that line
    or the challenger is not faster on average; kept after max_rounds when
    it still straddles the line.

    The incumbent's wider margin is hysteresis: a re-tune keeps the cached
    config unless the challenger is shown 8 % faster -- timing noise alone
    rarely gets there, which keeps regenerated caches byte-identical. Up
    to 12 rounds: with 10 % noise per timing, a challenger truly 20 %
    faster is shown to clear the 8 % bar in 98.5 % of duels (93.5 % with
    8 rounds).
    """
    min_improvement: float = 0.05
    incumbent_improvement: float = 0.08
    min_rounds: int = 4
    max_rounds: int = 12


# Fields the rule once had that never changed a measurement: a timing
# method (Provenance.method) that still names them describes the same
# measurement as one that does not (cache/merge.py methods_differ).
RETIRED_RULE_FIELDS = ("screen_margin", "max_duels")


DEFAULT_RULE = SelectionRule()


def undecodable(entry):
    """Why the entry's stored candidates or provenance do not decode (a
    CacheFileError), or None when they do: such an entry cannot be written
    back, so an update replaces it with the run's and never keeps it."""
    try:
        entry.candidates  # noqa: B018
        entry.provenance  # noqa: B018
    except CacheFileError as e:
        return e
    return None
