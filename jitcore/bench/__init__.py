"""The benchmark suite behind `python -m jitcore bench`: named workloads and jitcore's
functions (workloads.py), the peers as competent users write them (peers_*.py), how a child
prepares each system (systems.py), one pinned process per system and thread count (child.py),
the fp32 FMA peak of a core (peak.py), runs, tables, JSON and a plot (cli.py)."""
