"""The timing a decoration's Triton arguments ask for (`do_bench=`,
`warmup=`/`rep=`, `use_cuda_graph=`), and how it is named in an entry's
provenance (Provenance.method: entries measured differently are not
compared). On the interpreter none applies: its wall clock ignores them."""
import copy
from typing import Callable, NamedTuple, Optional

from autotune.measure import backends
from autotune.records import DEFAULT_RULE


class TimingRequest(NamedTuple):
    num_warmups: Optional[int] = None
    num_reps: Optional[int] = None
    use_cuda_graph: bool = False
    do_bench: Optional[Callable] = None

    def time_fn(self, backend):
        """time_fn(run, setup=None) -> Timing for the evaluator on a GPU;
        None: the backend's own timing."""
        if backend.name != "gpu":
            return None
        bench = self.do_bench
        if self.use_cuda_graph:
            # Only a decoration that asks for CUDA graphs needs it: the
            # interpreter runs never import triton.testing.
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

    def method(self, backend):
        """How the candidates are measured, in words: the timing time_fn
        chooses and the selection rule's margins."""
        rule = " ".join(f"{name}={value}" for name, value in
                        DEFAULT_RULE._asdict().items())
        if backend.name != "gpu":
            how = backend.describe_timing()
        elif self.use_cuda_graph:
            how = "gpu do_bench_cudagraph"
        elif self.do_bench is not None:
            how = "gpu do_bench given to the decorator"
        elif self.num_warmups is not None or self.num_reps is not None:
            how = backend.describe_timing(self.num_warmups, self.num_reps)
        else:
            how = backend.describe_timing()
        return f"{how}; rule {rule}"
