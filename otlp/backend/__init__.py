"""otlp.backend: the speed machinery, imported by the rules and never by the core's maths (two function-level doors,
docs/ARCHITECTURE.md). ``native`` (the C kernels built with the package, loaded with ctypes), ``threads`` (host
row chunks), ``scratch`` (reused work arrays), ``cuda_graphs`` (device functions replayed from CUDA graphs), ``triton``
(whether Triton imports)."""
