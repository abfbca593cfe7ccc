"""Counters of machine groups, merged (no torch: worker processes import this)."""
from traverser._traverse import STAT_FIELDS


def merge_stats(stats_list):
    out = {k: sum(s[k] for s in stats_list) for k in STAT_FIELDS}
    out["depth_hist"] = [sum(col) for col in zip(*(s["depth_hist"] for s in stats_list))]
    return out
