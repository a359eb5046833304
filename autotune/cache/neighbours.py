"""Reuse across problem sizes and devices.

A miss for one fusion can borrow from entries of the same kernel (same
fingerprint): the same shape class (signature minus key values) at other
sizes on this device, then the same fusion or nearby sizes on other
devices. Distance between shapes is the sum of |log2| ratios of the key
values, so 1024 vs 2048 is as close as 64 vs 128.
"""
import math

from autotune import keys


def shape_distance(sig_a, sig_b):
    a = keys.parse_signature_keys(sig_a)
    b = keys.parse_signature_keys(sig_b)
    if set(a) != set(b):
        return math.inf
    total = 0.0
    for name in a:
        x, y = a[name], b[name]
        if x <= 0 or y <= 0:
            total += 0.0 if x == y else 1.0
        else:
            total += abs(math.log2(x / y))
    return total


def rank_neighbours(entries, key):
    """Entries ordered by usefulness for `key`: this device first, then
    shape distance, then faster recorded run time."""
    shape_class = keys.signature_shape_class(key.signature)
    ranked = []
    for entry in entries:
        other = entry.key
        if other == key or other.kernel != key.kernel \
                or other.fingerprint != key.fingerprint:
            continue
        if keys.signature_shape_class(other.signature) != shape_class:
            continue
        distance = shape_distance(other.signature, key.signature)
        if math.isinf(distance):
            continue
        ranked.append(((other.device != key.device, distance,
                        entry.run_time_us, other), entry))
    ranked.sort(key=lambda pair: pair[0])
    return [entry for _, entry in ranked]


def neighbours(cache, key, limit=8):
    entries = cache.same_kernel_entries(key.kernel, key.fingerprint)
    return rank_neighbours(entries, key)[:limit]


def seed_configs(entries, per_entry=3):
    """Best config and the next fastest correct candidates of each
    neighbour, deduplicated, in rank order."""
    out = []
    for entry in entries:
        picks = [entry.best] + [c.config for c in sorted(
            (c for c in entry.candidates if c.ok),
            key=lambda c: c.run_time_us)][:per_entry - 1]
        for config in picks:
            if config not in out:
                out.append(config)
    return out


def diverse_top(configs, k, key_names=None):
    """Up to k configs from a ranking (fastest first), taking the best of
    each combination of the two-valued parameters before the runners-up:
    another device's optimum often sits in another such basin."""
    def niche(config):
        names = key_names or [n for n in config.kwargs]
        return tuple(config.kwargs[n] for n in names)
    picked, seen = [], set()
    for config in configs:
        if niche(config) not in seen:
            seen.add(niche(config))
            picked.append(config)
        if len(picked) >= k:
            return picked
    for config in configs:
        if config not in picked:
            picked.append(config)
        if len(picked) >= k:
            break
    return picked
