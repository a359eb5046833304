"""One rule for "may this entry be used as it is": the runtime's load run
and `autotune_cache verify` say the same about an entry tuned under
another torch (a copy of testdata/xla_style.textproto)."""
import os
import subprocess
import sys

from autotune import codec
from autotune.records import Provenance
from autotune.runtime import freshness, session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
XLA = os.path.join(ROOT, "testdata", "xla_style.textproto")


def _torch_drift_copy(path):
    entries = [e.replace(provenance=e.provenance._replace(
        torch_version="2.1.0")) for e in codec.load_results(XLA)]
    codec.dump_results(entries, path)
    return entries


def test_the_rule_names_the_first_component_that_differs():
    running = {"triton_version": "3.9.0", "torch_version": "2.13.0",
               "cuda_version": None}
    assert freshness.version_drift(Provenance("3.9.1", "2.1.0"), running) \
        == ("torch", "2.1", "2.13")
    assert freshness.version_drift(Provenance("3.4.0", "2.1.0"), running) \
        == ("Triton", "3.4", "3.9")
    assert freshness.version_drift(Provenance("3.9.0", "2.13.1"),
                                   running) is None
    assert session.version_drift is freshness.version_drift


def test_verify_and_a_load_run_agree_on_a_torch_drift(tmp_path):
    path = str(tmp_path / "drift.textproto")
    entries = _torch_drift_copy(path)
    verify = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "verify", path, "--kernel_module", "autotune.kernels.softmax"],
        capture_output=True, text=True, cwd=ROOT)
    assert verify.returncode == 0, verify.stderr
    assert "1 entries tuned with torch 2.1, running 2.13" in verify.stdout
    assert verify.stdout.strip().splitlines()[-1] != "verify: ok"
    # A load run of the same file counts the same entry, by the same rule.
    from autotune import flags
    from autotune.measure import backends
    loading = session.Session(
        flags.Options(load_autotune_results_from=[path]),
        backend=backends.InterpreterBackend())
    assert loading._drift(entries[0]) == ("torch", "2.1", "2.13")


# -- same-named kernels: another function, or this one edited -------------

def _entry(fingerprint, function=None):
    from autotune import keys
    from autotune.records import CompileRequest, Config, Entry
    key = keys.make_key("cpu/triton-interpreter/triton-3.9.0", "add_kernel",
                        fingerprint, "n=20")
    requests = () if function is None else (
        CompileRequest(function, "x:*fp32:D BLOCK=16", "num_warps=4"),)
    return Entry(key, Config({"BLOCK": 16}), 1.0,
                 compile_requests=requests)


def test_an_entry_tuned_for_another_function_is_another_kernel():
    entry = _entry("a" * 16, "mylib.kernels:add_kernel")
    local = "test_add:test_it.<locals>.add_kernel"
    assert freshness.other_kernel(entry, local) == "mylib.kernels:add_kernel"
    assert freshness.other_kernel(entry, "other.kernels:add_kernel") == \
        "mylib.kernels:add_kernel"
    # The same function: run as a script, or imported under its package.
    for same in ("mylib.kernels:add_kernel", "__main__:add_kernel",
                 "kernels:add_kernel", "src.mylib.kernels:add_kernel"):
        assert freshness.other_kernel(entry, same) is None, same
    # Nothing recorded, or the kernel looked up unknown: nothing is said.
    assert freshness.other_kernel(_entry("a" * 16), local) is None
    assert freshness.other_kernel(entry, None) is None


def test_a_miss_beside_another_functions_entry_is_not_a_kernel_change():
    import autotune
    import triton
    import triton.language as tl

    @autotune.autotune(configs=[autotune.Config({"BLOCK": 16})], key=["n"])
    @triton.jit
    def add_kernel(x, n, BLOCK: tl.constexpr):
        tl.store(x + tl.arange(0, BLOCK), 1.0)

    mine = _entry(add_kernel.fingerprint).key
    elsewhere = _entry("a" * 16, "mylib.kernels:add_kernel")
    index = freshness.LoadedIndex({elsewhere.key: elsewhere},
                                  {elsewhere.key: "cache.textproto"})
    assert index.miss_reason(mine) == freshness.MISSING
    assert index.stale([mine]) == {}
    # The same function before an edit is.
    edited = _entry("a" * 16, freshness.function_of(add_kernel))
    index = freshness.LoadedIndex({edited.key: edited},
                                  {edited.key: "cache.textproto"})
    assert index.miss_reason(mine) == freshness.KERNEL_CHANGED
    assert index.stale([mine]) == {mine: "a" * 16}


# -- one verdict per lookup: may the entry be used, and how ---------------

def _offering(*configs):
    from autotune.runtime import offers
    return offers.Offer(lambda: list(configs))


def test_a_verdict_says_hit_and_what_an_update_measures():
    from autotune.records import Config
    entry = _entry("a" * 16)
    found = freshness.verdict(entry.key, (entry, "cache.textproto"),
                              offer=_offering(Config({"BLOCK": 16})))
    assert (found.how, found.usable, found.entry, found.source) == \
        (freshness.HIT, True, entry, "cache.textproto")
    assert found.unmeasured == () and not found.top_up
    # A config added to the list: a hit; an update measures just it.
    added = Config({"BLOCK": 32})
    offer = _offering(Config({"BLOCK": 16}), added)
    found = freshness.verdict(entry.key, (entry, "f"), offer=offer)
    assert found.usable and found.unmeasured == (added,)
    assert not found.top_up
    updating = freshness.verdict(entry.key, (entry, "f"), offer=offer,
                                 updating=lambda key: True)
    assert updating.how == freshness.HIT and updating.top_up
    # A memoized hit is not held against the list again.
    assert freshness.verdict(entry.key, (entry, "memory"),
                             offer=offer).unmeasured == ()


def test_a_verdict_refuses_with_the_reason_and_its_words():
    from autotune.records import Config
    entry = _entry("a" * 16)
    found = freshness.verdict(entry.key, (entry, "f"),
                              offer=_offering(Config({"BLOCK": 32})))
    assert (found.how, found.usable, found.entry) == \
        (freshness.REFUSED, False, entry)
    assert found.reason == freshness.offers.NOT_OFFERED
    assert found.words.startswith("config no longer offered (BLOCK=16 ")
    # A version drift is a hit, refused under strict matching.
    drifted = entry.replace(provenance=Provenance("3.4.0", "2.1.0"))
    running = {"triton_version": "3.9.0", "torch_version": "2.1.0"}
    assert freshness.verdict(drifted.key, (drifted, "f"),
                             running=running).usable
    strict = freshness.verdict(drifted.key, (drifted, "f"),
                               strict_versions=True, running=running)
    assert (strict.how, strict.reason) == (freshness.REFUSED,
                                           freshness.OTHER_VERSION)
    assert "tuned with Triton 3.4, running 3.9" in strict.words


def test_a_verdict_finds_another_tritons_entry_or_says_why_it_missed():
    from autotune import keys
    older = _entry("a" * 16)
    index = freshness.LoadedIndex({older.key: older},
                                  {older.key: "cache.textproto"})
    newer = keys.make_key("cpu/triton-interpreter/triton-3.10.0",
                          "add_kernel", "a" * 16, "n=20")
    found = freshness.verdict(newer, (None, None), lambda: index)
    assert (found.how, found.usable, found.entry, found.source) == \
        (freshness.HIT_OTHER_TRITON, True, older, "cache.textproto")
    edited = keys.make_key(older.key.device, "add_kernel", "b" * 16, "n=20")
    missed = freshness.verdict(edited, (None, None), lambda: index)
    assert (missed.how, missed.usable, missed.entry) == \
        (freshness.MISSED, False, None)
    assert missed.reason == freshness.KERNEL_CHANGED
    assert freshness.verdict(edited, (None, None)).reason == \
        freshness.MISSING
