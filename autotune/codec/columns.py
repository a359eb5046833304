"""Column-wise helpers shared by the codecs.

A results file repeats a few values (devices, configs, provenance strings)
across thousands of entries. The codecs work a column at a time: map() over
C-level getters, and each distinct value formatted or parsed once.
"""
import operator

KEY_OF = operator.attrgetter("key")
RAW_OF = operator.attrgetter("raw")
SECOND = operator.itemgetter(1)


def column(memo, keys, make, objects=None):
    """memo[key] for each key; make(key, object) formats the ones not seen
    yet, once per distinct key (objects: what each key stands for, when the
    key is only an id)."""
    try:
        return list(map(memo.__getitem__, keys))  # all seen before
    except KeyError:
        pass
    missing = set(keys).difference(memo)
    if missing:
        if objects is None:
            by_key = dict.fromkeys(missing)
        elif len(missing) < 256:
            # Few distinct values (configs): find each one's first use.
            by_key = {key: objects[keys.index(key)] for key in missing}
        else:
            by_key = dict(zip(keys, objects))
        for key in missing:
            memo[key] = make(key, by_key[key])
    return list(map(memo.__getitem__, keys))
