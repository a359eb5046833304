"""Recorded timing tables as the objective: strategies compared offline.

Reads Kernel Tuner cache files (JSON, optionally gzipped: `tune_params`,
`cache` mapping "v1,v2,..." to a record whose `time` is milliseconds or a
failure string) and T1 space files (constraints under
ConfigurationSpace.Conditions).
"""
import collections
import gzip
import json
import math
import os
import random

from autotune.errors import TableError, TableMiss
from autotune.records import Config
from autotune.search.space import Space, SpaceError

FAILURE_STRINGS = {"RuntimeFailedConfig": "RUNTIME_ERROR",
                   "CompilationFailedConfig": "COMPILE_ERROR",
                   "InvalidConfig": "COMPILE_ERROR"}






def _read_json(path):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            return json.load(f)
    except FileNotFoundError:
        raise TableError(f"{path}: no such file")
    except (OSError, ValueError, EOFError) as e:
        raise TableError(f"{path}: not a JSON timing table ({e})")


def load_t1_constraints(path):
    data = _read_json(path)
    try:
        conditions = data["ConfigurationSpace"]["Conditions"]
        return [c["Expression"] for c in conditions]
    except (KeyError, TypeError):
        raise TableError(f"{path}: no ConfigurationSpace.Conditions")


class TimingTable:
    """config -> measured time (ms) or failure kind, for one device."""

    def __init__(self, path, constraints=()):
        data = _read_json(path)
        try:
            self.params = {k: list(v) for k, v in data["tune_params"].items()}
            self.keys = list(data.get("tune_params_keys") or self.params)
            cache = data["cache"]
        except (KeyError, TypeError, AttributeError):
            raise TableError(f"{path}: not a Kernel Tuner cache file "
                             "(needs tune_params and cache)")
        self.path = path
        self.device = data.get("device_name") or os.path.basename(path)
        self.times = {}
        for key, record in cache.items():
            values = tuple(_number(v) for v in key.split(","))
            t = record.get("time") if isinstance(record, dict) else None
            if isinstance(t, (int, float)):
                self.times[values] = float(t)
            else:
                self.times[values] = FAILURE_STRINGS.get(str(t),
                                                         "RUNTIME_ERROR")
        # Launch options are not part of these spaces: one fixed value.
        self.space = Space(self.params, constraints=constraints,
                           num_warps=(4,), num_stages=(2,))
        self._valid = None
        self._measured = None

    def key_of(self, config):
        return tuple(config.kwargs[k] for k in self.keys)

    def __call__(self, config):
        """Time in ms, or a failure kind string."""
        try:
            return self.times[self.key_of(config)]
        except KeyError:
            raise TableMiss(
                f"{self.path}: no measurement for {self.describe(config)} "
                "(a table recorded under constraints needs them: "
                "--constraints T1.json; an incomplete table: "
                "--missing_as_failed)") from None

    def describe(self, config):
        """The config as the table's parameters (no launch options)."""
        return " ".join(f"{k}={config.kwargs[k]}" for k in self.keys)

    def optimum(self):
        """The fastest measured config of the space (the constraints
        applied: an extra constraint can exclude the table's fastest)."""
        return min(self._time_of(k) for k in self._measured_keys())

    def config_of(self, values):
        return Config(dict(zip(self.keys, values)), 4, 2)

    def _time_of(self, key):
        """Its time; failed and missing configs are infinitely slow."""
        t = self.times.get(key)
        return t if isinstance(t, float) else math.inf

    def _measured_keys(self):
        """Keys of the space with a measured time, in a fixed order."""
        if self._measured is None:
            self._measured = [k for k in sorted(self._valid_keys(), key=repr)
                              if isinstance(self.times.get(k), float)]
        if not self._measured:
            raise TableError(f"{self.path}: no config of the space has a "
                             "measured time")
        return self._measured

    def _valid_keys(self):
        if self._valid is None:
            self._valid = {self.key_of(c) for c in self.space.configs()}
        return self._valid

    def _neighbour_keys(self, key):
        """Keys of the space one parameter away from `key` (any value)."""
        valid = self._valid_keys()
        for i, name in enumerate(self.keys):
            for value in self.params[name]:
                other = key[:i] + (value,) + key[i + 1:]
                if other != key and other in valid:
                    yield other

    def faster_neighbour(self, config):
        """A config of the space one parameter away from `config` that the
        table says is faster, or None: None means a local optimum."""
        key = self.key_of(config)
        own = self.times.get(key)
        if not isinstance(own, float):
            return None
        for other in self._neighbour_keys(key):
            t = self.times.get(other)
            if isinstance(t, float) and t < own:
                return self.config_of(other)
        return None

    def hill_climb(self, budget, seed):
        """A reference for how often a search can end at a local optimum
        within `budget` evaluations: first-improvement hill climbing from
        one random config, every evaluation spent climbing (neighbours in
        random order; a faster one is moved to at once). Returns the key it
        ends at and whether that is a local optimum it has verified (every
        neighbour measured)."""
        rng = random.Random(seed)
        time_of = self._time_of
        current = rng.choice(self._measured_keys())
        seen = {current}
        while len(seen) < budget:
            untried = [k for k in self._neighbour_keys(current)
                       if k not in seen]
            if not untried:
                return current, True
            rng.shuffle(untried)
            for key in untried[:budget - len(seen)]:
                seen.add(key)
                if time_of(key) < time_of(current):
                    current = key
                    break
        return current, all(k in seen for k in self._neighbour_keys(current))

    def landscape(self):
        """How hard the table is for a search that climbs one parameter at
        a time: its local optima, and where a steepest descent from each
        config of the space ends. Failed and missing configs are never a
        destination."""
        time_of = self._time_of
        start = self._measured_keys()
        ends = {}
        for key in start:
            path = []
            while key not in ends:
                path.append(key)
                nxt = min(self._neighbour_keys(key), key=time_of,
                          default=key)
                if time_of(nxt) >= time_of(key):
                    ends[key] = key
                    break
                key = nxt
            for k in path:
                ends[k] = ends[key]
        optimum = self.optimum()
        basins = collections.Counter(ends[k] for k in start)
        optima = sorted((time_of(k) / optimum, basins[k]) for k in basins)
        return Landscape(len(self._valid_keys()), len(start), optima,
                         [time_of(k) / optimum for k in start])

    def ranked(self):
        """Measured configs, fastest first."""
        good = [(t, k) for k, t in self.times.items() if isinstance(t, float)]
        return [self.config_of(k) for t, k in sorted(good)]


class Landscape:
    """What TimingTable.landscape() finds. optima: (time / optimum, how
    many configs' steepest descent ends there), fastest first."""

    def __init__(self, size, measured, optima, ratios):
        self.size = size
        self.measured = measured
        self.optima = optima
        self.ratios = ratios

    def optimum_basin(self):
        """Share of the measured configs whose descent ends at the optimum."""
        return self.optima[0][1] / self.measured

    def within(self, factor):
        return sum(r <= factor for r in self.ratios)

    def summary(self):
        shown = ", ".join(f"{r:.3f}x ({100.0 * n / self.measured:.0f}%)"
                          for r, n in self.optima[:5])
        if len(self.optima) > 5:
            shown = f"the 5 fastest: {shown}"
        return (f"{self.size} configs, {self.measured} measured; "
                f"{self.within(1.01)} within 1% of the optimum, "
                f"{self.within(1.05)} within 5%; {len(self.optima)} local "
                f"{'optimum' if len(self.optima) == 1 else 'optima'} (time / "
                f"optimum, share of descents ending there): "
                f"{shown}")


def _number(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def load_benchmark_hub(directory):
    """{gpu: TimingTable} of the convolution tables in `directory`."""
    constraints = load_t1_constraints(os.path.join(directory,
                                                   "convolution_T1.json"))
    tables = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("convolution_") and name.endswith(".json.gz"):
            gpu = name[len("convolution_"):-len(".json.gz")]
            tables[gpu] = TimingTable(os.path.join(directory, name),
                                      constraints)
    if not tables:
        raise TableError(f"{directory}: no convolution_*.json.gz tables")
    return tables


__all__ = ["TimingTable", "TableError", "TableMiss", "Landscape",
           "load_benchmark_hub",
           "load_t1_constraints", "SpaceError"]


def main(argv=None):
    """Runs the search on a recorded table: a quick way to try a budget or
    a seed offline. Errors are one line, exit code 2."""
    import argparse
    import sys

    from autotune.search import evolutionary
    parser = argparse.ArgumentParser(
        prog="python -m autotune.search.simulate",
        description="Search a recorded timing table (Kernel Tuner cache "
                    "format) as if it were the GPU.")
    parser.add_argument("table")
    parser.add_argument("--constraints", help="T1 file with the space's "
                        "constraints (ConfigurationSpace.Conditions)")
    parser.add_argument("--constraint", action="append", default=[],
                        help="extra constraint, a Python expression")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--missing_as_failed", action="store_true",
                        help="a config the table does not hold counts as a "
                        "failed measurement (incomplete tables) instead of "
                        "stopping with an error")
    parser.add_argument("--landscape", action="store_true",
                        help="describe the table instead of searching it: "
                        "configs near the optimum, local optima, and where "
                        "a steepest descent from every config ends")
    args = parser.parse_args(argv)
    missing = []
    try:
        constraints = list(args.constraint)
        if args.constraints:
            constraints = load_t1_constraints(args.constraints) + constraints
        table = TimingTable(args.table, constraints)
        if args.landscape:
            print(f"{args.table}: {table.landscape().summary()}")
            return 0

        def measure(config):
            try:
                t = table(config)
            except TableMiss:
                if not args.missing_as_failed:
                    raise
                missing.append(config)
                return evolutionary.Measurement(
                    config, None, "RUNTIME_ERROR", "not in the table")
            if isinstance(t, float):
                return evolutionary.Measurement(config, t)
            return evolutionary.Measurement(config, None, t)
        search = evolutionary.EvolutionarySearch(table.space,
                                                 budget=args.budget,
                                                 seed=args.seed)
        result = search.run(measure)
    except (TableError, SpaceError, evolutionary.SearchError) as e:
        print(f"simulate: error: {e}", file=sys.stderr)
        return 2
    if args.missing_as_failed:
        absent = sum(1 for c in table.space.configs()
                     if table.key_of(c) not in table.times)
        print(f"missing from the table: {len(missing)} of the "
              f"{len(result.measurements)} configs measured (counted as "
              f"failed); {absent} of the space's {len(table.space)}")
    if result.best is None:
        print(f"simulate: no config ran in {len(result.measurements)} "
              "evaluations", file=sys.stderr)
        return 1
    print(f"best after {len(result.measurements)} evaluations: "
          f"{table.describe(result.best.config)} {result.best.time:.4f} ms "
          f"({result.best.time / table.optimum():.4f} x the table's "
          "optimum)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
