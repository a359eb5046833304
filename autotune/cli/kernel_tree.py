"""The source tree the cache tools check caches against: where the
workspace is (find_workspace), the tuned kernels of the modules
--kernel_module names (tree_autotuners, tree_kernels), and why the tree
makes an entry stale: its kernel gone or changed, its winner no longer
offered (tree_stale_reason; `verify`, `prune --stale` and `show
--coverage` judge alike). regenerate finds its workspace here too."""

import importlib
import os
import sys

from autotune.errors import AutotuneError, ToolError
from autotune.log import printable
from autotune.records import Config
from autotune.runtime import freshness, offers


def tree_kernels(modules):
    """{kernel name: fingerprint} of the tuned kernels in these modules:
    this project's autotuners, and kernels decorated with Triton's own
    triton.autotune, which the drop-in tunes under the same name and
    fingerprint."""
    return {name: tuner.fingerprint
            for name, tuner in tree_autotuners(modules).items()}


def tree_autotuners(modules):
    """{kernel name: autotuner} of the tuned kernels in these modules (see
    tree_kernels)."""
    # Heavy (torch and Triton): only when kernels are asked for; the
    # cache tool starts without them.
    from autotune.runtime.autotuner import Autotuner
    from autotune.runtime.triton_patch import (from_triton_autotuner,
                                               is_triton_autotuner)
    # The current directory too, as `python -m` would: the installed
    # `autotune_cache` command starts with its own bin directory there.
    for directory in (workspace_import_root(), os.getcwd()):
        if directory and directory not in sys.path:
            sys.path.append(directory)
    known = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        # The module's own code raised: anything, KeyboardInterrupt and
        # SystemExit included, is one line, not a traceback or a silent
        # exit.
        except (Exception, KeyboardInterrupt, SystemExit) as e:
            detail = f": {e}" if str(e) else ""
            raise ToolError(printable(
                f"--kernel_module={name}: cannot import: "
                f"{type(e).__name__}{detail}"[:1000])) from None
        for value in vars(module).values():
            if is_triton_autotuner(value):
                try:
                    value = from_triton_autotuner(value)
                except AutotuneError as e:
                    raise ToolError(f"--kernel_module={name}: {e}")
            if isinstance(value, Autotuner):
                known[value.name] = value
    return known


# What marks the root of a Bazel workspace (REPO.bazel from Bazel 7 on).
WORKSPACE_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel",
                     "REPO.bazel")


def find_workspace(start):
    """The Bazel workspace root that contains `start`, or None."""
    here = os.path.abspath(start)
    while True:
        if any(os.path.isfile(os.path.join(here, marker))
               for marker in WORKSPACE_MARKERS):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def workspace_import_root():
    """Where --kernel_module names are imported from: the workspace `bazel
    run` was called in, else the Bazel workspace containing the current
    directory (so `mykernels.gelu` works from any subdirectory)."""
    return os.environ.get("BUILD_WORKSPACE_DIRECTORY") or \
        find_workspace(os.getcwd())


def stale_reason(entry, known):
    fp = known.get(entry.key.kernel)
    if fp is None:
        return "no kernel of this name in the tree"
    if fp != entry.key.fingerprint:
        return f"kernel changed (fingerprint {entry.key.fingerprint}, " \
               f"tree has {fp})"
    return None


def offer_findings(entry, tuner):
    """(why the tree's decoration no longer offers the entry's winner, or
    None; how many configs it offers that the entry never measured). The
    list is read unpruned: a winner outside it is offered for no call;
    configs never measured are counted only for a list nothing prunes
    (a pruned-out config was never meant to be measured)."""
    if tuner.space is not None:
        offer = offers.Offer(space=tuner.space)
    else:
        offer = offers.Offer(lambda: [Config.from_triton(c)
                                      for c in tuner.configs])
    # The runtime's answer for this entry (freshness.verdict), as a load
    # asks it: the versions are verify's own line.
    found = freshness.verdict(entry.key, (entry, "file"), offer=offer)
    if not found.usable:
        return found.words, 0
    if tuner.space is not None or tuner.early_config_prune or \
            tuner.perf_model:
        return None, 0
    return None, len(found.unmeasured)

def tree_stale_reason(entry, tuners):
    """Why the tree (`tuners`, tree_autotuners) makes `entry` stale: its
    kernel is gone or changed, or its winner is no longer offered; None
    when it is current. verify and prune --stale judge alike."""
    reason = stale_reason(entry, {name: tuner.fingerprint
                                  for name, tuner in tuners.items()})
    if reason is None:
        reason = offer_findings(entry, tuners[entry.key.kernel])[0]
    return reason
