"""The decorator that tests use: stands where triton.autotune stands, with
its arguments and their meaning, and persists what it tunes.

    @autotune.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)],
                       key=["n_cols"])
    @triton.jit
    def kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr): ...

    kernel[grid](x, y, n_cols)

A call computes its fusion key from the key arguments, tensor dtypes and
the untuned constexprs, asks the session (autotune.runtime.session) for the entry,
and launches with its config; the session tunes through this object on a
miss. Arguments this project adds (reference=, outputs=, rtol=, atol=,
space=, search=, ...) are keywords triton.autotune does not have.
"""
import copy
import hashlib
import inspect
import itertools
import os
import sys
import time
import warnings

from triton.runtime.autotuner import Autotuner as TritonAutotuner

from autotune import log as logs
from autotune.errors import AutotuneArgumentError, AutotuneWarning
from autotune.measure import backends
from autotune import keys as keys_module
from autotune.measure import tuner
from autotune.records import Config, Entry
from autotune.runtime.session import AutotuneError, session
from autotune.cache import neighbours as reuse
from autotune.runtime import (distributed, offers, parallel,
                              progress as progress_module,
                              tuning)


def _triton_autotuner_error():
    """Triton's own error type for an autotuner that cannot go on (Triton
    3.7+); code written against triton.autotune catches it."""
    try:
        from triton.runtime.errors import AutotunerError
    except ImportError:  # older Triton: no such type to be caught as
        return ()
    return (AutotunerError,)


class NoConfigAfterPruningError(AutotuneError, *_triton_autotuner_error()):
    """early_config_prune left no config: what Triton raises, naming the
    kernel."""


def _notify_listener(fn, key, best_config, configs_timings, duration,
                     cache_hit):
    """Triton's knobs.autotuning.listener, where the installed Triton has
    one, called with the fields Triton gives it on every decision."""
    try:
        from triton import knobs
    except ImportError:
        return
    listener = getattr(getattr(knobs, "autotuning", None), "listener", None)
    if listener is not None:
        listener(fn=fn, key=key, best_config=best_config,
                 configs_timings=configs_timings, duration=duration,
                 cache_hit=cache_hit)


def _check_callables(tuner_, prune, reference):
    """prune_configs_by and reference=, checked when the kernel is
    decorated rather than at its first launch."""
    name = tuner_.name
    for what in ("perf_model", "early_config_prune"):
        if prune.get(what) is not None and not callable(prune[what]):
            raise AutotuneArgumentError(
                f"{name}: prune_configs_by {what} must be callable, got "
                f"{type(prune[what]).__name__}")
    top_k = prune.get("top_k", 1.0)
    if isinstance(top_k, bool) or not (
            (isinstance(top_k, float) and 0.0 < top_k <= 1.0)
            or (isinstance(top_k, int) and top_k >= 1)):
        raise AutotuneArgumentError(
            f"{name}: prune_configs_by top_k={top_k!r}; expected a fraction "
            "in (0, 1] or a whole number of configs >= 1")
    if reference is None:
        return
    if not callable(reference):
        raise AutotuneArgumentError(
            f"{name}: reference= must be callable (it is called with the "
            f"kernel's arguments by name), got {type(reference).__name__}")
    try:
        params = inspect.signature(reference).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = {p.name for p in params if p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    kernel = inspect.signature(tuner_.base_fn).parameters
    # The arguments a launch passes (tuned meta-parameters are not, and
    # arguments with defaults may not be).
    passed = [n for n in tuner_.arg_names if n not in tuner_._refused and
              (n not in kernel or kernel[n].default is inspect.Parameter.empty)]
    extra = [p.name for p in params if p.default is p.empty and (
        p.kind is p.POSITIONAL_ONLY or p.name not in tuner_.arg_names)
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    missing = [n for n in passed if n not in accepted]
    if missing or extra:
        raise AutotuneArgumentError(
            f"{name}: reference= is called with the kernel's arguments by "
            f"name ({', '.join(passed)}), but "
            + (f"takes no {', '.join(missing)}" if missing else
               f"requires {', '.join(extra)}")
            + " (give it those parameters, or **kwargs)")






log = logs.get("tuning")

SEARCHES = ("exhaustive", "evolutionary")
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg",
                   "ir_override")


def _base_function(kernel):
    """The Python function under a JITFunction, an InterpretedFunction, or
    a stack of triton.heuristics (each has .fn)."""
    fn = kernel
    while not inspect.isfunction(fn):
        inner = getattr(fn, "fn", None)
        if inner is None:
            raise AutotuneError(f"{kernel!r} is not a @triton.jit kernel")
        fn = inner
    return fn


def _jit_function(kernel):
    """The innermost kernel object: the one whose .fn is the function."""
    obj = kernel
    while not inspect.isfunction(getattr(obj, "fn", None)):
        obj = obj.fn
    return obj


def _heuristic_sources(kernel):
    """Sources of the triton.heuristics functions between this autotuner
    and the kernel: they set constexprs, so they are part of the code."""
    parts = []
    obj = kernel
    while not inspect.isfunction(getattr(obj, "fn", None)):
        for name, fn in sorted(getattr(obj, "values", {}).items()):
            try:
                text = inspect.getsource(fn)
            except (OSError, TypeError):
                code = getattr(fn, "__code__", None)
                text = repr((code.co_code, code.co_consts)) if code else \
                    repr(fn)
            parts.append(f"{name}\0{text}")
        obj = obj.fn
    return parts


def _no_pre_hook(kwargs, reset_only=False):
    return 0


def _no_post_hook(kwargs, exception):
    return 0


def refuse_cuda_graph_restore(name, use_cuda_graph, restore_value):
    """use_cuda_graph=True with restore_value: restoring compares bytes on
    the host, a sync that CUDA graph capture forbids, so every candidate
    would fail; refused in one line instead."""
    if use_cuda_graph and restore_value:
        raise AutotuneArgumentError(
            f"{name}: use_cuda_graph=True with restore_value is not "
            "supported (the restore would run inside graph capture); drop "
            "use_cuda_graph")


def _triton_knob(name):
    """Triton's knobs.autotuning.<name> (print, cache); False on a Triton
    without knobs."""
    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    return bool(getattr(getattr(knobs, "autotuning", None), name, False))


def _zero_bytes(tensor):
    """Zeroes a tensor's memory without an in-place autograd op (all-zero
    bytes are 0 for every dtype), so leaves that require grad, expanded
    views and inference tensors can be reset."""
    state = tuner.ArgumentState({"t": tensor})
    for view, lo, snap in state.regions.values():
        import torch
        with torch.no_grad():
            view[lo:lo + snap.numel()].zero_()


def _caller_level():
    """warnings stacklevel of the first frame outside this package and
    Triton: the user's launch, which is what a warning should point at."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get(
            "__name__", "").partition(".")[0] in ("autotune", "triton"):
        frame, level = frame.f_back, level + 1
    return level


_DTYPE = itertools.repeat("dtype")
_NO_DTYPE = itertools.repeat(None)


def _triton_prints_autotuning():
    """TRITON_PRINT_AUTOTUNING=1, or triton.knobs.autotuning.print set."""
    import os
    return _triton_knob("print") or os.environ.get(
        "TRITON_PRINT_AUTOTUNING", "") in ("1", "true", "on", "yes")


def triton_config_text(config):
    """A config as triton.Config prints itself."""
    if not isinstance(config, Config):
        return str(config)
    parts = [f"{k}: {v}" for k, v in config.kwargs.items()]
    parts += [f"num_warps: {config.num_warps}", f"num_ctas: {config.num_ctas}",
              f"num_stages: {config.num_stages}",
              f"maxnreg: {config.maxnreg}",
              f"ir_override: {config.ir_override}"]
    return ", ".join(parts)


def triton_message(name, key, seconds, config):
    """Triton's message for a finished tuning, in its words and layout, so
    that scripts which grep Triton's output keep working. Printed to
    stdout as Triton prints it (it is Triton's output, not a message of
    this library, and TRITON_PRINT_AUTOTUNING is what turns it on)."""
    return (f"Triton autotuning for function {name},\nwith key as {key},\n"
            f"finished after {seconds:.2f}s,\nbest config selected: "
            f"{triton_config_text(config)};")


class Autotuner(TritonAutotuner):
    """Stands where triton.runtime.autotuner.Autotuner stands:
    kernel[grid](*args, **kwargs), .run(*args, grid=, warmup=, **kwargs),
    .warmup(), .fn, .configs, .best_config, .prune_configs().

    A subclass of Triton's, because torch accepts a kernel by that class
    (torch.library.wrap_triton, triton_op, torch.compile's handling of
    user-defined kernels). It sets every attribute itself, Triton's
    included, and overrides what launches or tunes (run, warmup,
    prune_configs); Triton's __init__ is not called, and the drop-in's
    routing of Triton's run does not reach it.

    The positional arguments are triton's (fn, arg_names, configs, key,
    reset_to_zero, restore_value, ...); this project's own options are
    keyword-only.
    """

    def __init__(self, fn, arg_names=None, configs=None, key=(),
                 reset_to_zero=None, restore_value=None, pre_hook=None,
                 post_hook=None, prune_configs_by=None, warmup=None, rep=None,
                 use_cuda_graph=False, do_bench=None, cache_results=False, *,
                 reference=None, outputs=None, rtol=None, atol=None,
                 name=None, space=None, search="exhaustive", budget=None,
                 seed=0, timeout_s=60.0, time_budget_s=None):
        self.fn = self.kernel = fn
        self.base_fn = _base_function(fn)
        self.name = name or self.base_fn.__name__
        code = self.base_fn.__code__
        self.arg_names = list(arg_names or getattr(fn, "arg_names", None)
                              or code.co_varnames[:code.co_argcount])
        self.keys = self.key = list(key or ())
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        self._check_arguments(search, budget, time_budget_s)
        self.space = space
        if not configs and space is None:
            # Triton's default: one config, launched without tuning.
            configs = [Config({}, num_warps=4, num_stages=3, num_ctas=1)]
        self.configs = list(configs or ())
        self._originals = {}
        self._convert(self.configs)
        tuned = set()
        for config in self.configs:
            tuned |= set(config.kwargs)
        if space is not None:
            tuned |= set(space.param_names)
        self._refused = frozenset(tuned | set(_LAUNCH_OPTIONS))
        self._single = (Config.from_triton(self.configs[0])
                        if space is None and len(self.configs) == 1 else None)
        self._single_launch = self._single.all_kwargs() \
            if self._single is not None else None
        self.constexpr_names = sorted(set(keys_module.constexpr_names(self.base_fn)) - tuned
                                      - set(self.keys))
        self._set_hooks(pre_hook, post_hook)
        prune = prune_configs_by or {}
        self.perf_model = prune.get("perf_model")
        self.configs_top_k = prune.get("top_k", 1.0)
        self.early_config_prune = prune.get("early_config_prune")
        _check_callables(self, prune, reference)
        self._do_bench = do_bench
        self.num_warmups, self.num_reps = warmup, rep
        self.use_cuda_graph = use_cuda_graph
        refuse_cuda_graph_restore(self.name, use_cuda_graph,
                                  self.restore_value)
        if warmup is not None or rep is not None or use_cuda_graph:
            warnings.warn("warmup, rep and use_cuda_graph are deprecated in "
                          "triton.autotune; pass do_bench instead",
                          DeprecationWarning, stacklevel=3)
        # Results persist through the session's caches whatever this says.
        self.cache_results = cache_results or _triton_knob("cache")
        self.reference = reference
        self.outputs = outputs
        self.rtol, self.atol = rtol, atol
        self.search = search
        self.budget = budget
        self.time_budget_s = time_budget_s
        self.seed = seed
        self.timeout_s = timeout_s
        self.best_config = None
        self.nargs = None
        self.configs_timings = {}
        self.bench_time = None
        self._fingerprint = None
        self.cache = {}  # fast key -> the config it launches with
        self._memo = {}
        self._session = None
        self._warned = set()

    def _check_arguments(self, search, budget, time_budget_s):
        """Mistakes a launch would reveal late, refused at decoration."""
        for param, names in (("key", self.keys),
                             ("reset_to_zero", self.reset_to_zero),
                             ("restore_value", self.restore_value)):
            unknown = [n for n in names if n not in self.arg_names]
            if unknown:
                raise AutotuneArgumentError(
                    f"{self.name}: {param} names {', '.join(unknown)}, not "
                    f"arguments of the kernel ({', '.join(self.arg_names)})")
        if search not in SEARCHES:
            raise AutotuneArgumentError(
                f"{self.name}: search={search!r}; expected one of "
                f"{', '.join(map(repr, SEARCHES))}")
        for what, value in (("budget", budget),
                            ("time_budget_s", time_budget_s)):
            if value is not None and (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float)) or not value > 0):
                raise AutotuneArgumentError(
                    f"{self.name}: {what}={value!r}; expected a number > 0 "
                    "(or None for the default)")

    def _set_hooks(self, pre_hook, post_hook):
        """Triton's hooks: a user hook replaces the default one, which
        resets reset_to_zero and restores restore_value around every
        launch made while tuning (done here before each launch, untimed:
        see _tuning_setup; the default pre_hook stays callable)."""
        self.restore_copies = {}
        self.user_defined_pre_hook = pre_hook is not None
        self.user_defined_post_hook = post_hook is not None
        if pre_hook is not None:
            self.pre_hook = pre_hook
        elif self.reset_to_zero or self.restore_value:
            self.pre_hook = self._default_pre_hook
        else:
            self.pre_hook = _no_pre_hook
        if post_hook is not None:
            self.post_hook = post_hook
        elif self.restore_value:
            self.post_hook = self._default_post_hook
        else:
            self.post_hook = _no_post_hook

    def _convert(self, configs):
        """This project's Configs for the given ones, remembering each
        original (its pre_hook, and what best_config returns)."""
        out = []
        for original in configs:
            config = Config.from_triton(original)
            known = self._originals.get(config)
            if known is None:
                self._originals[config] = original
            elif known is not original and \
                    getattr(known, "pre_hook", None) is not \
                    getattr(original, "pre_hook", None):
                raise AutotuneArgumentError(
                    f"{self.name}: two configs ({config.short()}) differ only "
                    "in pre_hook; a cache entry could not tell them apart")
            out.append(config)
        return out

    # -- Triton's default hooks ------------------------------------------
    def _default_pre_hook(self, kwargs, reset_only=False):
        for name in self.reset_to_zero:
            if kwargs.get(name) is not None:
                _zero_bytes(kwargs[name])
        if not reset_only:
            self.restore_copies = {
                name: tuner.ArgumentState({name: kwargs[name]})
                for name in self.restore_value
                if kwargs.get(name) is not None}

    def _default_post_hook(self, kwargs, exception):
        for state in self.restore_copies.values():
            state.restore()
        self.restore_copies = {}

    # -- keys ------------------------------------------------------------
    @property
    def fingerprint(self):
        if self._fingerprint is None:
            self._fingerprint = self._fingerprint_by(
                keys_module.kernel_fingerprint)
        return self._fingerprint

    @property
    def source_text_fingerprint(self):
        """The fingerprint by the previous scheme (keys.
        source_text_fingerprint), for `autotune_cache rekey`."""
        return self._fingerprint_by(keys_module.source_text_fingerprint)

    def _fingerprint_by(self, kernel_fingerprint):
        fingerprint = kernel_fingerprint(_jit_function(self.kernel))
        heuristics = _heuristic_sources(self.kernel)
        if heuristics:
            fingerprint = hashlib.sha256("\0".join(
                [fingerprint] + heuristics).encode()).hexdigest()[:16]
        return fingerprint

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def _bind(self, args, kwargs):
        named = dict(zip(self.arg_names, args))
        named.update(kwargs)
        return named

    def fusion_key(self, named, kwargs):
        """Cheap part of the key: a tuple, memoized to the full CacheKey.
        Built with map() over C-level getters: this runs on every launch.
        The dtypes are listed in the order of `named` (positional arguments,
        then keywords as given), so the keyword names are part of it."""
        return (tuple(map(named.__getitem__, self.keys)),
                tuple(map(getattr, named.values(), _DTYPE, _NO_DTYPE)),
                tuple(kwargs),
                tuple(map(named.get, self.constexpr_names)))

    def _full_key(self, sess, named):
        key_values = [(k, named[k]) for k in self.keys]
        # In the kernel's argument order, however the call passed them.
        order = self.arg_names + sorted(set(named) - set(self.arg_names))
        dtypes = [(k, named[k].dtype) for k in order
                  if hasattr(named.get(k), "dtype")]
        consts = [(k, named[k]) for k in sorted(self.constexpr_names)
                  if k in named]
        signature = keys_module.fusion_signature(key_values, dtypes, consts)
        return keys_module.make_key(sess.device_key, self.name,
                                  self.fingerprint, signature)

    def _triton_key(self, named):
        """The key Triton's autotuner prints: the key arguments' values,
        then the dtype of every tensor argument."""
        values = [named[k] for k in self.keys if k in named]
        values += [str(v.dtype) for k, v in named.items()
                   if k in self.arg_names and hasattr(v, "dtype")]
        return tuple(values)

    def _refuse_tuned(self, kwargs):
        clash = self._refused.intersection(kwargs)
        if clash:
            raise AutotuneArgumentError(
                f"{self.name}: {', '.join(sorted(clash))} "
                f"{'is' if len(clash) == 1 else 'are'} set by the autotuned "
                "configs; the caller cannot pass "
                f"{'it' if len(clash) == 1 else 'them'} too")

    # -- launching -------------------------------------------------------
    def lookup_config(self, *args, **kwargs):
        """The config a call with these arguments would launch with (tuning
        on a miss)."""
        if self._single is not None:
            return self._single
        named = self._bind(args, kwargs)
        return self._resolve(named, None, args, kwargs)[0]

    def _resolve(self, named, grid, args, kwargs):
        """(config, original config, launch keywords) for a call."""
        sess = session()
        if sess is not self._session:
            self._check_decorated_for(sess.backend)
            self._memo.clear()
            self.cache.clear()
            self._session = sess
        fast = self.fusion_key(named, kwargs)
        hit = self._memo.get(fast)
        if hit is not None:
            return hit
        key = self._full_key(sess, named)
        started = time.perf_counter()
        tuned = []

        def tune(seeds, only):
            tuned.append(True)
            return self._tune(sess, key, named, grid, args, kwargs, seeds,
                              only)
        entry = sess.resolve(key, tune, lambda: self._neighbours(sess, key),
                             self._offer(args, kwargs))
        config = entry.best
        original = self._originals.get(config, config)
        if _triton_prints_autotuning():
            print(triton_message(self.base_fn.__name__, self._triton_key(named),
                                 time.perf_counter() - started, original))
        _notify_listener(
            _jit_function(self.kernel), self._triton_key(named), original,
            self.configs_timings if tuned else {},
            self.bench_time if tuned else None, cache_hit=not tuned)
        hit = self._memo[fast] = (config, original, config.all_kwargs())
        self.cache[fast] = original
        return hit

    def _offer(self, args, kwargs):
        """What this decoration offers for a call: its search space, or its
        configs as Triton prunes them for these arguments."""
        if self.space is not None:
            return offers.Offer(space=self.space)
        return offers.Offer(lambda: self._convert(self.prune_configs(
            kwargs, dict(zip(self.arg_names, args)))))

    def _check_decorated_for(self, backend):
        """Triton decides when a kernel is decorated whether it is
        interpreted: one decorated before TRITON_INTERPRET=1 was set is
        compiled for a GPU, and on the interpreter backend every launch
        would fail with Triton's "0 active drivers"."""
        if backend.name != "interpreter":
            return
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:
            return
        if not isinstance(_jit_function(self.kernel), InterpretedFunction):
            raise AutotuneError(
                f"{self.name}: this session runs kernels on Triton's "
                "interpreter (no GPU), but the kernel was decorated with "
                "@triton.jit before TRITON_INTERPRET=1 was set, so Triton "
                "compiles it for a GPU: import autotune before the module "
                "that defines the kernel, or set TRITON_INTERPRET=1 in the "
                "environment")

    def run(self, *args, grid=None, warmup=False, **kwargs):
        if kwargs:
            self._refuse_tuned(kwargs)
        if warmup:
            return self.warmup(*args, grid=grid, **kwargs)
        if self._single is not None:
            # One config: launched as it is, nothing to tune or cache.
            original = self.configs[0]
            launch = self._single_launch
        else:
            named = self._bind(args, kwargs)
            _, original, launch = self._resolve(named, grid, args, kwargs)
        self.best_config = original
        hook = getattr(original, "pre_hook", None)
        if hook is not None:
            hook({**dict(zip(self.arg_names, args)), **kwargs, **launch})
        return self.kernel.run(*args, grid=grid, warmup=False, **kwargs,
                               **launch)

    def warmup(self, *args, grid=None, **kwargs):
        """Compiles every (pruned) config without launching, as Triton's
        Autotuner.warmup does."""
        self.nargs = dict(zip(self.arg_names, args))
        try:
            return [self.kernel.warmup(*args, grid=grid, **kwargs,
                                       **Config.from_triton(c).all_kwargs())
                    for c in self.prune_configs(kwargs)]
        finally:
            self.nargs = None

    def prune_configs(self, kwargs, nargs=None):
        """Triton's pruning: early_config_prune(configs, named_args,
        **kwargs), then the top_k configs by perf_model."""
        nargs = self.nargs if nargs is None else nargs
        pruned = self.configs
        if self.early_config_prune:
            pruned = self.early_config_prune(self.configs, nargs, **kwargs)
            if not pruned:
                raise NoConfigAfterPruningError(
                    f"{self.name}: early_config_prune returned no config; it "
                    "must return at least one")
        if self.perf_model:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(pruned) * top_k))
            elif not isinstance(top_k, int):
                raise AutotuneArgumentError(
                    f"{self.name}: prune_configs_by top_k must be a float "
                    "<= 1.0 or an int")
            if len(pruned) > top_k:
                estimate = {
                    i: self.perf_model(**nargs, **kwargs,
                                       **Config.from_triton(c).all_kwargs())
                    for i, c in enumerate(pruned)}
                for i, value in estimate.items():
                    if isinstance(value, bool) or not isinstance(
                            value, (int, float)) or value != value:
                        raise AutotuneArgumentError(
                            f"{self.name}: prune_configs_by perf_model "
                            f"returned {value!r} for "
                            f"{Config.from_triton(pruned[i]).short()}; it "
                            "must return a number (the estimated run time)")
                order = sorted(estimate, key=estimate.get)[:top_k]
                pruned = [pruned[i] for i in order]
        return list(pruned)

    def _launch_candidate(self, config, grid, args, kwargs, named,
                          after_kernel=None):
        """One launch while tuning, with Triton's hooks around it: the
        config's pre_hook, the autotuner's pre_hook, the kernel, the
        post_hook (after_kernel sees the outputs before it restores)."""
        original = self._originals.get(config, config)
        launch = config.all_kwargs()
        full = {**named, **launch}
        hook = getattr(original, "pre_hook", None)
        if hook is not None:
            hook(full)
        if self.user_defined_pre_hook:
            self.pre_hook(full)
        try:
            self.kernel.run(*args, grid=grid, warmup=False, **kwargs, **launch)
            if after_kernel is not None:
                after_kernel()
        except Exception as e:
            if self.user_defined_post_hook:
                try:
                    self.post_hook(full, exception=e)
                finally:
                    raise
            raise
        if self.user_defined_post_hook:
            self.post_hook(full, exception=None)

    def _launch(self, config, grid, args, kwargs, named):
        """One tuning launch (worker processes rebuild launches with it)."""
        self._launch_candidate(config, grid, args, kwargs, named)

    def _tuning_setup(self, named):
        """What Triton's default hooks do around each tuning launch --
        zero reset_to_zero, put restore_value back -- done before each
        launch, outside the timed region. A user pre_hook replaces them,
        as in Triton."""
        if self.user_defined_pre_hook or not (self.reset_to_zero
                                              or self.restore_value):
            return None
        restore = tuner.ArgumentState(
            {n: named[n] for n in self.restore_value
             if named.get(n) is not None})
        zero = [named[n] for n in self.reset_to_zero
                if named.get(n) is not None]

        def setup():
            restore.restore()
            for tensor in zero:
                _zero_bytes(tensor)
        return setup

    def _time_fn(self, backend):
        """The timing Triton's arguments ask for, on a GPU; None: the
        backend's own (the interpreter's wall clock ignores them)."""
        if backend.name != "gpu":
            return None
        bench = self._do_bench
        if self.use_cuda_graph:
            from triton.testing import do_bench_cudagraph
            rep = self.num_reps if self.num_reps is not None else 100

            def bench(fn, quantiles):
                return do_bench_cudagraph(fn, rep=rep, quantiles=quantiles)
        elif self.num_warmups is not None or self.num_reps is not None:
            warm = self.num_warmups if self.num_warmups is not None else 25
            rep = self.num_reps if self.num_reps is not None else 100

            def time_fn(run, setup=None):
                # The backend's timing with Triton's warm-up and repetition
                # times: an in-place kernel's restore stays untimed.
                timed = copy.copy(backend)
                timed.warmup_ms, timed.rep_ms = warm, rep
                return timed.time(run, setup)
            return time_fn
        if bench is None:
            return None

        def time_fn(run, setup=None):
            if setup is not None:
                # Triton's benchmark times its hooks with the launch too.
                launch = run

                def run():
                    setup()
                    launch()
            result = bench(run, quantiles=(0.5, 0.2, 0.8))
            values = result if isinstance(result, (list, tuple)) else [result]
            return backends.Timing([v * 1000.0 for v in values])
        return time_fn

    def _timing_method(self, backend):
        """How the candidates are measured, in words, for the entry's
        provenance (entries measured differently are not compared): the
        timing _time_fn chooses and the selection rule's margins."""
        rule = " ".join(f"{name}={value}" for name, value in
                        tuner.DEFAULT_RULE._asdict().items())
        if backend.name != "gpu":
            how = backend.describe_timing()
        elif self.use_cuda_graph:
            how = "gpu do_bench_cudagraph"
        elif self._do_bench is not None:
            how = "gpu do_bench given to the decorator"
        elif self.num_warmups is not None or self.num_reps is not None:
            how = backend.describe_timing(self.num_warmups, self.num_reps)
        else:
            how = backend.describe_timing()
        return f"{how}; rule {rule}"

    def _neighbours(self, sess, key):
        return reuse.neighbours(sess.cache, key)

    def _warn_once(self, what, text):
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(text, AutotuneWarning, stacklevel=_caller_level())

    def _tune(self, sess, key, named, grid, args, kwargs, seeds, only=None):
        if grid is None:
            raise AutotuneError(f"{self.name}: miss for {key.describe()} in "
                                "lookup_config(); call the kernel to tune it")
        self.nargs = dict(zip(self.arg_names, args))
        try:
            # One tuner per device: measuring waits for the device's lock.
            with sess.device_turn(key):
                return self._tune_pruned(sess, key, named, grid, args,
                                         kwargs, seeds, only)
        finally:
            self.nargs = None

    def _tune_pruned(self, sess, key, named, grid, args, kwargs, seeds,
                     only=None):
        configs = None
        # The first offered config, an untuned launch's: always measured,
        # so the entry records what tuning bought.
        default = self.space.configs()[0] if self.space is not None else None
        if self.space is None:
            configs = self._convert(self.prune_configs(kwargs))
            default = configs[0]
            if only is not None:  # an update of configs added to the list
                configs = [c for c in configs if c in only]
            seeds = [s for s in seeds if s in configs]
            if len(set(configs)) == 1:
                # Pruned to one: stored without benchmarking, as Triton
                # does, so a cached run launches the same config.
                result = tuner.TuneResult([], None, 0.0, 0.0, "pruned")
                return Entry(key, configs[0], 0.0, (),
                             tuner.provenance_for(sess.backend, result))
        evaluator = self._evaluator(sess, named, grid, args, kwargs)
        # The cached config of this fusion, if any: kept unless beaten.
        incumbent = sess.incumbent_config(key)
        # Ranks of a torch.distributed job split the candidates and agree
        # on one winner: the shared evaluator is the pool too.
        shared = distributed.share(sess, key, evaluator, incumbent, seeds)
        evaluator = shared or evaluator
        progress = None
        # --autotune_workers: the candidates are measured in worker
        # processes (None: in this process).
        pool = shared or parallel.CandidatePool.for_miss(
            evaluator, sess.options.autotune_workers, sess.backend, self,
            grid, args, kwargs, take_device=sess.take_device)
        try:
            if self.space is None or self.search == "exhaustive":
                todo = self._candidate_list(configs, seeds, incumbent)
                self._compile_ahead(sess, todo, named)
                progress = self._progress(sess, key, len(set(todo)))
                result = tuner.run_candidates(
                    evaluator if pool is None else pool.replay(evaluator),
                    todo, "seeded" if seeds else "exhaustive",
                    incumbent=incumbent, progress=progress)
            else:
                result, progress = self._search(sess, key, evaluator, pool,
                                                seeds, incumbent)
        except AutotuneError as e:
            if progress is not None:
                progress.failed(e)
            raise
        finally:
            if pool is not None:
                pool.close()
        progress.finish(result)
        self._report(evaluator, result)
        return self._entry_of(sess, key, named, result, default)

    def _evaluator(self, sess, named, grid, args, kwargs):
        """The CandidateEvaluator of one fusion's launch: how a config is
        run, restored between runs, checked and timed."""
        tensors = {k: v for k, v in named.items()
                   if hasattr(v, "untyped_storage")}
        reference = None
        if self.reference is not None:
            def reference(**_tensors):
                result = self.reference(**named)  # may return (rtol, atol)
                if result is not None and not (
                        isinstance(result, tuple) and len(result) == 2) \
                        and not any(result is v for v in named.values()):
                    # (Returning the output it wrote, as y.copy_() does, is
                    # fine.)
                    self._warn_once("reference-return", (
                        f"autotune: {self.name}: reference= returned a "
                        f"{type(result).__name__}, which is ignored (only an "
                        "(rtol, atol) pair is read): it must write the "
                        "expected values into the output tensors, in place"))
                return result
        checker = None
        if sess.options.autotune_compile_check:
            from autotune.measure import compile_check
            checker = compile_check.Checker(
                sess.options.autotune_compile_check,
                _jit_function(self.kernel), named)
        return tuner.CandidateEvaluator(
            sess.backend,
            lambda config: self._launch_candidate(config, grid, args, kwargs,
                                                  named),
            tensors, outputs=self.outputs, reference=reference,
            rtol=self.rtol, atol=self.atol, timeout_s=self.timeout_s,
            on_benchmark=sess.count_benchmark,
            name=self.name, compile_checker=checker,
            on_compile_rejected=sess.count_compile_rejected,
            launch_checked=lambda config, after: self._launch_candidate(
                config, grid, args, kwargs, named, after),
            setup=self._tuning_setup(named),
            time_fn=self._time_fn(sess.backend))

    def _candidate_list(self, configs, seeds, incumbent):
        """What a config-list (or exhaustive) tuning measures, in order:
        seeds first; with seeds, a short list (half the rest, and the
        incumbent)."""
        if self.space is not None:
            configs = self.space.configs()
        rest = [c for c in configs if c not in seeds]
        if seeds:
            rest = rest[:max(1, len(rest) // 2)]
            if incumbent in configs and incumbent not in seeds \
                    and incumbent not in rest:
                rest.append(incumbent)
        return list(seeds) + rest

    def _search(self, sess, key, evaluator, pool, seeds, incumbent):
        """An evolutionary search over the space; (result, progress)."""
        budget = self.budget
        if seeds and budget:
            budget = max(len(seeds) + 1, budget // 2)
        first = list(seeds)
        if self.space.configs()[0] not in first:
            first.append(self.space.configs()[0])
        if incumbent is not None and incumbent not in first:
            first.append(incumbent)
        progress = self._progress(sess, key, len(self.space),
                                  budget or max(16, min(len(self.space), 64)))
        result = tuning.tune_with_search(
            evaluator, self.space, budget=budget, seed=self.seed,
            seeds=first, pool=pool, time_budget_s=self.time_budget_s,
            progress=progress, clock=pool.agreed_seconds
            if isinstance(pool, distributed.SharedEvaluator) else None)
        return tuner.reselect(evaluator, result, incumbent), progress

    def _entry_of(self, sess, key, named, result, default=None):
        """The cache entry of a finished tuning, with what Triton's
        autotuner leaves on the object after one."""
        best = result.best.config
        # Triton resets reset_to_zero once more before the real launch.
        self.pre_hook({**named, **best.all_kwargs()}, reset_only=True)
        # As Triton fills it: candidate config -> timings in milliseconds
        # (Triton's are do_bench quantiles; here the one median measured),
        # inf for a config that failed.
        self.configs_timings = {
            self._originals.get(c.config, c.config):
            [c.run_time_us / 1000.0 if c.ok else float("inf")]
            for c in result.candidates}
        provenance = tuner.provenance_for(sess.backend, result)
        tuning_s = max(0.0, result.seconds - sess.device_wait_s())
        default_us = next((c.run_time_us for c in result.candidates
                           if c.config == default and c.ok), 0.0)
        provenance = provenance._replace(
            tuning_seconds=round(tuning_s, 3),
            method=self._timing_method(sess.backend),
            default_run_time_us=default_us)
        self.bench_time = tuning_s
        return Entry(key, best, result.best.run_time_us,
                     sorted(result.candidates,
                            key=lambda c: c.config.sort_key),
                     provenance)

    def _progress(self, sess, key, candidates, budget=None):
        """The progress lines of this fusion's tuning, started."""
        progress = progress_module.TuningProgress(
            self.name, key.signature, candidates,
            verbosity=sess.options.autotune_verbosity, budget=budget,
            search=self.search)
        progress.start()
        return progress

    def _compile_ahead(self, sess, configs, named):
        """--autotune_compile_jobs on the GPU backend: compile the
        candidates for the device's target in spawned processes into
        Triton's on-disk cache while nothing is timed, so that each first
        launch while measuring loads its binary instead of compiling it.
        Needs the kernel under a module-level name (the processes import
        it); otherwise candidates compile as they first run."""
        jobs = sess.options.autotune_compile_jobs or min(os.cpu_count() or 1,
                                                         8)
        configs = list(dict.fromkeys(configs))
        if sess.backend.name != "gpu" or jobs <= 1 or len(configs) <= 1:
            return
        where = parallel.module_name_of(self)
        if where is None:
            log.info(f"autotune: {self.name} is not a module-level name: "
                     "its candidates compile in this process")
            return
        from autotune.measure import compile_check
        import torch
        major, minor = torch.cuda.get_device_capability(sess.backend.device)
        target = compile_check.Target(f"sm_{major}{minor}",
                                      major * 10 + minor)
        start = time.perf_counter()
        try:
            signature = compile_check.launch_signature(self.base_fn, named)
            results = compile_check.compile_ahead(
                where[0], where[1], signature, configs, target,
                min(jobs, len(configs)))
        except Exception as e:  # the measurement compiles what is missing
            detail = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            log.warning(f"autotune: {self.name}: compiling ahead failed "
                        f"({detail}); candidates compile as they first run")
            return
        failed = sum(not r["ok"] for r in results)
        log.info(f"autotune: {self.name}: {len(configs)} configs compiled "
                 f"ahead in {time.perf_counter() - start:.1f} s with {jobs} "
                 f"jobs ({failed} did not compile or exceed {target.name})")

    def _report(self, evaluator, result):
        if self.reference is not None or len(result.candidates) < 2:
            return
        if evaluator.reference_config is not None:
            self._warn_once("reference", (
                f"autotune: {self.name} has no reference=: its first "
                f"config that ran ({evaluator.reference_config.short()}) "
                "is the reference the other candidates are checked against"))
        wrong = [c for c in result.candidates if c.failure == "WRONG_RESULT"]
        if wrong and self.outputs is None:
            self._warn_once("wrong", (
                f"autotune: {self.name}: {len(wrong)} config(s) dropped as "
                f"wrong results, e.g. {wrong[0].config.short()}: "
                f"{wrong[0].failure_detail}. If that tensor is scratch "
                "space whose contents may differ by config, name the real "
                "outputs with outputs=[...]"))


def autotune(configs=None, key=(), prune_configs_by=None, reset_to_zero=None,
             restore_value=None, pre_hook=None, post_hook=None, warmup=None,
             rep=None, use_cuda_graph=False, do_bench=None,
             cache_results=False, **options):
    """Decorator form, triton.autotune's arguments in triton's order:
    @autotune(configs=[...], key=[...]) over @triton.jit (or over
    @triton.heuristics). options: this project's keywords (reference=,
    outputs=, rtol=, atol=, name=, space=, search=, budget=, seed=,
    timeout_s=, time_budget_s=)."""
    def wrap(kernel):
        return Autotuner(kernel, None, configs, key, reset_to_zero,
                         restore_value, pre_hook=pre_hook,
                         post_hook=post_hook,
                         prune_configs_by=prune_configs_by, warmup=warmup,
                         rep=rep, use_cuda_graph=use_cuda_graph,
                         do_bench=do_bench, cache_results=cache_results,
                         **options)
    return wrap


def tune(kernel, configs, key=(), **options):
    """Plain function form: autotune.tune(kernel, configs, key=[...])."""
    return Autotuner(kernel, configs=configs, key=key, **options)


__all__ = ["Autotuner", "AutotuneArgumentError", "AutotuneWarning",
           "autotune", "tune"]
