"""May a cached entry be used as it is? The version rule, one place for
the runtime (autotune/runtime/session.py) and `autotune_cache verify`: an
entry tuned under another Triton, torch or CUDA major.minor than the
running ones has drifted (a counted hit by default, stale under
--autotune_version_match=strict). Imports only the records."""
from autotune.records import major_minor, tuned_with_triton

VERSION_COMPONENTS = (("Triton", "triton_version"),
                      ("torch", "torch_version"), ("CUDA", "cuda_version"))


def tuned_versions(entry):
    """{provenance field: version} an entry was tuned with; Triton's from
    the device key where the provenance lacks it (older caches)."""
    p = entry.provenance
    return {"triton_version": tuned_with_triton(entry),
            "torch_version": p.torch_version, "cuda_version": p.cuda_version}


def version_drift(provenance, running):
    """(component, tuned with, running) of the first of Triton, torch and
    CUDA whose major.minor differs between an entry's provenance (or
    tuned_versions' dict) and the running versions; None when none does
    (or a version is unknown)."""
    for label, field in VERSION_COMPONENTS:
        then = major_minor(provenance.get(field) if isinstance(
            provenance, dict) else getattr(provenance, field))
        now = major_minor(running.get(field))
        if then and now and then != now:
            return label, then, now
    return None
