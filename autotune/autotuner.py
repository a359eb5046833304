"""The decorator that tests use: stands where triton.autotune stands.

    @autotune.autotune(configs=[autotune.Config({"BLOCK": 64}, num_warps=4)],
                       key=["n_cols"])
    @triton.jit
    def kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr): ...

    kernel[grid](x, y, n_cols)

A call computes its fusion key from the key arguments, tensor dtypes and
the untuned constexprs, asks the session (autotune.runtime) for the entry,
and launches with its config; the session tunes through this object on a
miss.
"""
import itertools

from autotune import cache_key, tuner
from autotune.records import Entry
from autotune.runtime import AutotuneError, session
from autotune.search import parallel, reuse


def _constexpr_args(fn):
    """Names of the kernel's tl.constexpr parameters."""
    import inspect
    out = set()
    for name, param in inspect.signature(fn).parameters.items():
        ann = param.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", "")
        if "constexpr" in str(text):
            out.add(name)
    return out


_DTYPE = itertools.repeat("dtype")
_NO_DTYPE = itertools.repeat(None)


class Autotuner:
    """Stands where triton.autotune stands: kernel[grid](*args, **kwargs)."""

    def __init__(self, kernel, configs=None, key=(), reference=None,
                 restore_value=None, outputs=None, rtol=None, atol=None,
                 name=None, space=None, search="exhaustive", budget=None,
                 seed=0, timeout_s=60.0):
        self.kernel = kernel
        fn = cache_key.python_function(kernel)
        self.name = name or fn.__name__
        self.arg_names = list(getattr(kernel, "arg_names", None)
                              or fn.__code__.co_varnames[:fn.__code__.co_argcount])
        self.key = list(key)
        for k in self.key:
            if k not in self.arg_names:
                raise AutotuneError(f"{self.name}: key argument {k!r} is not "
                                    f"an argument of the kernel")
        self.space = space
        self.configs = list(configs) if configs else []
        if not self.configs and space is None:
            raise AutotuneError(f"{self.name}: give configs or a space")
        tuned = set()
        for config in self.configs or []:
            tuned |= set(config.kwargs)
        if space is not None:
            tuned |= set(space.param_names)
        self.tuned_names = tuned
        self.constexpr_names = sorted(_constexpr_args(fn) - tuned
                                      - set(self.key))
        self.reference = reference
        self.restore_value = restore_value
        self.outputs = outputs
        self.rtol, self.atol = rtol, atol
        self.search = search
        self.budget = budget
        self.seed = seed
        self.timeout_s = timeout_s
        self._fingerprint = None
        self._memo = {}
        self._session = None

    @property
    def fingerprint(self):
        if self._fingerprint is None:
            self._fingerprint = cache_key.kernel_fingerprint(self.kernel)
        return self._fingerprint

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
        return (tuple(map(named.__getitem__, self.key)),
                tuple(map(getattr, named.values(), _DTYPE, _NO_DTYPE)),
                tuple(kwargs),
                tuple(map(named.get, self.constexpr_names)))

    def _full_key(self, sess, named):
        key_values = [(k, named[k]) for k in self.key]
        # In the kernel's argument order, however the call passed them.
        order = self.arg_names + sorted(set(named) - set(self.arg_names))
        dtypes = [(k, named[k].dtype) for k in order
                  if hasattr(named.get(k), "dtype")]
        consts = [(k, named[k]) for k in sorted(self.constexpr_names)
                  if k in named]
        signature = cache_key.fusion_signature(key_values, dtypes, consts)
        return cache_key.make_key(sess.device_key, self.name,
                                  self.fingerprint, signature)

    def lookup_config(self, *args, **kwargs):
        """The config a call with these arguments would launch with (tuning
        on a miss)."""
        named = self._bind(args, kwargs)
        return self._resolve(named, grid=None, args=args, kwargs=kwargs)

    def _resolve(self, named, grid, args, kwargs):
        sess = session()
        if sess is not self._session:
            self._memo.clear()
            self._session = sess
        fast = self.fusion_key(named, kwargs)
        config = self._memo.get(fast)
        if config is not None:
            return config
        key = self._full_key(sess, named)
        entry = sess.resolve(
            key, lambda seeds: self._tune(sess, key, named, grid, args,
                                          kwargs, seeds),
            lambda: self._neighbours(sess, key))
        self._memo[fast] = entry.best
        return entry.best

    def run(self, *args, grid, **kwargs):
        named = self._bind(args, kwargs)
        config = self._resolve(named, grid, args, kwargs)
        return self._launch(config, grid, args, kwargs, named)

    def _launch(self, config, grid, args, kwargs, named):
        if callable(grid):
            meta = dict(named)
            meta.update(config.all_kwargs())
            grid = grid(meta)
        return self.kernel[grid](*args, **kwargs, **config.all_kwargs())

    def _neighbours(self, sess, key):
        return reuse.neighbours(sess.cache, key)

    def _tune(self, sess, key, named, grid, args, kwargs, seeds):
        if grid is None:
            raise AutotuneError(f"{self.name}: miss for {key.describe()} in "
                                "lookup_config(); call the kernel to tune it")
        tensors = {k: v for k, v in named.items() if hasattr(v, "copy_")}
        reference = None
        if self.reference is not None:
            def reference(**_tensors):
                return self.reference(**named)  # may return (rtol, atol)
        checker = None
        if sess.options.autotune_compile_check:
            from autotune import compile_check
            checker = compile_check.Checker(
                sess.options.autotune_compile_check, self.kernel, named)
        evaluator = tuner.CandidateEvaluator(
            sess.backend,
            lambda config: self._launch(config, grid, args, kwargs, named),
            tensors, outputs=self.outputs, reference=reference,
            rtol=self.rtol, atol=self.atol, timeout_s=self.timeout_s,
            restore=self.restore_value, on_benchmark=sess.count_benchmark,
            name=self.name, compile_checker=checker,
            on_compile_rejected=sess.count_compile_rejected)
        # The cached config of this fusion, if any: kept unless beaten.
        incumbent = sess.incumbent_config(key)
        # --autotune_workers: the candidates are measured in worker
        # processes (None: in this process).
        pool = parallel.CandidatePool.for_miss(
            evaluator, sess.options.autotune_workers, sess.backend, self,
            grid, args, kwargs)
        try:
            if self.space is None or self.search == "exhaustive":
                configs = self.configs if self.space is None else \
                    self.space.configs()
                rest = [c for c in configs if c not in seeds]
                if seeds:
                    # seeded: a short search, the neighbours' configs first.
                    rest = rest[:max(1, len(rest) // 2)]
                    if incumbent in configs and incumbent not in seeds \
                            and incumbent not in rest:
                        rest.append(incumbent)
                result = tuner.run_candidates(
                    evaluator if pool is None else pool.replay(evaluator),
                    list(seeds) + rest, "seeded" if seeds else "exhaustive",
                    incumbent=incumbent)
            else:
                from autotune.search import evolutionary
                budget = self.budget
                if seeds and budget:
                    budget = max(len(seeds) + 1, budget // 2)
                first = list(seeds)
                if incumbent is not None and incumbent not in first:
                    first.append(incumbent)
                result = evolutionary.tune_with_search(
                    evaluator, self.space, budget=budget, seed=self.seed,
                    seeds=first, pool=pool)
                result = tuner.reselect(evaluator, result, incumbent)
        finally:
            if pool is not None:
                pool.close()
        return Entry(key, result.best.config, result.best.run_time_us,
                     sorted(result.candidates,
                            key=lambda c: c.config.sort_key),
                     tuner.provenance_for(sess.backend, result))


def autotune(configs=None, key=(), **options):
    """Decorator form: @autotune(configs=[...], key=[...]) over @triton.jit."""
    def wrap(kernel):
        return Autotuner(kernel, configs=configs, key=key, **options)
    return wrap


def tune(kernel, configs, key=(), **options):
    """Plain function form: autotune.tune(kernel, configs, key=[...])."""
    return Autotuner(kernel, configs=configs, key=key, **options)


__all__ = ["Autotuner", "autotune", "tune"]
