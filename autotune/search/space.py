"""Search spaces: parameters with value lists, plus constraints.

    Space({"BLOCK_M": [32, 64, 128], "BLOCK_N": [32, 64, 128]},
          constraints=["BLOCK_M * BLOCK_N <= 8192"],
          num_warps=[4, 8], num_stages=[2, 3])

A constraint is a Python expression over the parameter names (num_warps
and num_stages included) or a callable taking a dict of them.
"""
import ast
import itertools

from autotune.errors import SpaceError
from autotune.records import Config, same_value




_CONSTRAINT_FUNCTIONS = {"min": min, "max": max, "abs": abs}


class Space:
    def __init__(self, params, constraints=(), num_warps=(4,),
                 num_stages=(2,)):
        if not params and len(num_warps) * len(num_stages) <= 1:
            raise SpaceError("nothing to search: no parameters, and at most "
                             "one num_warps and num_stages")
        self.params = {name: list(values) for name, values in params.items()}
        for name, values in self.params.items():
            if not values:
                raise SpaceError(f"parameter {name} has no values")
        self.launch = {"num_warps": list(num_warps),
                       "num_stages": list(num_stages)}
        self.constraints = [self._compile(c, self._names())
                            for c in constraints]
        self._configs = None

    def _names(self):
        return set(self.params) | set(self.launch)

    @property
    def param_names(self):
        return list(self.params)

    @property
    def dimensions(self):
        """(name, values) of every dimension, launch options included."""
        return list(self.params.items()) + list(self.launch.items())

    @staticmethod
    def _compile(constraint, names):
        if callable(constraint):
            return constraint, getattr(constraint, "__name__", repr(constraint))
        try:
            code = compile(constraint, "<constraint>", "eval")
        except SyntaxError as e:
            raise SpaceError(f"constraint {constraint!r} is not a Python "
                             f"expression: {e.msg}")
        # A name that is not a parameter would only fail when the space is
        # first enumerated (a run that only hits the cache never does).
        nodes = [node for node in ast.walk(ast.parse(constraint, mode="eval"))
                 if isinstance(node, ast.Name)]
        # Names the expression binds itself (a generator's or a walrus's
        # target) are not the space's.
        bound = {n.id for n in nodes if isinstance(n.ctx, ast.Store)}
        used = {n.id for n in nodes if isinstance(n.ctx, ast.Load)}
        unknown = sorted(used - bound - names - set(_CONSTRAINT_FUNCTIONS))
        if unknown:
            raise SpaceError(
                f"constraint {constraint!r} names {', '.join(unknown)}, not "
                f"parameters of the space ({', '.join(sorted(names))})")
        return (lambda values: eval(code, {
            "__builtins__": _CONSTRAINT_FUNCTIONS}, values)), constraint

    def allows(self, values):
        for check, text in self.constraints:
            try:
                if not check(dict(values)):
                    return False
            except Exception as e:
                raise SpaceError(f"constraint {text!r} raised "
                                 f"{type(e).__name__}: {e} for {values}")
        return True

    def offers(self, config):
        """Whether `config` is a point of this space (its parameters, its
        values, its constraints)."""
        if set(config.kwargs) != set(self.params):
            return False
        values = {**config.kwargs, "num_warps": config.num_warps,
                  "num_stages": config.num_stages}
        return all(any(same_value(values[name], c) for c in choices)
                   for name, choices in self.dimensions) and \
            self.allows(values) and config == self.config_of(values)

    def config_of(self, values):
        kwargs = {k: values[k] for k in self.params}
        return Config(kwargs, values.get("num_warps", 4),
                      values.get("num_stages", 2))

    def configs(self):
        """Every config that satisfies the constraints, in a fixed order."""
        if self._configs is None:
            names = [n for n, _ in self.dimensions]
            out = []
            for combo in itertools.product(*(v for _, v in self.dimensions)):
                values = dict(zip(names, combo))
                if self.allows(values):
                    out.append(self.config_of(values))
            if not out:
                raise SpaceError("the search space is empty after applying "
                                 f"{len(self.constraints)} constraint(s)")
            self._configs = out
        return self._configs

    def __len__(self):
        return len(self.configs())
