"""Benchmarks for tulip_nb (figures, not pass/fail). See ``bench/README.md``.

``python -m bench`` runs the checkpointer benchmark beside tulip-agents; ``bench.workload`` is the
seeded synthetic conversation every benchmark uses (``/work/shared/BENCH.md``).
"""
