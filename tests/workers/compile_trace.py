"""torch.compile's tracing of a triton_op that launches a kernel tuned by
this project, stopped before Inductor generates code (which needs a GPU
driver). Prints one JSON line: the kernel wrappers in the traced graph,
whether the graph's kernel is this project's object, and whether an
autotuning session was started (nothing measured). Run without Triton's interpreter: torch traces only
@triton.jit kernels (an interpreted one it launches as it is)."""
import json
import sys

import torch
import triton
import triton.language as tl
from torch._dynamo.backends.common import aot_autograd
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

import autotune

CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=1),
           triton.Config({"BLOCK": 32}, num_warps=2)]


@triton.jit
def add_one_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)


def main():
    decorate = {"autotune": autotune.autotune,
                "triton": triton.autotune}[sys.argv[1]]
    kernel = decorate(configs=CONFIGS, key=["n"])(add_one_kernel)

    @torch.library.triton_op("compile_trace::add_one", mutates_args=())
    def add_one(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.numel()
        torch.library.wrap_triton(kernel)[
            lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        return y

    graphs = []

    class Traced(Exception):
        pass

    def stop_before_codegen(graph_module, example_inputs):
        graphs.append(graph_module)
        raise Traced()

    compiled = torch.compile(
        lambda x: add_one(x) * 2, fullgraph=True,
        backend=aot_autograd(fw_compiler=stop_before_codegen))
    try:
        compiled(torch.arange(40.0))
    except Exception as e:  # torch wraps Traced in BackendCompilerFailed
        if not graphs:
            raise
        del e
    wrappers = [node for node in graphs[0].graph.nodes
                if "triton_kernel_wrapper" in str(node.target)]
    # Tracing asks nothing of the session: none is started (starting one
    # here would need the GPU this run does not have).
    started = autotune.runtime.session._SESSION is not None
    print(json.dumps({
        "wrappers": [str(node.target) for node in wrappers],
        "same_kernel": [kernel_side_table.get_kernel(
            node.kwargs["kernel_idx"]) is kernel for node in wrappers],
        "session_started": started,
    }))


if __name__ == "__main__":
    main()
