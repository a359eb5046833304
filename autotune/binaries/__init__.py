"""The binaries: the compile check, compile requests and their results,
the read-through Triton cache and the one compile pool."""
