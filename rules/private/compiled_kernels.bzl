"""autotune_compiled_kernels: a cache's winners compiled for GPU targets.

A build action, so it runs on any CPU executor (never a GPU machine) and
its output directory is an ordinary artifact: --disk_cache and
--remote_cache keep it, and a later build with the same cache, kernels,
targets and Triton variables replays it without executing anything.
gpu_autotuned_test(compile_for = [...]) declares one per load target and
hands its directory to the test (--autotune_compiled_kernels).

The output is reproducible: the same inputs give the same bytes on any
executor with the same Triton and Python, whatever the output base or the
checkout's path (`autotune_cache compile` keeps binaries and metadata only,
names group files' children by bare name and the line info's source files
relative to their import root), so a re-executed action (an eviction, two
runners missing at once, remote execution) leaves the test's inputs as
they were. The Triton and Python that build are inputs of the action
through the tool's runfiles wherever Bazel provides them (the
--@rules_autotune//:python_deps library, e.g. a pip hub, and a hermetic
Python toolchain), so upgrading either re-runs it. With the Python found
on PATH (python_deps_from_interpreter) Bazel cannot see them; the
directory's manifest then still records the build's identity, and the
load test names the first difference with its own in one line
(--require_compiled_kernels makes that a failure).
"""

def _import_roots(files):
    """Where the action finds the kernels' Python modules.

    The execroot and each external repository's root, for source and
    generated files.
    """
    roots = {".": None}
    for f in files:
        root = f.root.path
        workspace_root = f.owner.workspace_root if f.owner else ""
        for base in [root, ""]:
            path = "/".join([p for p in [base, workspace_root] if p])
            if path:
                roots[path] = None
    return roots.keys()

def _module_names(files):
    """The Python modules among `files`, as imported from their root.

    They are the only modules the cache's requests may name.
    """
    names = {}
    for f in files:
        if f.extension != "py":
            continue
        path = f.short_path[:-len(".py")]
        if path.startswith("../"):
            # An external repository's file: ../<repository>/<path>.
            path = path.split("/", 2)[2] if path.count("/") >= 2 else ""
        if path == "__init__" or path.endswith("/__init__"):
            path = path[:-len("__init__")].rstrip("/")
        if path:
            names[path.replace("/", ".")] = None
    return names.keys()

def _compiled_kernels_impl(ctx):
    """Runs `autotune_cache compile` over the cache into a directory."""
    out = ctx.actions.declare_directory(ctx.label.name)
    kernel_files = depset(
        transitive = [d[DefaultInfo].files for d in ctx.attr.kernels] +
                     [d[DefaultInfo].default_runfiles.files for d in ctx.attr.kernels],
    )
    args = ctx.actions.args()
    args.add(ctx.file.cache.path)
    args.add("--target=" + ",".join(ctx.attr.targets))
    args.add("--output=" + out.path)
    args.add("--jobs=%d" % ctx.attr.jobs)
    for root in _import_roots(kernel_files.to_list()):
        args.add("--import_path=" + root)
    for module in ctx.attr.kernel_modules:
        args.add("--kernel_module=" + module)
    for module in _module_names([f for d in ctx.attr.kernels for f in d[DefaultInfo].files.to_list()]):
        args.add("--allowed_module=" + module)
    for name, value in sorted(ctx.attr.triton_env.items()):
        args.add("--triton_env=%s=%s" % (name, value))
    ctx.actions.run(
        executable = ctx.attr._tool[DefaultInfo].files_to_run,
        arguments = [args],
        inputs = depset([ctx.file.cache], transitive = [kernel_files]),
        outputs = [out],
        mnemonic = "AutotuneCompileKernels",
        progress_message = "Compiling the autotuned kernels of %s for %s" % (
            ctx.file.cache.short_path,
            ",".join(ctx.attr.targets),
        ),
        # The Python that has Triton and torch comes from PATH, as for the
        # tests (the documented set-up turns the strict action env off).
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

autotune_compiled_kernels = rule(
    implementation = _compiled_kernels_impl,
    doc = "A cache's recorded compile requests built for GPU targets.",
    attrs = {
        "cache": attr.label(allow_single_file = True, mandatory = True),
        "kernels": attr.label_list(
            doc = "What provides the kernels: the test's deps and data (files too).",
            allow_files = True,
        ),
        "kernel_modules": attr.string_list(),
        "targets": attr.string_list(mandatory = True),
        "triton_env": attr.string_dict(),
        "jobs": attr.int(default = 0),
        "_tool": attr.label(
            default = Label("//tools:compile_kernels"),
            executable = True,
            cfg = "exec",
        ),
    },
)
