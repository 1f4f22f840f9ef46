"""The benchmark suite behind `python -m jitcore bench`: named workloads (workloads.py), one
process per system and thread count (child.py), tables, JSON and a plot (cli.py)."""
