"""Search beyond a fixed config list: spaces with constraints, evolutionary
search, reuse of results across shapes and devices, parallel evaluation,
and simulation from recorded timing tables."""
