"""What a miss costs in benchmark time, and how well it picks: this
project's selection against Triton's own autotuner, on a fake timing
backend.

    python3 bench/bench_tuning_cost.py [--draws 200] [--configs 8,20,50]
        [--noise 1,2,5] [--profiles near-tie,clear-winner]

The timing model (the same for both tuners): each config has a true time;
a do_bench(fn, warmup, rep) call returns quantiles around a median drawn as
true time x exp(noise x sqrt(100 / rep) x Z), Z standard normal: the noise
named in a row is that of Triton's default call (rep 100 ms), and a shorter
call is noisier as a median of fewer repetitions is (a GPU's call-to-call
noise is partly clock state that more repetitions do not remove, which
makes short calls relatively better than this model says). The quantiles'
spread around that median is the noise, whatever the call's length. A
call's requested time is its warmup + rep (Triton's defaults: 25 + 100 ms).

Common random numbers: each config has its own stream of Z per draw, used
by both tuners in the order they time that config (the first timing of a
config sees the same Z for both). Each draw assigns the profile's times to
the configs in a shuffled order (so the smaller of two near-tied configs
is the faster one about half of the time) and runs two fresh tunes of each
tuner on independent streams: "agree" is the share of draws where the two
picked the same config.

Profiles (times relative to the fastest): near-tie 1, 1.02, 1.04, 1.06,
then the rest spread geometrically over 1.10-2.0; clear-winner 1, then
1.10-2.0. The weak-spot rows: the smallest config is 8 % slower than the
fastest, a larger one (the rest 1.3-2.0); the share of tunes that pick
the fastest.

Triton: triton.runtime.autotuner.Autotuner (through triton.autotune with
do_bench= the fake), driven through its own run(); JITFunction.run is
stubbed to record the config it was asked to launch. This project:
tuner.run_candidates with a CandidateEvaluator on the gpu backend whose
do_bench is the fake, which is what a miss on a GPU calls.
"""
import argparse
import math
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
# Triton's kernel is a JITFunction (the launch stubbed at JITFunction.run),
# not the interpreter's stand-in that `import autotune` asks for without a
# GPU; no kernel of this project runs here.
os.environ["TRITON_INTERPRET"] = "0"

TRITON_REQUEST_MS = 25.0 + 100.0


def profile_times(profile, n):
    """True times (relative to the fastest) of `n` configs, fastest first."""
    if profile == "near-tie":
        head = [1.0, 1.02, 1.04, 1.06][:n]
        lo = 1.10
    elif profile == "clear-winner":
        head = [1.0]
        lo = 1.10
    elif profile == "smaller-8%-slower":
        head = [1.0, 1.08]
        lo = 1.3
    else:
        raise ValueError(profile)
    rest = n - len(head)
    tail = [lo * (2.0 / lo) ** (i / max(rest - 1, 1)) for i in range(rest)]
    return head + tail


def make_configs(n):
    """`n` distinct configs of this project, in no particular order."""
    # After TRITON_INTERPRET is set above (autotune reads it at import).
    from autotune.records import Config
    out = []
    for bm in (16, 32, 64, 128, 256):
        for bn in (16, 32, 64, 128, 256):
            for warps in (2, 4, 8):
                out.append(Config({"BLOCK_M": bm, "BLOCK_N": bn},
                                  num_warps=warps, num_stages=3))
    return out[:n]


class FakeBench:
    """The fake do_bench: knows which config the last launch was for (the
    launch stub sets `current`), and draws its median from that config's
    stream of Z."""

    def __init__(self, true_us, noise, seed):
        self.true_us = true_us
        self.noise = noise
        self.seed = seed
        self.streams = {}
        self.current = None
        self.requested_ms = 0.0
        self.calls = 0

    def _z(self, config):
        rng = self.streams.get(config)
        if rng is None:
            rng = self.streams[config] = random.Random(
                f"{self.seed}/{config}")
        return rng.gauss(0.0, 1.0)

    def __call__(self, fn, warmup=25, rep=100, grad_to_none=None,
                 quantiles=None, return_mode="mean"):
        fn()
        config = self.current
        self.requested_ms += warmup + rep
        self.calls += 1
        sigma = self.noise * math.sqrt(100.0 / rep)
        median_ms = self.true_us[config] / 1e3 * math.exp(
            sigma * self._z(config))
        if quantiles is None:
            return median_ms
        normal = statistics.NormalDist()
        return [median_ms * math.exp(self.noise * normal.inv_cdf(q))
                for q in quantiles]


def config_key(config):
    """A config's identity shared by both tuners' config types."""
    return (tuple(sorted(config.kwargs.items())), config.num_warps,
            config.num_stages)


# -- Triton's autotuner ------------------------------------------------------

class TritonSide:
    def __init__(self, configs):
        import triton
        import triton.language as tl
        from triton.runtime.jit import JITFunction

        @triton.jit
        def kernel(y, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            pass
        self.jit = kernel
        self.JITFunction = JITFunction
        self.triton = triton
        self.configs = [triton.Config(dict(c.kwargs), num_warps=c.num_warps,
                                      num_stages=c.num_stages)
                        for c in configs]
        self.ours = dict(zip(map(config_key, self.configs), configs))

    def tune(self, bench):
        def stub_run(jit_self, *args, **kwargs):
            key = (tuple(sorted((k, kwargs[k]) for k in ("BLOCK_M",
                                                          "BLOCK_N"))),
                   kwargs["num_warps"], kwargs["num_stages"])
            bench.current = self.ours[key]

        tuned = self.triton.autotune(configs=self.configs, key=["n"],
                                     do_bench=bench)(self.jit)
        saved = self.JITFunction.run
        self.JITFunction.run = stub_run
        try:
            tuned.run(None, 1024, grid=(1,))
        finally:
            self.JITFunction.run = saved
        return self.ours[config_key(tuned.best_config)]


# -- this project's tuner ----------------------------------------------------

class OurSide:
    def __init__(self, contest=None):
        # torch and triton: heavy, loaded once the run starts.
        import torch
        from autotune.measure import selection, tuner
        from autotune.measure.fake_backend import gpu_backend_without_a_gpu
        self.torch = torch
        self.tuner = tuner
        self.contest = selection.DEFAULT_CONTEST._replace(**(contest or {}))
        self.gpu_backend = gpu_backend_without_a_gpu
        self.y = torch.zeros(4)

    def tune(self, bench, configs):
        import triton.testing
        y = self.y

        def launch(config):
            bench.current = config
            y.fill_(1.0)
        saved = triton.testing.do_bench
        triton.testing.do_bench = bench
        try:
            evaluator = self.tuner.CandidateEvaluator(
                self.gpu_backend(), launch, {"y": y})
            result = self.tuner.run_candidates(evaluator, configs,
                                               contest_rule=self.contest)
        finally:
            triton.testing.do_bench = saved
        return result.best.config


# -- the table ---------------------------------------------------------------

class Row:
    def __init__(self):
        self.requested_ms = []
        self.regrets = []
        self.agree = []

    def add(self, picks, true_us, fastest, requested):
        self.requested_ms += requested
        self.regrets += [true_us[p] / true_us[fastest] for p in picks]
        self.agree.append(picks[0] == picks[1])

    def cost(self):
        return statistics.fmean(self.requested_ms)

    def picked(self):
        return sum(r <= 1.0 for r in self.regrets) / len(self.regrets)

    def regret(self):
        return statistics.fmean(self.regrets)

    def p95(self):
        return sorted(self.regrets)[int(0.95 * (len(self.regrets) - 1))]

    def agreement(self):
        return sum(self.agree) / len(self.agree)


def run_row(profile, n, noise, draws, triton_side, ours, configs, sizes,
            seed=0):
    rows = {"triton": Row(), "ours": Row()}
    relative = profile_times(profile, n)
    for draw in range(draws):
        if seed:
            draw = f"{seed}:{draw}"
        rng = random.Random(f"{profile}/{n}/{noise}/{draw}")
        if profile == "smaller-8%-slower":
            # The smallest config 8 % slower; the fastest a larger one.
            by_size = sorted(configs, key=sizes.get)
            rest = by_size[1:]
            rng.shuffle(rest)
            order = [rest[0], by_size[0]] + rest[1:]
        else:
            order = list(configs)
            rng.shuffle(order)
        true_us = {c: 100.0 * t for c, t in zip(order, relative)}
        fastest = order[0]
        for name in rows:
            picks, requested = [], []
            for tune in range(2):
                bench = FakeBench(true_us, noise / 100.0,
                                  f"{profile}/{n}/{noise}/{draw}/{tune}")
                if name == "triton":
                    picks.append(triton_side.tune(bench))
                else:
                    picks.append(ours.tune(bench, configs))
                requested.append(bench.requested_ms)
            rows[name].add(picks, true_us, fastest, requested)
    return rows


def regret_test(ours, triton):
    """'p=... ours ahead/behind' (two-sided Mann-Whitney U on regrets)."""
    # bench_search loads the search tables: only for this test.
    from bench_search import mann_whitney
    p, sign = mann_whitney(ours.regrets, triton.regrets)
    if sign == 0 or p >= 0.05:
        return f"p={p:.2g} (n.s.)"
    return f"p={p:.2g} ours {'ahead' if sign < 0 else 'behind'}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--configs", default="8,20,50")
    parser.add_argument("--noise", default="1,2,5",
                        help="per cent noise of a default do_bench call")
    parser.add_argument("--profiles", default="near-tie,clear-winner")
    parser.add_argument("--no_weak_spot", action="store_true")
    parser.add_argument("--seed", type=int, default=0,
                        help="another set of draws (0: the documented one)")
    parser.add_argument("--contest", default="",
                        help="NAME=VALUE,... fields of selection.ContestRule to "
                        "try instead of the defaults")
    args = parser.parse_args(argv)
    contest = {k: float(v) for k, v in (
        item.split("=") for item in args.contest.split(",") if item)}
    counts = [int(x) for x in args.configs.split(",")]
    noises = [float(x) for x in args.noise.split(",")]
    started = time.time()
    print(f"{args.draws} draws a row, two fresh tunes a draw; cost: mean "
          "requested benchmark ms per fusion (warmup + rep of every "
          "do_bench call); picked: share of tunes that picked the fastest; "
          "regret: picked / fastest true time, mean and p95; agree: share "
          "of draws whose two tunes picked the same config")
    print("regret U: two-sided Mann-Whitney U of the two tuners' regrets "
          "(bench_search.mann_whitney), p and which is ahead")
    head = (f"{'profile':<13} {'n':>3} {'noise':>5} | {'cost ms':>15} "
            f"{'ratio':>5} | {'picked':>11} | {'mean regret':>13} | "
            f"{'p95 regret':>13} | {'agree':>11} | regret U")
    print(head)
    print(f"{'':<23} | {'Triton   ours':>15} {'':>5} | {'Triton ours':>11} "
          f"| {'Triton  ours':>13} | {'Triton  ours':>13} | "
          f"{'Triton ours':>11} |")
    results = []
    for profile in args.profiles.split(","):
        for n in counts:
            configs = make_configs(n)
            sizes = {c: i for i, c in enumerate(
                sorted(configs, key=lambda c: c.sort_key))}
            triton_side = TritonSide(configs)
            ours = OurSide(contest)
            for noise in noises:
                rows = run_row(profile, n, noise, args.draws, triton_side,
                               ours, configs, sizes, args.seed)
                t, o = rows["triton"], rows["ours"]
                results.append((profile, n, noise, t, o))
                print(f"{profile:<13} {n:>3} {noise:>4g}% | "
                      f"{t.cost():7.0f} {o.cost():7.0f} "
                      f"{o.cost() / t.cost():5.2f} | "
                      f"{100 * t.picked():5.1f} {100 * o.picked():5.1f} | "
                      f"{t.regret():6.4f} {o.regret():6.4f} | "
                      f"{t.p95():6.4f} {o.p95():6.4f} | "
                      f"{100 * t.agreement():5.1f} {100 * o.agreement():5.1f}"
                      f" | {regret_test(o, t)}", flush=True)
    if not args.no_weak_spot:
        print("\nthe smallest config 8 % slower than the fastest (8 configs, "
              "the rest 1.3-2.0x): share of tunes that pick the fastest")
        configs = make_configs(8)
        sizes = {c: i for i, c in enumerate(
            sorted(configs, key=lambda c: c.sort_key))}
        triton_side = TritonSide(configs)
        ours = OurSide(contest)
        for noise in noises:
            rows = run_row("smaller-8%-slower", 8, noise, args.draws,
                           triton_side, ours, configs, sizes, args.seed)
            t, o = rows["triton"], rows["ours"]
            print(f"  noise {noise:g}%: Triton {100 * t.picked():5.1f}%, "
                  f"ours {100 * o.picked():5.1f}% (cost {t.cost():.0f} / "
                  f"{o.cost():.0f} ms)", flush=True)
    failures = []
    for profile, n, noise, t, o in results:
        bound = 1.0 if n <= 8 else 0.5
        where = f"{profile} n={n} noise={noise:g}%"
        if o.cost() > bound * t.cost():
            failures.append(f"{where}: cost ratio "
                            f"{o.cost() / t.cost():.2f} > {bound}")
        if o.picked() < t.picked():
            failures.append(f"{where}: picked {o.picked():.3f} < "
                            f"{t.picked():.3f}")
        if o.regret() > t.regret():
            failures.append(f"{where}: regret {o.regret():.4f} > "
                            f"{t.regret():.4f}")
        if o.agreement() < t.agreement():
            failures.append(f"{where}: agree {o.agreement():.3f} < "
                            f"{t.agreement():.3f}")
    print(f"\ngoals missed: {len(failures)}" + "".join(
        f"\n  {f}" for f in failures))
    print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
