"""Runs every kernel module of a directory (run() and expected(), see
tests/dropin_kernels) and checks the results.

    dropin_driver.py tune|cached MODULE_DIR OUT_DIR

tune: results must match expected(); they are saved to OUT_DIR.
cached: results must also equal, bit for bit, those the tune run saved.
Does not import autotune itself: on the zero-edit path only the
sitecustomize on PYTHONPATH does.
"""
import importlib
import os
import sys

import torch

NAMES = ["matmul", "layernorm_bwd", "inplace", "prehook", "heuristics_both",
         "autograd_fn", "odd_inputs"]


def kernel_device():
    """Where the kernels' tensors live: the GPU unless Triton runs on its
    interpreter (the driver does not import autotune to ask it)."""
    interpreted = os.environ.get("TRITON_INTERPRET", "0").lower() in (
        "1", "true", "on", "yes")
    return "cuda" if not interpreted and torch.cuda.is_available() else "cpu"


# Outputs of an fp32 tl.dot, with their K: on a GPU of sm_80 or later
# Triton's default input precision is tf32 (a 10-bit mantissa), so they
# are compared with torch's IEEE result at tf32's tolerance, not fp32's.
DOT_OUTPUTS = {("matmul", "c"): 40}


def tolerance(name, key, capability=None):
    """(rtol, atol) for output `key` of module `name`. tf32 rounds each
    input to 2^-11 relative, so each product errs by about 2^-10; K
    products of unit-variance values with random signs add up to about
    sqrt(K) * 2^-10 (6e-3 at K=40), four times that bounds the largest of
    a few thousand outputs."""
    if capability is None and kernel_device() == "cuda":
        capability = torch.cuda.get_device_capability()
    k = DOT_OUTPUTS.get((name, key))
    if k is not None and capability is not None and capability >= (8, 0):
        return 1e-2, 4 * k ** 0.5 * 2.0 ** -10
    return 1e-4, 1e-4


def main(mode, module_dir, out_dir):
    sys.path.insert(0, module_dir)
    # The modules create their tensors on the default device.
    torch.set_default_device(kernel_device())
    failures = []
    for name in NAMES:
        module = importlib.import_module(name)
        got = module.run()
        want = module.expected()
        for key, value in want.items():
            rtol, atol = tolerance(name, key)
            if not torch.allclose(got[key], value, rtol=rtol, atol=atol):
                failures.append(f"{name}.{key}: max error "
                                f"{(got[key] - value).abs().max().item():.3g}")
        saved = os.path.join(out_dir, f"{name}.pt")
        if mode == "tune":
            torch.save(got, saved)
        else:
            tuned = torch.load(saved, map_location=kernel_device())
            for key, value in tuned.items():
                if not torch.equal(got[key], value):
                    failures.append(f"{name}.{key}: cached run differs from "
                                    "the tuning run")
        print(f"ran {name}", flush=True)
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    print("all results correct", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
