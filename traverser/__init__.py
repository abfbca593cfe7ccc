"""Deep CFR traversals as resumable nogil state machines (see _traverse.pyx),
the in-process evaluators, the recursive reference, and the worker process."""
from traverser._traverse import MachineGroup, STAT_FIELDS
from traverser.config import TraverserConfig

__all__ = ["MachineGroup", "STAT_FIELDS", "TraverserConfig"]
