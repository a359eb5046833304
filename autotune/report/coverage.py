"""Which fusions each device's entries cover: the table behind
`autotune_cache show --coverage` and the report page's coverage section.
The suite's fusions are those some device has an entry for (kernel and
signature): a device that lacks one is missing it."""


def coverage(entries, stale_reason=None):
    """One row per device: {device, fusions (the suite's), entries (the
    fusions it holds), missing, stale, last_tuned}. stale_reason(entry):
    why an entry no longer matches the kernels it was tuned for (None: it
    does), or None where no kernels were given (stale is then not
    checked and left empty)."""
    fusions = sorted({(e.key.kernel, e.key.signature) for e in entries})
    by_device = {}
    for entry in entries:
        by_device.setdefault(entry.key.device, []).append(entry)
    rows = []
    for device, held in sorted(by_device.items()):
        have = {(e.key.kernel, e.key.signature) for e in held}
        stale = sorted({(e.key.kernel, e.key.signature) for e in held
                        if stale_reason is not None and stale_reason(e)})
        stamps = [e.provenance.timestamp for e in held
                  if e.provenance.timestamp]
        rows.append({
            "device": device, "fusions": len(fusions),
            "entries": len(have),
            "missing": [f"{k} [{sig}]" for k, sig in fusions
                        if (k, sig) not in have],
            "stale": [f"{k} [{sig}]" for k, sig in stale],
            "last_tuned": max(stamps) if stamps else None})
    return rows
