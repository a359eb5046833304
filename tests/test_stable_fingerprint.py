"""Fingerprints that survive formatting: a real formatter run, comments and
docstrings keep every entry a hit; changes to code still make them stale;
`autotune_cache rekey` moves entries of the previous scheme."""
import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from autotune import codec, keys
from autotune.cli import cache_tool, kernel_tree
from autotune.runtime.autotuner import Autotuner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(ROOT, "examples", "pytest_project")
CACHE = os.path.join(PROJECT, "testdata", "kernels.textproto")
_NAMES = itertools.count()


def _import(path):
    """The module at path under a fresh name (no sys.modules clash)."""
    name = f"stable_fp_kernels_{next(_NAMES)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tuners(module):
    return {v.name: v for v in vars(module).values()
            if isinstance(v, Autotuner)}


def _stale_entries(module):
    known = {n: t.fingerprint for n, t in _tuners(module).items()}
    return [e for e in codec.load_results(CACHE)
            if kernel_tree.stale_reason(e, known)]


def _ruff_format(path, *extra):
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet",
                    "--no-cache", *extra, str(path)], check=True)


def _reformatted_copy(tmp_path, before=None, after=None):
    """The example project's kernels, re-commented, given docstrings and
    blank lines, then run through ruff with a narrow line length (so it
    rewraps every long statement)."""
    text = open(os.path.join(PROJECT, "kernels.py")).read()
    if before is not None:
        kernels_at = text.index("@autotune.autotune")  # not the references
        assert before in text[kernels_at:]
        text = text[:kernels_at] + text[kernels_at:].replace(before, after)
    text = text.replace(
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n",
        '    """One program per BLOCK elements."""\n\n'
        "    # one program per block\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # ids\n")
    text = text.replace(
        "    row = tl.program_id(0)\n",
        "    row = tl.program_id(0)   # one program per row\n\n\n"
        "    'the running maximum of the row'\n")
    path = tmp_path / "kernels.py"
    path.write_text(text)
    _ruff_format(path, "--line-length", "40")
    return path


def test_checked_in_cache_is_current():
    assert _stale_entries(_import(os.path.join(PROJECT, "kernels.py"))) == []


def test_formatter_comments_and_docstrings_keep_every_entry_a_hit(tmp_path):
    path = _reformatted_copy(tmp_path)
    formatted = path.read_text()
    original = open(os.path.join(PROJECT, "kernels.py")).read()
    # The edit and the formatter really changed the kernels' text.
    assert "# one program per row" in formatted
    assert formatted.count("\n") > original.count("\n") + 10
    module = _import(path)
    assert _stale_entries(module) == []
    # The previous scheme hashed text: these same edits made it stale.
    original_tuners = _tuners(_import(os.path.join(PROJECT, "kernels.py")))
    for name, tuner in _tuners(module).items():
        assert tuner.source_text_fingerprint != \
            original_tuners[name].source_text_fingerprint
        assert tuner.fingerprint == original_tuners[name].fingerprint


@pytest.mark.parametrize("before, after", [
    ("* alpha + beta", "* alpha - beta"),           # an operator
    ('float("-inf")', 'float("-1e30")'),            # a constant
    ("tl.maximum(best, v)", "tl.minimum(best, v)"),  # a called function
])
def test_code_changes_make_entries_stale(tmp_path, before, after):
    path = _reformatted_copy(tmp_path, before, after)
    stale = _stale_entries(_import(path))
    assert stale, f"{before} -> {after} kept every entry"
    assert len({e.key.kernel for e in stale}) == 1


KERNEL = '''
import triton
import triton.language as tl

SCALE = {scale}

@triton.jit
def helper(v):
    return v * SCALE

@triton.jit
def kernel(x, n, BLOCK: tl.constexpr = {block}):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, helper(tl.load(x + offs)))
'''


def _kernel(tmp_path, scale=2.0, block=32):
    path = tmp_path / f"k{next(_NAMES)}.py"
    path.write_text(textwrap.dedent(KERNEL.format(scale=scale, block=block)))
    return _import(path).kernel


def test_constexpr_defaults_and_global_constants_count(tmp_path):
    base = keys.kernel_fingerprint(_kernel(tmp_path))
    assert base == keys.kernel_fingerprint(_kernel(tmp_path))
    assert keys.kernel_fingerprint(_kernel(tmp_path, block=64)) != base
    assert keys.kernel_fingerprint(_kernel(tmp_path, scale=3.0)) != base


def test_schemes_are_distinguishable(tmp_path):
    kernel = _kernel(tmp_path)
    assert keys.kernel_fingerprint(kernel) != \
        keys.source_text_fingerprint(kernel)


# -- rekey ------------------------------------------------------------------

def _project_copy(tmp_path, monkeypatch):
    """The example project's kernels as an importable module of its own
    name, and a cache whose entries are keyed by the previous scheme (as
    every cache written before this scheme is)."""
    name = f"rekey_kernels_{next(_NAMES)}"
    shutil.copy(os.path.join(PROJECT, "kernels.py"), tmp_path / f"{name}.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    tuners = kernel_tree.tree_autotuners([name])
    entries = [e.replace(key=e.key._replace(
        fingerprint=tuners[e.key.kernel].source_text_fingerprint))
        for e in codec.load_results(CACHE)]
    cache = tmp_path / "old.textproto"
    codec.dump_results(entries, str(cache))
    return name, tuners, cache


def test_rekey_moves_previous_scheme_entries(tmp_path, monkeypatch, capsys):
    name, tuners, cache = _project_copy(tmp_path, monkeypatch)
    entries = codec.load_results(str(cache))
    # One entry of a kernel edited since: it must be left, not lost.
    edited = entries[0].replace(key=entries[0].key._replace(
        fingerprint="0123456789abcdef", signature="n=7;dtypes=x:float32"))
    codec.dump_results(entries + [edited], str(cache))
    assert cache_tool.main(["rekey", str(cache), "--kernel_module",
                            name]) == 0
    out = capsys.readouterr().out
    after = codec.load_results(str(cache))
    assert len(after) == len(entries) + 1
    fingerprints = {(e.key.kernel, e.key.signature): e.key.fingerprint
                    for e in after}
    for e in entries:
        assert fingerprints[(e.key.kernel, e.key.signature)] == \
            tuners[e.key.kernel].fingerprint
    assert fingerprints[(edited.key.kernel, edited.key.signature)] == \
        "0123456789abcdef"
    assert out.count(": rekeyed: ") == len(entries)
    assert "left: " in out and "stale: fingerprint 0123456789abcdef" in out
    assert f"{len(entries)} re-keyed, 1 left" in out
    # Only keys changed: configs, times and provenance are as they were.
    def fields(e):
        return (e.key.kernel, e.key.signature, e.key.device, e.best,
                e.run_time_us, e.candidates, e.provenance)
    assert sorted(map(fields, after)) == sorted(map(fields,
                                                    entries + [edited]))
    # Again: nothing to do, the file is not rewritten.
    mtime = os.stat(cache).st_mtime_ns
    assert cache_tool.main(["rekey", str(cache), "--kernel_module",
                            name]) == 0
    assert "0 re-keyed" in capsys.readouterr().out
    assert os.stat(cache).st_mtime_ns == mtime


def test_rekey_assume_unchanged(tmp_path, monkeypatch, capsys):
    name, tuners, cache = _project_copy(tmp_path, monkeypatch)
    entries = [e.replace(key=e.key._replace(fingerprint="feedfacefeedface"))
               for e in codec.load_results(str(cache))]
    codec.dump_results(entries, str(cache))
    assert cache_tool.main(["rekey", str(cache), "--kernel_module", name,
                            "--assume-unchanged", "row_max_kernel"]) == 0
    out = capsys.readouterr().out
    assert "asserted unchanged by --assume-unchanged" in out
    after = {(e.key.kernel, e.key.signature): e.key.fingerprint
             for e in codec.load_results(str(cache))}
    assert len(after) == len(entries)
    for (kernel, _), fp in after.items():
        assert fp == (tuners[kernel].fingerprint if kernel == "row_max_kernel"
                      else "feedfacefeedface")
    assert cache_tool.main(["rekey", str(cache), "--kernel_module", name,
                            "--assume-unchanged", "nope"]) == 2
    assert "--assume-unchanged=nope: no kernel" in capsys.readouterr().err


def test_rekey_never_overwrites_an_entry_of_the_new_key(tmp_path, monkeypatch,
                                                        capsys):
    name, tuners, cache = _project_copy(tmp_path, monkeypatch)
    old = codec.load_results(str(cache))
    current = codec.load_results(CACHE)
    codec.dump_results(old + current, str(cache))
    assert cache_tool.main(["rekey", str(cache), "--kernel_module",
                            name]) == 0
    assert "exists already" in capsys.readouterr().out
    assert len(codec.load_results(str(cache))) == len(old) + len(current)
