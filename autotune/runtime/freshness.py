"""May a cached entry be used as it is, and why did a lookup miss? One
place for the runtime (autotune/runtime/session.py) and `autotune_cache
verify`: verdict() answers both in one call, with a Verdict.

The version rule: an entry tuned under another Triton, torch or CUDA
major.minor than the running ones has drifted (a counted hit by default,
refused under --autotune_version_match=strict). A refusal (_refusal) is a
cached entry of the very key that must not be used: a winner no longer
offered, stored candidates an update could not write back, a version
drift under strict matching. A miss without one is classified against the
loaded results files (LoadedIndex): the kernel changed, the key format
changed, the fusion is tuned for other devices only, or it is missing.

Same-named kernels: a cache entry names its kernel by the name it tunes
under (the function's name unless name= says otherwise), so two functions
of one name and signature (a test-local copy of a library kernel) share
its fusions. An entry of another fingerprint is the same kernel edited
only where nothing says it is another function: its compile requests
(recorded by the run that wrote it) name the function it was tuned for,
"module:qualname", and the decorations of this process say which
function holds each fingerprint (other_kernel).
"""
import collections
import re
import weakref
from typing import NamedTuple

from autotune import unwrap
from autotune.records import major_minor, tuned_with_triton, undecodable
from autotune.runtime import offers

# Why a lookup missed (the summary, the JSON report, require-complete).
MISSING = "missing"
KERNEL_CHANGED = "kernel changed"
OTHER_DEVICE = "other device"
OTHER_VERSION = "other version"
KEY_FORMAT_CHANGE = "key-format change"
UNREADABLE = "stored candidates unreadable"
MISS_REASONS = (MISSING, KERNEL_CHANGED, offers.NOT_OFFERED, OTHER_DEVICE,
                OTHER_VERSION, KEY_FORMAT_CHANGE, UNREADABLE)

_DEVICE_TRITON = re.compile(r"/triton-[^/]*$")


def without_triton(device):
    """A device key without its Triton version."""
    return _DEVICE_TRITON.sub("", device)

VERSION_COMPONENTS = (("Triton", "triton_version"),
                      ("torch", "torch_version"), ("CUDA", "cuda_version"))


def tuned_versions(entry):
    """{provenance field: version} an entry was tuned with; Triton's from
    the device key where the provenance lacks it (older caches)."""
    p = entry.provenance
    return {"triton_version": tuned_with_triton(entry),
            "torch_version": p.torch_version, "cuda_version": p.cuda_version}


def version_drift(provenance, running):
    """(component, tuned with, running) of the first of Triton, torch and
    CUDA whose major.minor differs between an entry's provenance (or
    tuned_versions' dict) and the running versions; None when none does
    (or a version is unknown)."""
    for label, field in VERSION_COMPONENTS:
        then = major_minor(provenance.get(field) if isinstance(
            provenance, dict) else getattr(provenance, field))
        now = major_minor(running.get(field))
        if then and now and then != now:
            return label, then, now
    return None


def _refusal(entry, offer, updating, strict_versions, running):
    """(reason, words) when a cached entry of the very key looked up must
    not be used; None when it may. offer: what the decoration offers now
    (runtime/offers.py), or None; updating: this run writes the cache
    that holds the entry; strict_versions: --autotune_version_match=strict;
    running: the running versions by provenance field."""
    why = offer.why_not(entry.best) if offer is not None else None
    if why is not None:
        return offers.NOT_OFFERED, why
    if updating:
        # An update writes what it uses: an entry whose stored candidates
        # do not decode could not be written back (a load uses its winner,
        # and the report names it).
        problem = undecodable(entry)
        if problem is not None:
            return UNREADABLE, (f"its stored candidates do not decode "
                                f"({problem}); measured again")
    if strict_versions:
        drift = version_drift(tuned_versions(entry), running)
        if drift is not None:
            what, then, now = drift
            return OTHER_VERSION, (f"tuned with {what} {then}, running "
                                   f"{now} (--autotune_version_match="
                                   "strict)")
    return None


# How a lookup's entry may be used (Verdict.how).
HIT = "hit"
HIT_OTHER_TRITON = "hit under another Triton"
REFUSED = "refused"
MISSED = "missed"


class Verdict(NamedTuple):
    """May a lookup's entry be used, and how. how: HIT (the entry of the
    very key), HIT_OTHER_TRITON (the entry of this key tuned under another
    Triton: the device key names the version), REFUSED (an entry of the
    key that must not be used) or MISSED (no entry). entry, source: the
    entry found and where (None when missed); reason: why it is not usable
    (one of MISS_REASONS), words: a refusal in words; unmeasured: the
    offered configs a usable entry never measured; top_up: an update
    measures those (with the entry's winner as incumbent)."""
    how: str
    entry: object = None
    source: object = None
    reason: object = None
    words: object = None
    unmeasured: tuple = ()
    top_up: bool = False

    @property
    def usable(self):
        return self.how in (HIT, HIT_OTHER_TRITON)


def _never_updating(key):
    return False


def verdict(key, found, index=None, offer=None, updating=_never_updating,
            strict_versions=False, running=None):
    """The one answer to "may this entry be used, and how" (a Verdict).
    key: the key looked up; found: (entry, source) the caches answered,
    (None, None) for none; index: a callable returning the loaded files'
    LoadedIndex (built when first needed: another Triton's entry of the
    key, the reason for a miss), or None (nothing else loaded); offer:
    what the decoration offers now (runtime/offers.py), or None;
    updating(key): whether this run writes the cache that holds key's
    entry; strict_versions: --autotune_version_match=strict; running: the
    running versions by provenance field."""
    entry, source = found
    how = HIT
    if entry is None and index is not None:
        entry, source = index().other_version(key)
        how = HIT_OTHER_TRITON
    if entry is None:
        reason = MISSING if index is None else index().miss_reason(key)
        return Verdict(MISSED, reason=reason)
    refused = _refusal(entry, offer, updating(entry.key), strict_versions,
                      running or {})
    if refused is not None:
        return Verdict(REFUSED, entry, source, *refused)
    # A memoized hit was held against this offer when it was remembered.
    unmeasured = () if offer is None or source == "memory" else \
        tuple(offer.unmeasured(entry))
    return Verdict(how, entry, source, unmeasured=unmeasured,
                   top_up=bool(unmeasured) and updating(key))


class LoadedIndex:
    """The entries of the loaded results files ({CacheKey: Entry}, and
    {CacheKey: source}), indexed by fusion, by key without the device's
    Triton version, and the key versions of each kernel."""

    def __init__(self, loaded, sources):
        self.loaded = loaded
        self.sources = sources
        self.by_fusion = collections.defaultdict(list)
        self.by_loose = {}
        self.versions = collections.defaultdict(set)
        for k, e in loaded.items():
            self.by_fusion[(k.kernel, k.signature)].append(k)
            self.by_loose[(without_triton(k.device), k.kernel, k.fingerprint,
                           k.signature, k.key_version)] = e
            self.versions[k.kernel].add(k.key_version)

    def other_version(self, key):
        """A loaded entry of this key tuned under another Triton (the
        device key names the version): (entry, source), else (None,
        None)."""
        entry = self.by_loose.get((without_triton(key.device), key.kernel,
                                   key.fingerprint, key.signature,
                                   key.key_version))
        if entry is None or entry.key.device == key.device:
            return None, None
        return entry, self.sources[entry.key]

    def miss_reason(self, key):
        """Why no loaded entry answered `key` (one of MISS_REASONS)."""
        if not self.loaded:
            return MISSING
        function = function_for(key)
        # Entries of another function of this name are not this kernel's.
        found = [k for k in self.by_fusion.get((key.kernel, key.signature),
                                               ())
                 if other_kernel(self.loaded[k], function) is None]
        if any(k.device == key.device and k.fingerprint != key.fingerprint
               for k in found):
            return KERNEL_CHANGED
        if self.versions.get(key.kernel, {key.key_version}) - \
                {key.key_version}:
            return KEY_FORMAT_CHANGE
        if found:
            return OTHER_DEVICE
        return MISSING

    def stale(self, keys):
        """{key: the loaded fingerprint} of the keys whose kernel
        changed (not those the cache holds only for another function of
        the same name)."""
        wanted = {(k.device, k.kernel, k.signature): k for k in keys}
        stale = {}
        for k in self.loaded:
            mine = wanted.get((k.device, k.kernel, k.signature))
            if mine is None or k.fingerprint == mine.fingerprint:
                continue
            if other_kernel(self.loaded[k], function_for(mine)) is None:
                stale[mine] = k.fingerprint
        return stale


# The decorations of this process (each autotuner registers itself): which
# Python function holds a kernel name and fingerprint.
_DECORATED = weakref.WeakSet()


def note_decorated(kernel):
    """Registers a decoration (an autotune.Autotuner) of this process."""
    _DECORATED.add(kernel)


def function_of(kernel):
    """"module:qualname" of the Python function a kernel object wraps (as
    compile requests name it), or None."""
    try:
        fn = unwrap.python_function(kernel)
        return f"{fn.__module__}:{fn.__qualname__}"
    except Exception:  # noqa: BLE001 -- an object that wraps no function
        return None


def functions_named(name):
    """{fingerprint: "module:qualname" (None where unknown)} of the
    decorations of this process that tune under `name`."""
    found = {}
    for kernel in list(_DECORATED):
        if getattr(kernel, "name", None) != name:
            continue
        try:
            fingerprint = kernel.fingerprint
        except Exception:  # noqa: BLE001 -- a kernel without source
            continue
        if found.get(fingerprint) is None:
            found[fingerprint] = function_of(kernel)
    return found


def tuned_functions(entry):
    """The functions ("module:qualname") an entry's compile requests say
    it was tuned for; empty when it records none (a run that wrote no
    requests, or a cache older than them)."""
    try:
        requests = entry.compile_requests
    except Exception:  # noqa: BLE001 -- undecodable: says nothing
        return set()
    return {r.kernel for r in requests if ":" in r.kernel}


def same_function(a, b):
    """Whether two "module:qualname" name one function: the same qualname
    in the same module, where a file run as a script (__main__) or
    imported under a longer package path (pytest's import modes) is the
    same module."""
    module_a, _, qualname_a = a.partition(":")
    module_b, _, qualname_b = b.partition(":")
    if qualname_a != qualname_b:
        return False
    if "__main__" in (module_a, module_b) or module_a == module_b:
        return True
    return module_a.endswith("." + module_b) or \
        module_b.endswith("." + module_a)


def other_kernel(entry, function):
    """The function ("module:qualname") an entry was tuned for, where that
    is not `function` (the kernel looked up): the entry is another kernel
    of the same name, not this one before an edit. None when it is this
    kernel or nothing says (the entry records no function, or `function`
    is unknown)."""
    if function is None:
        return None
    tuned = tuned_functions(entry)
    if not tuned or any(same_function(t, function) for t in tuned):
        return None
    return sorted(tuned)[0]


def function_for(key):
    """"module:qualname" of the decoration of this process that holds
    `key`'s kernel name and fingerprint, or None."""
    return functions_named(key.kernel).get(key.fingerprint)
