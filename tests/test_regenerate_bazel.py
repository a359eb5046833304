"""Regenerate's Bazel driving: the startup options the nested bazel
commands get under `bazel run`, read back from the calling server's
command line. (Its query and test runs against a fake bazel are in
tests/test_regenerate_args.py and tests/test_e2e_tools.py.)"""
import os

from autotune.cli import regenerate_bazel


def test_under_bazel_run_the_calling_output_base_is_kept(tmp_path):
    """`bazel --output_base=DIR run .../regenerate`: the nested bazel
    commands get DIR, not the default output base (a second server)."""
    base = tmp_path / "custom_base"
    script = base / "execroot" / "my_ws" / "bazel-out" / "k8-fastbuild" / \
        "bin" / "external" / "rules_autotune" / "tools" / \
        "regenerate_bazel.runfiles" / "rules_autotune" / "autotune" / "cli" / \
        "regenerate_bazel.py"
    script.parent.mkdir(parents=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"BUILD_WORKSPACE_DIRECTORY": str(ws)}
    assert regenerate_bazel.calling_output_base(str(ws), env, str(script)) == \
        [f"--output_base={base}"]
    # Run as a script, or for another workspace: nothing is added.
    assert regenerate_bazel.calling_output_base(str(ws), {}, str(script)) == []
    assert regenerate_bazel.calling_output_base(str(tmp_path), env,
                                          str(script)) == []
    assert regenerate_bazel.calling_output_base(
        str(ws), env, os.path.join(regenerate_bazel.ROOT, "x.py")) == []


def _calling_server(tmp_path, server_args, sources):
    """An output base whose server was started with server_args (after the
    jar) and --option_sources=sources, and regenerate's path in it under
    `bazel run`."""
    base = tmp_path / "root" / "0123abcd"
    script = base / "execroot" / "ws" / "bazel-out" / "k8-fastbuild" / \
        "bin" / "tools" / "regenerate_bazel.runfiles" / "ws" / "autotune" / \
        "cli" / "regenerate_bazel.py"
    script.parent.mkdir(parents=True)
    (base / "server").mkdir()
    argv = ["/usr/lib/jvm/bin/java", "-Xverify:none", "-jar",
            "/usr/share/bazel/A-server.jar"] + server_args + [
        f"--option_sources={sources}"]
    (base / "server" / "cmdline").write_bytes("\0".join(argv).encode())
    ws = tmp_path / "ws"
    ws.mkdir()
    return base, str(ws), {"BUILD_WORKSPACE_DIRECTORY": str(ws)}, str(script)


def test_under_bazel_run_the_calling_startup_options_are_kept(tmp_path):
    """`bazel --output_user_root=X run .../regenerate`: the nested bazel
    commands get X too (without it each restarts the server, and so does
    the user's next command); options of an rc file are not repeated."""
    base, ws, env, script = _calling_server(tmp_path, [
        "--max_idle_secs=10800", f"--output_user_root={tmp_path}/root",
        "--install_base=/usr/share/bazel",
        f"--output_base={tmp_path}/root/0123abcd", "--nowatchfs",
        f"--workspace_directory={tmp_path}/ws"],
        "install_Ubase:/etc/bazel/bazelrc:output_Uuser_Uroot::"
        "watchfs:/home/u/_Cdot_Ebazelrc")
    options, note = regenerate_bazel.calling_startup_options(ws, env, script)
    assert options == [f"--output_base={base}",
                       f"--output_user_root={tmp_path}/root"]
    assert note is None
    # Run as a script: nothing is added.
    assert regenerate_bazel.calling_startup_options(ws, {}, script) == (
        [], None)


def test_a_startup_option_that_cannot_be_read_back_is_named(tmp_path):
    base, ws, env, script = _calling_server(tmp_path, [
        f"--output_base={tmp_path}/root/0123abcd", "--nobatch"],
        "output_Ubase::host_Ujvm_Uargs::batch:")
    options, note = regenerate_bazel.calling_startup_options(ws, env, script)
    assert options == [f"--output_base={base}"]
    assert note == ("regenerate: note: the calling bazel's startup "
                    "option(s) --host_jvm_args, --batch cannot be read "
                    "back from its server; pass each with "
                    "--bazel_startup_arg=... (after `--`), or the nested "
                    "bazel commands restart the server")


def test_without_the_servers_command_line_the_output_base_is_kept(tmp_path):
    base, ws, env, script = _calling_server(tmp_path, [], "")
    (base / "server" / "cmdline").unlink()
    assert regenerate_bazel.calling_startup_options(ws, env, script) == (
        [f"--output_base={base}"], None)
