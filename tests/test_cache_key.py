import importlib.util
import textwrap

from autotune import keys

KERNEL_TEMPLATE = '''
import triton
import triton.language as tl

@triton.jit
def helper(v):
    return v {op} 1.0

@triton.jit
def kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, helper(tl.load(x + offs)))
'''


def _load(tmp_path, name, op):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(KERNEL_TEMPLATE.format(op=op)))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


def test_fingerprint_is_stable_and_follows_called_jit_functions(tmp_path):
    # One module name, loaded from three files: the kernels' own source is
    # the same in all three, only the helper they call differs in one.
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    a = _load(tmp_path / "a", "kernels", "+")
    b = _load(tmp_path / "b", "kernels", "+")
    c = _load(tmp_path / "c", "kernels", "*")
    assert a is not b
    fa = keys.kernel_fingerprint(a)
    assert len(fa) == 16
    assert fa == keys.kernel_fingerprint(b)  # same code, same hash
    assert keys.kernel_fingerprint(c) != fa  # the helper changed


def test_signature_is_readable_and_canonical():
    import torch
    sig = keys.fusion_signature(
        [("M", 128), ("N", 64)], [("a", torch.float16), ("c", torch.float32)],
        [("ACTIVATION", "relu")])
    assert sig == "M=128,N=64;dtypes=a:float16,c:float32;ACTIVATION=relu"
    assert keys.parse_signature_keys(sig) == {"M": 128.0, "N": 64.0}
    assert keys.signature_shape_class(sig) == \
        "M,N;dtypes=a:float16,c:float32;ACTIVATION=relu"


def test_file_name_depends_on_every_key_part():
    base = keys.make_key("dev", "k", "f", "s")
    names = {keys.file_name(base)}
    for i in range(4):
        parts = list(base)
        parts[i] = parts[i] + "x"
        names.add(keys.file_name(type(base)(*parts)))
    assert len(names) == 5


def test_decorators_are_not_part_of_the_fingerprint(tmp_path):
    # The autotune config list sits in a decorator: changing it must not
    # make the cached entries of the kernel miss.
    for name, block in (("a", 32), ("b", 64)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "kernels.py").write_text(textwrap.dedent(f'''
            import triton
            import triton.language as tl

            def keep(**kwargs):
                return lambda fn: fn

            @triton.jit
            @keep(configs=[{block}])
            def kernel(x, BLOCK: tl.constexpr):
                tl.store(x + tl.arange(0, BLOCK), 1.0)
            '''))
    kernels = []
    for name in ("a", "b"):
        spec = importlib.util.spec_from_file_location(
            "kernels", tmp_path / name / "kernels.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernels.append(module.kernel)
    assert keys.kernel_fingerprint(kernels[0]) == \
        keys.kernel_fingerprint(kernels[1])


def test_config_repr_with_and_without_parameters():
    from autotune.records import Config
    assert repr(Config({}, num_warps=4, num_stages=3)) == \
        "Config(num_warps=4, num_stages=3)"
    assert repr(Config({"BLOCK": 64}, num_warps=2, num_stages=2)) == \
        "Config(BLOCK=64, num_warps=2, num_stages=2)"


def test_module_name_is_not_part_of_the_fingerprint(tmp_path):
    # The same file run as a script (__main__) and imported by its name
    # (pytest, verify --kernel_module) holds the same kernel.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    as_script = _load(tmp_path / "a", "__main__", "+")
    imported = _load(tmp_path / "b", "mykernels", "+")
    assert keys.kernel_fingerprint(as_script) == \
        keys.kernel_fingerprint(imported)
