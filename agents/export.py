"""An agent in one small file: the strategy net a run plays (and the
self-play critic where the run kept one), without the advantage nets,
optimisers or memories.

    python -m agents.export runs/hour11 agent.pt --note "seed 11, main@3bc11f1"
    python -m agents.evaluate runs/new --opponent run:agent.pt
    python -m agents.play agent.pt

The file is a checkpoint (agents/checkpoint.py, the same format): every
command that takes a run or a checkpoint takes it, and plays its average
policy (greedy or sampled) and a search valued by its critic. The policies
that need the advantage nets (current, sdcfr) refuse it by name. What it
came from (the checkpoint's path and iteration, the note) goes along under
"exported_from".
"""
import argparse
import sys

KEPT = ("format", "iteration", "config", "net_spec", "critic", "critic_spec", "critic_value_scale",
        "before_selfplay", "prior")


def export(source, out, note=""):
    """Write the agent of `source` (a run directory or a checkpoint file) to
    `out` as a checkpoint holding only the strategy net and, if kept, the
    critic. Returns (out, what it kept: a list of the nets' names, the
    parameters)."""
    from agents.checkpoint import build_critic, build_net, load_checkpoint, save_agent_file
    ckpt = load_checkpoint(source)
    nets = [build_net(ckpt, "strategy")] + ([build_critic(ckpt)] if "critic" in ckpt else [])   # names a missing net
    payload = {k: ckpt[k] for k in KEPT if k in ckpt}
    payload["nets"] = {"strategy": ckpt["nets"]["strategy"]}
    payload["exported_from"] = {"checkpoint": ckpt["path"], "iteration": ckpt.get("iteration"),
                                "note": note}
    if "exported_from" in ckpt:           # an export of an export: where the first came from goes along
        payload["exported_from"]["earlier"] = ckpt["exported_from"]
    out = save_agent_file(out, payload)
    kept = ["the strategy net", "the critic"][:len(nets)]
    return out, kept, sum(p.numel() for net in nets for p in net.parameters())


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m agents.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="a run directory (its latest checkpoint) or a checkpoint file")
    ap.add_argument("out", help="the file to write")
    ap.add_argument("--note", default="", help="what the agent is (kept in the file under exported_from)")
    args = ap.parse_args(argv)
    try:
        out, kept, params = export(args.source, args.out, args.note)
    except (OSError, ValueError) as e:
        ap.exit(2, f"python -m agents.export: {e}\n")
    print(f"{out}: {' and '.join(kept)}, {params:,} parameters, {out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
