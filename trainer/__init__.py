"""Deep CFR training: config, reservoir memories, network training,
checkpoints, warm start, and the launcher of the embedded local default.
Playing and judging the trained agents is the `agents` package."""

__all__ = ["load_policy"]


def __getattr__(name):
    # trainer.load_policy (agents.load_policy) without importing torch for every `import trainer`
    if name == "load_policy":
        from agents.policy import load_policy
        return load_policy
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
