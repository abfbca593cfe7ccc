"""Deep CFR orchestration: config, reservoir memories, network training,
checkpoints, evaluation, and the launcher of the embedded local default."""

__all__ = ["load_policy"]


def __getattr__(name):
    # trainer.load_policy without importing torch for every `import trainer`
    if name == "load_policy":
        from trainer.policy import load_policy
        return load_policy
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
