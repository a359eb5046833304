"""`autotune_cache merge-driver`: a git merge driver for cache files.

Two branches that both regenerated a checked-in cache conflict line by
line in git although their entries merge by rule: different fusions are a
union, and one fusion tuned on both sides is decided by the one merge rule
(autotune/cache/merge.py, policy "measured", with the common ancestor's
entry as the incumbent). Git calls the driver with the ancestor's, ours
and theirs versions in temporary files (%O %A %B) and the path in the
tree (%P); the result replaces ours (%A), in ours' format (text or binary)
and the canonical sorted form, so
a later regenerate leaves it unchanged.

Three-way rules, per cache key:
  on one side only   added there: kept; present in the ancestor and
                     unchanged on the side that has it: the other side
                     removed it (a prune): dropped
  on both sides      unchanged on one side (the ancestor's entry): the
                     other side's, whatever its winner; changed on both
                     with the same winner: ours; with different winners:
                     the merge rule decides and the conflict is reported
                     on stderr
Exit status (what git expects): 0 merged, the result written to %A;
1 a conflict under --policy=fail, %A left as it was (git marks the file
conflicted); 2 bad input (a corrupt side, another schema version, a
missing ancestor file), one line naming the side, %A left as it was.
"""
import os
import sys

from autotune import codec
from autotune.cache import merge
from autotune.cache.io import looks_like_text, materialize, read_cache
from autotune.errors import CacheFileError, ToolError

SIDES = ("ancestor", "ours", "theirs")

GITATTRIBUTES_LINE = "testdata/*.textproto merge=autotune-cache"
GIT_CONFIG_LINES = (
    'git config merge.autotune-cache.name "rules_autotune cache merge"',
    'git config merge.autotune-cache.driver '
    '"autotune_cache merge-driver %O %A %B %P"')


def _read_side(side, path, tree_path):
    """Entries of one side; git's temporary files have no extension, so
    the format comes from the content (read_cache sniffs it)."""
    label = f"{side} version of {tree_path} ({path})"
    if not os.path.isfile(path):
        raise ToolError(f"{label}: no such file")
    if side == "ancestor" and os.path.getsize(path) == 0:
        return []  # git's stand-in when both branches added the file
    try:
        entries = read_cache(path, parse_all=True)
        materialize(entries, path, everything=True)
    except (CacheFileError, ToolError) as e:
        raise ToolError(f"{label}: {e}") from None
    return entries


def _same(a, b):
    return codec.encode([a], "x.textproto") == codec.encode([b], "x.textproto")


def three_way(ancestor, ours, theirs, policy="measured"):
    """(entries, conflicts, dropped): the merged entries of the three
    versions by the rules in the module docstring."""
    base = {e.key: e for e in ancestor}
    mine = {e.key: e for e in ours}
    other = {e.key: e for e in theirs}
    merged, conflicts, dropped = [], [], []
    for key in list(mine) + [k for k in other if k not in mine]:
        a, b, o = mine.get(key), other.get(key), base.get(key)
        if a is None or b is None:
            present = a if b is None else b
            if o is not None and _same(present, o):
                dropped.append(key)  # removed on the other side
            else:
                merged.append(present)
            continue
        # A side that left the entry as the ancestor had it changed
        # nothing: the other side's change stands, whatever its winner.
        if o is not None and _same(a, o):
            merged.append(b)
            continue
        if o is not None and _same(b, o):
            merged.append(a)
            continue
        if a.best == b.best:
            merged.append(a)
            continue
        kept, found = merge.merge([("ours", [a]), ("theirs", [b])], policy,
                                  incumbents=[o] if o is not None else ())
        merged.extend(kept)
        conflicts.extend(found)
    return merged, conflicts, dropped


def cmd_merge_driver(args):
    sides = [_read_side(side, path, args.tree_path) for side, path in
             zip(SIDES, (args.ancestor, args.ours, args.theirs))]
    merged, conflicts, dropped = three_way(*sides, policy=args.policy)
    if merge.report(f"merge-driver {args.tree_path}", conflicts, args.policy):
        return 1
    with open(args.ours, "rb") as f:
        current = f.read()
    # git's temporary file has no extension: ours' content gives the format
    # (a binary cache stays binary whatever the tree path is called).
    data = codec.encode(merged, "merged.textproto" if looks_like_text(
        current) else "merged.pb")
    if data != current:
        codec.atomic_write(args.ours, data)
    print(f"merge-driver {args.tree_path}: {len(merged)} entries"
          + (f", {len(dropped)} removed on one side" if dropped else "")
          + (f", {len(conflicts)} conflict(s) decided by the "
             f"{args.policy} rule" if conflicts else ""), file=sys.stderr)
    return 0


def add_subcommand(sub, policies):
    p = sub.add_parser(
        "merge-driver", help="git merge driver for cache files "
        "(docs/cache-tool.md#git-merges)",
        description="Merges git's three versions of a cache file "
        "(%O %A %B %P) by the merge rule and writes the result to %A, in "
        "the format of ours. Set up: a .gitattributes line "
        f"`{GITATTRIBUTES_LINE}`, and `" + "`, `".join(GIT_CONFIG_LINES)
        + "`.")
    p.add_argument("ancestor", help="%%O: the common ancestor's version")
    p.add_argument("ours", help="%%A: our version; the result is written "
                   "here")
    p.add_argument("theirs", help="%%B: their version")
    p.add_argument("tree_path", help="%%P: the file's path in the tree "
                   "(names it in messages)")
    p.add_argument("--policy", choices=list(policies),
                   default="measured",
                   help="how one fusion with two winners is decided "
                   "(default: %(default)s; fail: leave the conflict to git)")
    p.set_defaults(func=cmd_merge_driver)
