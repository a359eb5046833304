"""rules_autotune runtime: persisted Triton autotuning.

Import this package before defining @triton.jit kernels: with no GPU visible
it selects Triton's interpreter (TRITON_INTERPRET=1), which Triton reads when
a kernel is decorated.
"""
import os as _os


def _select_interpreter_early():
    if _os.environ.get("TRITON_INTERPRET") is not None:
        return
    if "--autotune_backend=gpu" in _os.environ.get("AUTOTUNE_FLAGS", ""):
        return
    try:
        import torch
        if torch.cuda.is_available():
            return
    except ImportError:
        pass
    _os.environ["TRITON_INTERPRET"] = "1"


_select_interpreter_early()

from autotune.records import (CacheKey, Candidate, Config, Entry,  # noqa: E402
                              Provenance)
from autotune.results_io import (CacheFileError, dump_results,  # noqa: E402
                                 load_results)
from autotune.runtime import (AutotuneCacheMissError, AutotuneError,  # noqa: E402
                              Autotuner, autotune, configure, session, tune)
from autotune.search.space import Space  # noqa: E402

__all__ = ["Autotuner", "autotune", "tune", "configure", "session", "Config",
           "Space", "CacheKey", "Candidate", "Entry", "Provenance",
           "CacheFileError", "AutotuneError", "AutotuneCacheMissError",
           "load_results", "dump_results"]
