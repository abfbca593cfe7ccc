"""Traversal settings (one dataclass; the trainer embeds it in its config)."""
from dataclasses import dataclass, field


@dataclass
class TraverserConfig:
    algorithm: str = "external"
    """'external' (every traverser action expanded) or 'outcome' (one sampled action)."""
    epsilon: float = 0.6
    """Outcome sampling: exploration mixed into the traverser's sampling policy."""
    value_clip: float = 0.0
    """Outcome sampling: clip |regret targets| to this (0 = no clip)."""
    value_scale: float = 1.0
    """Multiplies every utility before it enters a target (e.g. 0.01 for Lost Cities points)."""
    max_depth: int = 0
    """Decisions from the root before a cutoff (0 = the game's maximum length)."""
    max_nodes: int = 0
    """Nodes per traversal before every further node is a cutoff (0 = no limit)."""
    rollouts: int = 0
    """Cutoff value: 0 = returns as they stand (score difference), k = mean of k rollouts."""
    rollout_policy: str = "random"
    """Rollouts: 'random' (uniform) or 'game' (the game's own playout policy: Lost Cities' heuristic)."""
    rollout_resample: bool = False
    """Rollouts: each first redeals what the traverser cannot see (the opponent's unseen cards,
    the deck order), so k rollouts average the cutoff over k deals consistent with its view."""
    prefix_max: int = 0
    """Sampled roots: first play 0..prefix_max on-policy decisions with no samples (0 = root at the deal)."""
    fallback: str = "argmax"
    """Regret matching when no regret is positive: 'argmax' or 'uniform'."""
    strategy_interval: int = 1
    """Write a strategy sample at every n-th opponent decision node (0 = never)."""
    uniform_policy: bool = False
    """No network: a uniform policy at every node (measures the engine-side limit)."""
    model_ids: tuple = field(default=(0, 1))
    """Request model id of each player's advantage network."""
    value_cutoff: float = 0.0
    """Cutoff value from the learned value net the batcher serves next to the advantages:
    0 = playouts only (`rollouts`, as before), 1 = the learned value alone (no playouts run),
    w in (0, 1) = w * value + (1 - w) * playout mean. With w > 0 a cutoff node asks model
    model_ids[traverser] for the traverser's info state and reads the answer's last column
    (column num_actions, already in value units: points * value_scale); every answer row
    then has num_actions + 1 columns."""
