"""Reaching through kernel objects. Triton stacks them: an autotuner over
triton.heuristics over a JITFunction (or, under TRITON_INTERPRET=1, an
InterpretedFunction) over the Python function, each holding the next as
`.fn`. Every place that needs one layer of the stack walks it here."""
import inspect

from autotune.errors import AutotuneError


def layers(kernel):
    """The objects from `kernel` down to the JIT function (the last one:
    the object whose .fn is the Python function)."""
    found = [kernel]
    while not inspect.isfunction(getattr(found[-1], "fn", None)):
        inner = getattr(found[-1], "fn", None)
        if inner is None:
            raise AutotuneError(f"{kernel!r} is not a @triton.jit kernel")
        found.append(inner)
    return found


def jit_function(kernel):
    """The JITFunction (or InterpretedFunction) under `kernel`."""
    return layers(kernel)[-1]


def python_function(kernel):
    """The Python function the kernel was written as."""
    if inspect.isfunction(kernel):
        return kernel
    return jit_function(kernel).fn
