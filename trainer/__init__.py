"""Deep CFR orchestration: config, reservoir memories, network training,
checkpoints, evaluation, and the launcher of the embedded local default."""
