"""Real fused Triton kernels, tuned through the runtime: used by the tests,
the example Bazel suite and the benchmarks. Each module has the kernel, its
config space, a launcher and a torch reference."""
