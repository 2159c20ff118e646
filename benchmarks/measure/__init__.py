"""The measurement's parts, framework-free: step timing, statistics and totals over ranks, memory, energy, FLOPs
and the GEMM ceiling, the anchors, traces, precision and compilation modes, the path probes and limits, preflight."""
