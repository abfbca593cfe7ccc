"""Playing and judging agents: checkpoint read-outs (policies), the search
player, the exploiter, duplicate-deal matches, evaluation, exact poker
exploitability, play in the terminal and replays.

    policy = agents.load_policy("runs/RUN", kind="average")
    action = policy.step(state)

The training (trainer) imports these for its in-run evaluation; nothing here
imports the training.
"""

__all__ = ["load_policy"]


def __getattr__(name):
    # agents.load_policy without importing torch for every `import agents`
    if name == "load_policy":
        from agents.policy import load_policy
        return load_policy
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
