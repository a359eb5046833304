"""The decorator that tests use: stands where triton.autotune stands, with
its arguments and their meaning, and persists what it tunes.

    @autotune.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)],
                       key=["n_cols"])
    @triton.jit
    def kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr): ...

    kernel[grid](x, y, n_cols)

A call computes its fusion key from the key arguments, tensor dtypes and
the untuned constexprs, asks the session (autotune.runtime.session) for
the entry, and launches with its config. On a miss the session calls back
here: the configs are pruned as Triton prunes them and handed, with the
call and the tuning keywords, to the miss path (autotune.runtime.tuning),
which measures and records; this object keeps what Triton's autotuner
keeps after a tuning. Arguments this project adds (reference=, outputs=,
rtol=, atol=, space=, search=, ...) are keywords triton.autotune does not
have.
"""
import hashlib
import inspect
import itertools
import os
import sys
import time
import warnings

from triton.runtime.autotuner import Autotuner as TritonAutotuner

from autotune import keys as keys_module
from autotune import errors, unwrap
from autotune.cache import neighbours as reuse
from autotune.errors import (AutotuneArgumentError, AutotuneError,
                             AutotuneWarning)
from autotune.measure import tuner
from autotune.records import Config
from autotune.runtime import (freshness, launch_record, offers,
                              timing_request, tuning)
from autotune.runtime import work as work_module
from autotune.runtime.session import session

SEARCHES = ("exhaustive", "evolutionary")
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg",
                   "ir_override")


def fingerprints_named(name):
    """Kernel fingerprints of the decorations of this process that tune
    under `name`: two functions of one name (in two modules) share cache
    entries' kernel name, not their fingerprints."""
    return set(freshness.functions_named(name))


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


def _check_arguments(tuner_, search, budget, time_budget_s):
    """Mistakes a launch would reveal late, refused at decoration."""
    for param, names in (("key", tuner_.keys),
                         ("reset_to_zero", tuner_.reset_to_zero),
                         ("restore_value", tuner_.restore_value)):
        unknown = [n for n in names if n not in tuner_.arg_names]
        if unknown:
            raise AutotuneArgumentError(
                f"{tuner_.name}: {param} names {', '.join(unknown)}, not "
                f"arguments of the kernel ({', '.join(tuner_.arg_names)})")
    if search not in SEARCHES:
        raise AutotuneArgumentError(
            f"{tuner_.name}: search={search!r}; expected one of "
            f"{', '.join(map(repr, SEARCHES))}")
    for what, value in (("budget", budget),
                        ("time_budget_s", time_budget_s)):
        if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float)) or not value > 0):
            raise AutotuneArgumentError(
                f"{tuner_.name}: {what}={value!r}; expected a number > 0 "
                "(or None for the default)")


def _check_callables(tuner_, prune, reference):
    """prune_configs_by and reference=, checked when the kernel is
    decorated rather than at its first launch."""
    name = tuner_.name
    for what in ("perf_model", "early_config_prune", "work_model"):
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


def _heuristic_sources(kernel):
    """Sources of the triton.heuristics functions between this autotuner
    and the kernel: they set constexprs, so they are part of the code."""
    parts = []
    for layer in unwrap.layers(kernel)[:-1]:
        for name, fn in sorted(getattr(layer, "values", {}).items()):
            try:
                text = inspect.getsource(fn)
            except (OSError, TypeError):
                code = getattr(fn, "__code__", None)
                text = repr((code.co_code, code.co_consts)) if code else \
                    repr(fn)
            parts.append(f"{name}\0{text}")
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
        # The tensor's own library, loaded by whoever made the tensor: not
        # imported with this module, which Triton alone can load.
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
                 seed=0, timeout_s=60.0, time_budget_s=None,
                 work_model=None):
        self.fn = self.kernel = fn
        self.base_fn = unwrap.python_function(fn)
        self.name = name or self.base_fn.__name__
        code = self.base_fn.__code__
        self.arg_names = list(arg_names or getattr(fn, "arg_names", None)
                              or code.co_varnames[:code.co_argcount])
        self.keys = self.key = list(key or ())
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        _check_arguments(self, search, budget, time_budget_s)
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
        # runtime/work.py: a keyword, or a key Triton ignores.
        prune = {**prune, "work_model": work_model or prune.get("work_model")}
        self.work_model = prune["work_model"]
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
        self._launches = None
        self._session = None
        self._warned = set()
        freshness.note_decorated(self)

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
        fingerprint = kernel_fingerprint(unwrap.jit_function(self.kernel))
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
            self._launches = launch_record.LaunchRecorder(self.kernel)
        fast = self.fusion_key(named, kwargs)
        hit = self._memo.get(fast)
        if hit is not None:
            if sess.records_compile_requests:
                self._launches.note(sess, hit[3], named, hit[0])
            return hit
        key = self._full_key(sess, named)
        started = time.perf_counter()
        tuned = []

        offer = self._offer(args, kwargs)

        def tune(seeds, only):
            tuned.append(True)
            return self._tune(sess, key, named, grid, args, kwargs, seeds,
                              only, offer)
        entry = sess.resolve(key, tune, lambda: self._neighbours(sess, key),
                             offer)
        config = entry.best
        original = self._originals.get(config, config)
        # A list pruned to one is launched as Triton launches it: nothing
        # benchmarked, no "finished after" line, no listener call.
        if not offer.pruned_to_one():
            if _triton_prints_autotuning():
                print(triton_message(
                    self.base_fn.__name__, self._triton_key(named),
                    time.perf_counter() - started, original))
            _notify_listener(
                unwrap.jit_function(self.kernel), self._triton_key(named),
                original, self.configs_timings if tuned else {},
                self.bench_time if tuned else None, cache_hit=not tuned)
        if sess.records_compile_requests:
            self._launches.note(sess, key, named, config)
        hit = self._memo[fast] = (config, original, config.all_kwargs(), key)
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
        if not isinstance(unwrap.jit_function(self.kernel), InterpretedFunction):
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
            _, original, launch, _ = self._resolve(named, grid, args,
                                                   kwargs)
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
                raise errors.no_config_after_pruning(self.name)
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

    def _timing(self):
        """The timing Triton's arguments ask for (runtime/timing_request.py)."""
        return timing_request.TimingRequest(
            self.num_warmups, self.num_reps, self.use_cuda_graph,
            self._do_bench)

    def _neighbours(self, sess, key):
        return reuse.neighbours(sess.cache, key)

    def _warn_once(self, what, text):
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(text, AutotuneWarning, stacklevel=_caller_level())

    def _tune(self, sess, key, named, grid, args, kwargs, seeds, only=None,
              offer=None):
        """The entry for a miss: the configs pruned as Triton prunes them,
        tuned by the miss path (autotune.runtime.tuning), and what Triton's
        autotuner leaves on the object after a tuning."""
        if grid is None:
            raise AutotuneError(f"{self.name}: miss for {key.describe()} in "
                                "lookup_config(); call the kernel to tune it")
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = None
            if self.space is None:
                # Pruned once per call: the lookup's offer, when it has it.
                configs = offer.pruned if offer is not None else \
                    self._convert(self.prune_configs(kwargs))
                # The first offered config, an untuned launch's: always
                # measured, so the entry records what tuning bought.
                default = configs[0]
                if only is not None:  # an update of configs added to it
                    configs = [c for c in configs if c in only]
            else:
                default = self.space.configs()[0]
            miss = self._miss(sess, key, named, grid, args, kwargs, configs,
                              default)
            entry = work_module.with_work(miss.run(seeds), named, self,
                                          sess.backend)
            if miss.result is not None:
                self._after_tuning(named, miss.result, entry)
            return entry
        finally:
            self.nargs = None

    def _miss(self, sess, key, named, grid, args, kwargs, configs=None,
              default=None):
        """The miss path of one call (autotune.runtime.tuning.Tuning)."""
        launch = tuning.Launch(
            lambda config, after_kernel=None: self._launch_candidate(
                config, grid, args, kwargs, named, after_kernel),
            named, make_setup=lambda: self._tuning_setup(named),
            time_fn=self._timing().time_fn(sess.backend), kernel=self,
            grid=grid,
            args=args, kwargs=kwargs)
        options = tuning.TuningOptions(
            self.name, configs, space=self.space, search=self.search,
            budget=self.budget, seed=self.seed,
            time_budget_s=self.time_budget_s, timeout_s=self.timeout_s,
            reference=self.reference, outputs=self.outputs, rtol=self.rtol,
            atol=self.atol, warn_once=self._warn_once, default=default,
            timing_method=self._timing().method(sess.backend))
        return tuning.Tuning(sess, key, launch, options)

    def _after_tuning(self, named, result, entry):
        """What Triton's autotuner does and leaves after a tuning."""
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
        # Without the wait for another process's device lock.
        self.bench_time = entry.provenance.tuning_seconds


def autotune(configs=None, key=(), prune_configs_by=None, reset_to_zero=None,
             restore_value=None, pre_hook=None, post_hook=None, warmup=None,
             rep=None, use_cuda_graph=False, do_bench=None,
             cache_results=False, **options):
    """Decorator form, triton.autotune's arguments in triton's order:
    @autotune(configs=[...], key=[...]) over @triton.jit (or over
    @triton.heuristics). options: this project's keywords (reference=,
    outputs=, rtol=, atol=, name=, space=, search=, budget=, seed=,
    timeout_s=, time_budget_s=, work_model=)."""
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
