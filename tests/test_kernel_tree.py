"""The source tree the cache tools check caches against
(autotune/cli/kernel_tree.py): the workspace root, and why the tree makes
an entry stale. (Importing --kernel_module modules is exercised through
the cache tool in tests/test_cache_tool.py and
tests/test_stable_fingerprint.py.)"""
import pytest

from autotune.cli import kernel_tree
from autotune.errors import ToolError

from test_e2e_tools import entry


@pytest.mark.parametrize("marker", kernel_tree.WORKSPACE_MARKERS)
def test_the_workspace_is_the_nearest_folder_with_a_marker(tmp_path, marker):
    (tmp_path / "ws" / "a" / "b").mkdir(parents=True)
    (tmp_path / "ws" / marker).write_text("")
    assert kernel_tree.find_workspace(str(tmp_path / "ws" / "a" / "b")) == \
        str(tmp_path / "ws")
    assert kernel_tree.find_workspace(str(tmp_path / "ws")) == \
        str(tmp_path / "ws")


def test_an_entry_is_stale_when_its_kernel_is_gone_or_changed():
    e = entry(1, fingerprint="00000000aaaa")
    assert kernel_tree.stale_reason(e, {"k": "00000000aaaa"}) is None
    assert kernel_tree.stale_reason(e, {}) == \
        "no kernel of this name in the tree"
    assert kernel_tree.stale_reason(e, {"k": "00000000bbbb"}) == (
        "kernel changed (fingerprint 00000000aaaa, tree has 00000000bbbb)")


def test_a_kernel_module_that_cannot_be_imported_is_one_line(tmp_path,
                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "broken_kernels_mod.py").write_text("raise SystemExit(3)\n")
    with pytest.raises(ToolError) as raised:
        kernel_tree.tree_autotuners(["broken_kernels_mod"])
    assert str(raised.value) == (
        "--kernel_module=broken_kernels_mod: cannot import: SystemExit: 3")
