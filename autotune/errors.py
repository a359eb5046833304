"""The errors rules_autotune raises for users.

Everything a user can get wrong (flags, cache files, cache directories,
spaces, search settings, a fusion no config of which runs, a backend the
machine lacks, a remote cache setting) raises an AutotuneError or a
subclass of it, so one `except autotune.AutotuneError` catches them all;
CacheFileError adds the path of the file at fault.
"""
from autotune.contract import REGENERATE_COMMAND


class AutotuneError(Exception):
    """A configuration or cache problem that stops the run."""


class CacheFileError(AutotuneError):
    """A cache file that cannot be used; the message names the file."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ToolError(AutotuneError):
    """Bad input or usage of a command-line tool: exit 2, one line."""


class RemoteToolError(ToolError):
    """A remote namespace a tool cannot read or write: exit 2, one line."""


class AutotuneWarning(UserWarning):
    """Something about a tuned kernel the user should know, once (a
    warnings category: filter it with the warnings module)."""


class CacheConflictError(AutotuneError):
    """A per-fusion cache file holds another key than its name says."""


class AutotuneFlagsError(AutotuneError):
    """A flag that cannot be parsed or used."""


class AutotuneArgumentError(AutotuneError, ValueError):
    """A decorator argument or a call that Triton's autotuner would refuse
    too (a ValueError there)."""


class BackendError(AutotuneError):
    """A backend that cannot run here (the flag against the machine)."""


class CompileCheckError(AutotuneError):
    """A config that does not compile for the target, or bad input."""


class TritonCacheError(AutotuneError):
    """Triton's cache folder cannot be written: every compile would fail,
    so it is reported once for the process instead of per config."""


class CompiledKernelMissError(AutotuneError):
    """A launch compiled although compiled kernels were given and
    --require_compiled_kernels asks that none does."""


class TuningError(AutotuneError):
    """No config of a fusion ran correctly, or tuning cannot go on."""


class DeviceContextLostError(TuningError):
    """A candidate left the CUDA context unusable (an illegal address, a
    device-side assert): CUDA cannot recover it inside the process, so the
    run stops here, naming the kernel and the config, instead of failing
    later with an unrelated error."""


class RemoteCacheError(AutotuneError):
    """A remote cache setting that cannot be used (URL, password source)."""


class SpaceError(AutotuneError):
    """A space that cannot be searched (no parameter, a bad constraint)."""


class SearchError(AutotuneError):
    """Search settings that cannot be used (budget, seeds)."""


class TableError(AutotuneError):
    """A recorded timing table that cannot be read or simulated."""


class TableMiss(TableError):
    """The search asked for a configuration the table does not hold."""

class DeviceLockError(AutotuneError):
    """The lock directory or file cannot be used."""

class DistributedTuningError(AutotuneError):
    """Ranks of a torch.distributed job could not tune a fusion together."""


class MalformedExchangeError(AutotuneError, ValueError):
    """A value read from a torch.distributed job's store is not what a rank
    sends (autotune.runtime.distributed); reported as a
    DistributedTuningError naming the rank."""


class RegenerateError(ToolError):
    """regenerate cannot go on: bazel failed, a dump is missing or bad."""


class AutotuneCacheMissError(AutotuneError):
    """Raised in require-complete mode; lists every miss seen so far.
    notes: {miss key: why a tier could not answer}. stale: {miss key:
    fingerprint of the loaded entry with the same kernel, signature and
    device} (the kernel changed since it was tuned). reasons: {miss key:
    why a cached entry of this very key was not used} (a config the
    kernel no longer offers, another version under strict matching)."""

    def __init__(self, misses, notes=None, stale=None, reasons=None):
        self.misses = list(misses)
        self.stale = dict(stale or {})
        self.reasons = dict(reasons or {})
        notes = notes or {}

        def why(k):
            if k in self.reasons:
                return f"stale: {self.reasons[k]}"
            if k in self.stale:
                return ("stale: the kernel changed since it was tuned "
                        f"(cached fingerprint {self.stale[k]}, now "
                        f"{k.fingerprint})")
            return "missing"
        lines = "\n".join(
            f"  - {k.kernel} [{k.signature}] on {k.device}: {why(k)}"
            + (f"; {notes[k]}" if k in notes else "")
            for k in self.misses)
        n_stale = sum(k in self.stale or k in self.reasons
                      for k in self.misses)
        super().__init__(
            f"require_complete_autotune_results: {n_stale} fusion(s) stale, "
            f"{len(self.misses) - n_stale} fusion(s) missing from the "
            f"autotune cache:\n{lines}\n"
            f"Regenerate the cache (`{REGENERATE_COMMAND}`) and commit it.")


_NO_CONFIG_AFTER_PRUNING = []


class WrongDeviceError(AutotuneError):
    """A gpu_types target on a device it does not accept."""


class UnservableFile(AutotuneError):
    """A file of a compiled-kernel directory that is not served; its text
    says why (autotune/binaries/triton_cache.py: never raised past it)."""


class WorkModelError(AutotuneError, ValueError):
    """A work model that raised or returned something unusable (said once
    by autotune/runtime/work.py, which records the arguments' bytes
    instead)."""


# Triton's message for it (triton/runtime/autotuner.py, prune_configs),
# word for word: code written against triton.autotune matches it.
NO_CONFIG_AFTER_PRUNING = (
    "No valid autotuner configs after pruning. `early_config_prune` should "
    "return at least one config.")


def no_config_after_pruning(kernel_name):
    """The error for an early_config_prune that left no config: an
    AutotuneError and, where the installed Triton has one (3.7+), Triton's
    own AutotunerError, which code written against triton.autotune
    catches, with Triton's message and the kernel's name as a note. The
    class is made on first use: this module imports no Triton at its head
    (the cache tool starts without it)."""
    if not _NO_CONFIG_AFTER_PRUNING:
        try:  # Triton is heavy, and older ones lack the type
            from triton.runtime.errors import AutotunerError
            bases = (AutotuneError, AutotunerError)
        except ImportError:
            bases = (AutotuneError,)
        _NO_CONFIG_AFTER_PRUNING.append(type(
            "NoConfigAfterPruningError", bases,
            {"__module__": __name__, "__doc__": no_config_after_pruning.__doc__}))
    error = _NO_CONFIG_AFTER_PRUNING[0](NO_CONFIG_AFTER_PRUNING)
    note = f"autotune: kernel {kernel_name}: early_config_prune returned " \
        "no config"
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10: the attribute add_note fills
        error.__notes__ = [note]
    return error
