"""The run config: one typed dataclass per section, loaded from YAML with
`--set section.key=value` overrides. Unknown keys and values of the wrong type
are rejected with a message that names them."""
import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field

import yaml

from traverser.config import TraverserConfig


@dataclass
class GameSection:
    name: str = "lost_cities"
    """Engine game: lost_cities, leduc_poker or kuhn_poker."""
    params: dict = field(default_factory=dict)
    """Game parameters (docs/engine.md), e.g. {colours: 6}."""


@dataclass
class NetworkSection:
    hidden: list = field(default_factory=lambda: [512, 512, 512])
    """Hidden layer widths of the advantage and strategy MLPs."""
    value_hidden: list = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the value net (train.value_steps > 0): info-state -> the expected return of its player, in traversal value units."""
    critic_hidden: list = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the self-play critic (train.selfplay_budget_s > 0): info-state -> the expected return of the player to act, kept in every checkpoint of the stage. The critic trains beside the strategy net on the update's core, so a narrower one leaves more of the stage's minutes to the policy."""


@dataclass
class TrainSection:
    iterations: int = 100
    """Deep CFR iterations."""
    traversals: int = 2048
    """Traversals per player per iteration."""
    adv_steps: int = 300
    """SGD steps when training an advantage net."""
    strategy_steps: int = 1000
    """SGD steps when training the strategy net."""
    batch_size: int = 1024
    """Rows per SGD step."""
    lr: float = 1e-3
    """Adam learning rate."""
    adv_memory: int = 1000000
    """Reservoir capacity of each player's advantage memory (rows)."""
    strategy_memory: int = 1000000
    """Reservoir capacity of the strategy memory (rows)."""
    merge_duplicates: bool = False
    """Memories hold one row per distinct info state, its samples' weighted mean target (same loss, no sampling noise between duplicates; pays off where info states recur: Kuhn, Leduc)."""
    reinit_advantage: bool = True
    """Re-initialise the advantage net before each training (else warm-start)."""
    average: str = "network"
    """Average policy: network (Deep CFR's strategy net) or sdcfr (SD-CFR's exact mixture of the advantage nets' policies; Kuhn and Leduc only)."""
    adv_lr_after: int = 0
    """From this iteration on, the advantage nets' learning rate falls as lr * sqrt(adv_lr_after / t) (0 = constant)."""
    strategy_lr_decay: bool = True
    """Cosine-anneal the learning rate to 0 within each strategy-net training (less SGD noise in the average policy)."""
    augment_colours: bool = False
    """Lost Cities: every minibatch's rows have their colours renamed by a random permutation, one per row (agents/symmetry.py), so the nets learn from every renamed copy of what they saw."""
    strategy_every: int = 10
    """Train the strategy net every n iterations (and at evaluations and the end)."""
    device: str = "auto"
    """Training device: auto, cuda or cpu."""
    grad_clip: float = 1.0
    """Gradient norm clip (0 = none)."""
    torch_threads: int = 1
    """torch CPU threads in the trainer process."""
    time_limit_s: float = 0.0
    """Stop after the iteration that passes this wall-clock budget (0 = none)."""
    warm_start_games: int = 0
    """Self-play games whose decisions, labelled by the heuristic or a lookahead over it (warm_start_worlds), seed the memories and pretrain the nets before iteration 1 (0 = none; games with a rule-based policy: Lost Cities). See trainer/warmstart.py."""
    warm_start_weight: float = 20.0
    """Sample weight of the warm-start rows, in iterations (a sample of iteration t weighs t)."""
    warm_start_advantage: float = 0.05
    """Warm-start advantage targets: + for the teacher's move (the heuristic's, or the lookahead's), - for every other legal move."""
    warm_start_steps: int = 1000
    """SGD steps per net on the warm-start memories before iteration 1."""
    warm_start_worlds: int = 0
    """0: label each warm-start decision with the heuristic's move. K > 0: with the move of a one-step lookahead over K redealt worlds with heuristic playouts (a depth-1 cutoff's regret averaged over K worlds; agents.searcher), which also plays the warm-start games. Its cost a decision grows with K (the figure at 64 worlds: docs/benchmarks.md, "Label jobs: the prior on the workers")."""
    warm_start_explore: float = 0.0
    """Share of warm-start moves played uniformly at random (still labelled with the teacher's move), so the prior also covers states off the teacher's path."""
    warm_start_budget_s: float = 0.0
    """Wall-clock budget of the warm start's labelling, in seconds (0 = none): no label job is handed out and no game started once it is spent, and the games the workers are playing then are dropped, so the prior holds the whole games finished in time, at most warm_start_games. A run then lasts about as long on a slower box, with fewer labelled games (metrics.jsonl's warm_start_games_labelled says how many)."""
    warm_start_lr_decay: bool = False
    """Cosine-anneal the learning rate to 0 over each net's warm_start_steps of pretraining (and of each expert-iteration round's). A budget that stops the steps early stops the decay part-way."""
    warm_start_pretrain_budget_s: float = 0.0
    """Wall-clock budget of the warm start's pretraining, in seconds (0 = none): each of the three nets stops after warm_start_steps or a third of this, whichever comes first."""
    value_steps: int = 0
    """SGD steps of the value net on the warm start's games, after the warm start's pretraining (0 = no value net; trainer/value.py). A tenth of the games is held out whole for its error in metrics.jsonl (value_heldout_mse, next to the mean and zero predictors'). traversal.value_cutoff > 0 needs it."""
    value_budget_s: float = 0.0
    """Wall-clock budget of the value net's training, in seconds (0 = none): it stops after value_steps or this, whichever comes first. Its own budget, apart from warm_start_pretrain_budget_s."""
    value_labels: str = "search"
    """What the value net learns: search (the lookahead teacher's mean value of the move chosen and of two other candidates, seen by the mover after it; needs warm_start_worlds > 0), outcome (each game's final return, seen by the player to move and by the other player) or both (agents.labels, trainer/value.py). The held-out error of each kind is reported whatever it learns. Outcomes rate a move by what followed it in the teacher's games, which misleads a search and CFR's cutoffs (docs/lost_cities_strength.md, "The learned value")."""
    warm_start_share: float = 0.0
    """0: the warm-start rows sit in the memories and fade as linear CFR's weights grow. In (0, 1): they stay apart and make up this share of every advantage and strategy batch for the whole run (a lasting prior)."""
    adv_prior_share: float = -1.0
    """The prior's share of the advantage nets' batches after the warm start's pretraining (-1 = warm_start_share, the same as the strategy net's). 0: the advantage nets learn from CFR's sampled regrets alone once the run has any, while the strategy net keeps the prior at warm_start_share; their held-out error in metrics.jsonl (adv_heldout_mse_*) is then the regrets' alone. Needs a lasting prior (warm_start_share > 0) when not -1."""
    exit_rounds: int = 0
    """Rounds of expert iteration after the warm start (0 = none; needs a lasting prior, warm_start_share > 0). Each round the agent (the strategy net, greedy, with warm_start_explore random moves) plays up to exit_games games, a search over it labels every decision (exit_worlds worlds of heuristic playouts over its exit_topk most likely moves), the labels join the prior's, and fresh nets are pretrained on the pool (warm_start_steps, warm_start_pretrain_budget_s). checkpoints/prior.pt stays the imitation of the warm start's teacher."""
    exit_games: int = 1000
    """The most games an expert-iteration round labels; exit_budget_s decides on a slower box."""
    exit_budget_s: float = 0.0
    """Wall-clock budget of each expert-iteration round's labelling, in seconds (0 = none), as warm_start_budget_s."""
    exit_worlds: int = 640
    """Worlds of the expert-iteration search (agents.searcher.SearchPlayer, raced)."""
    exit_topk: int = 4
    """Candidates of the expert-iteration search: the agent's most likely moves (0 = every legal move)."""
    selfplay_budget_s: float = 0.0
    """Lost Cities: the last this-many seconds of the run fine-tune the strategy net (the agent) by PPO self-play (agents/ppo.py), after the last CFR iteration's strategy training and before the final evaluation and checkpoint (0 = none). With time_limit_s, CFR stops early enough to leave it, and it gets at most what is left of the limit. A resumed run's next strategy training starts again from the CFR memories, so resume only runs whose self-play is still to come."""
    selfplay_lr: float = 2e-4
    """Adam learning rate of the self-play fine-tuning (agents.ppo.SelfPlaySettings.lr). A smaller rate moved the policy so little a wave that the step, not PPO's clip, bounded what a wave taught; this one gave a stronger agent in the recipe's stage (docs/studies/2026-12-03-selfplay-lr.md)."""
    selfplay_lr_hold_s: float = -1.0
    """-1: the self-play's learning rate is selfplay_lr throughout. Otherwise it holds selfplay_lr for this many seconds of the stage and then falls linearly to 0 at the stage's end (agents.ppo.scheduled_lr); a stage no longer than this never decays, so a longer run keeps a shorter run's first seconds."""
    selfplay_threads: int = 0
    """torch CPU threads of the self-play update, which runs while the local workers and the batcher play the next wave beside it. 0: the cores less the local workers and the embedded batcher's threads, at least 1 (1 on the 2-core box with one worker): more threads than cores left make the update's threads spin against the players and the stage slower (docs/benchmarks.md, "Self-play on the workers")."""
    selfplay_checkpoint_s: float = 300.0
    """A checkpoint every this many seconds of the self-play stage (0: only at its end), holding the strategy net, the critic and both optimisers: a run killed in the stage resumes it there (--resume, --auto-resume), and the stage's budget and the time limit count the time the run had spent."""
    selfplay_games: int = 512
    """Deals played together in one self-play wave."""
    selfplay_epochs: int = 2
    """PPO passes over each self-play wave."""
    selfplay_critic_epochs: int = 0
    """Of the selfplay_epochs passes over a wave, how many train the critic as well as the policy (0: every one). The first waves, which train only the critic, take every pass. 1 of 2 made a bfloat16 wave 1.40 s against 1.52 s, the means of four, on the 2-core AMD box (2026-12-07, cbd1a44: python -m benchmarks.lc_selfplay AGENT --speed-waves 5 --critic-epochs 1, and 0); with the critic 128x128 as well (network.critic_hidden) the hour played 1.1-1.3 times the waves and tied the recipe at seeds 11 and 12, so configs/lost_cities_cpu.yaml sets both (docs/studies/2026-12-07-lighter-critic.md)."""
    selfplay_entropy: float = 0.0
    """Weight of the policy's entropy in the self-play loss (agents.ppo.SelfPlaySettings.entropy; 0: none). The advantages are normalised to unit spread a wave, so 0.01 is a small pull towards trying other moves."""
    selfplay_lam: float = 0.95
    """GAE lambda of the self-play advantages and the critic's targets, along each player's own decisions (agents.ppo.SelfPlaySettings.lam): 1 takes each decision's final return less the critic's value, smaller values lean more on the critic's later values. 1 lost to 0.95 by 3.7 points a game head to head in the hour's stage at seed 11, and 0.9 tied it (docs/studies/2026-12-07-gae-lambda.md)."""
    selfplay_autocast: str = "auto"
    """The self-play nets' forwards (playing, the critic's values and the PPO update): bf16 (bfloat16 matrix products, float32 weights and losses), none (float32), or auto: bf16 on a CPU that multiplies bfloat16 in hardware (AVX512-BF16 or AMX) with oneDNN not capped below it (ONEDNN_MAX_CPU_ISA), none elsewhere: on other CPUs bfloat16 is emulated and slower, and on a GPU the waves' small forwards are bound by their launches, so bf16 plays more waves in the same minutes on such a CPU and fewer on a GPU (docs/benchmarks.md, "Lost Cities training steps")."""


@dataclass
class ServiceSection:
    batcher: str = ""
    """Batcher endpoint to use; empty = start one as a local subprocess."""
    jobs_bind: str = "tcp://127.0.0.1:0"
    """Where the trainer serves jobs to workers (port 0 = any free port)."""
    workers: int = 1
    """Local worker processes to start (0 = use workers started elsewhere)."""
    label_workers: int = 0
    """Local workers for the prior's labels (the warm start's and expert iteration's label jobs, trainer/label_stage.py), where more than service.workers: the launcher starts the larger number, and CFR's and self-play's jobs are still cut for service.workers, so the extra ones idle after the labelling. Workers started elsewhere take label jobs too."""
    worker_threads: int = 1
    """Stepping threads per worker."""
    groups: int = 4
    """Machine groups per worker thread (in flight at once)."""
    machines: int = 128
    """State machines per group."""
    job_size: int = 0
    """Traversals per job (0 = one job per worker and phase: traversals / workers, counting workers started elsewhere that the trainer has heard from; at least 1)."""
    batcher_device: str = "auto"
    """Device of the embedded batcher: auto, cuda or cpu."""
    batcher_transport: str = "ipc"
    """Embedded batcher's endpoint: ipc (a Unix socket in a fresh temporary directory; local workers only, cheaper per byte than TCP) or tcp (127.0.0.1 on a free port). ipc falls back to tcp where ZeroMQ has no ipc transport."""
    batcher_shm: bool = True
    """Embedded batcher and local workers: each round's rows and answers go through shared-memory files (a fresh directory under /dev/shm, removed at stop) instead of the socket, which saves the kernel's copies and most of ZeroMQ's I/O thread (docs/protocol.md, "Shared-memory infer"). false: through the socket."""
    batcher_threads: int = 1
    """torch CPU threads of the embedded batcher."""
    max_batch: int = 2048
    """Embedded batcher: most rows per forward."""
    max_wait_us: int = 500
    """Embedded batcher: longest wait after the oldest queued row."""
    selfplay_max_wait_us: int = 0
    """The self-play net's own wait on the batcher, embedded or not (pushed with its weights): a worker's self-play games move in rounds, all its rows in flight at once, so a wait for more rows is mostly latency. 0: a forward of whatever is queued each time round the batcher's loop, the faster on the 2-core CPU box (configs/lost_cities.yaml keeps 50 for a GPU; docs/benchmarks.md, "Self-play on the workers")."""
    autocast: str = "none"
    """Embedded batcher: none, bf16 or fp16 forward (bf16 is the faster on CPUs that multiply bfloat16 in hardware, AVX512-BF16; docs/benchmarks.md, "Batcher and end to end")."""
    max_restarts: int = 3
    """Restarts of local children (the batcher and the workers together, in every phase) allowed over a trainer process's run before it stops with an error (trainer/supervise.py)."""
    curve_keys: str = ""
    """Directory of CURVE keys (python -m batcher.keys DIR): authenticate batcher, jobs and workers."""
    adv_dtype: str = "float32"
    """dtype the batcher answers local workers in: float32 (exact: the samples of an in-process traversal) or float16 (half the answer bytes; advantages rounded to 11 significant bits, so sampled actions can differ; no faster on the H200 box, docs/benchmarks.md, "GPU box: one H200, 16 cores")."""
    heartbeat_timeout_s: float = 60.0
    """A worker silent this long while holding a job is presumed dead; its job is handed out again."""


@dataclass
class EvalSection:
    every: int = 10
    """Evaluate every n iterations (0 = only at the end)."""
    lc_games: int = 2000
    """Lost Cities: games per opponent, in pairs on the same deal with seats swapped."""
    opponents: list = field(default_factory=lambda: ["random", "heuristic"])
    """Lost Cities opponents (random, heuristic, cautious)."""
    policies: list = field(default_factory=lambda: ["average"])
    """Read-outs to evaluate (average, current, sdcfr, each optionally -greedy); keys of the
    first are plain (vs_heuristic_margin), of the others prefixed (current_vs_heuristic_margin)."""
    exploiter_games: int = 0
    """Lost Cities: games against the exploiter (a local best response to the first read-out)
    at the run's first and last evaluation and every exploiter_every iterations (0 = never)."""
    exploiter_every: int = 0
    """Also play the exploiter every n iterations (0 = only first and last)."""
    exploiter_worlds: int = 16
    """The exploiter's sampled deals of the hidden cards per decision."""
    openspiel: bool = True
    """Poker: also compute exploitability with OpenSpiel (if installed)."""


@dataclass
class RunSection:
    seed: int = 0
    """Run seed (traversal deals, network init, reservoir sampling)."""
    dir: str = "runs"
    """Parent directory of run directories."""
    name: str = ""
    """Run directory name (empty = game name + start time)."""
    checkpoint_every: int = 10
    """Write a checkpoint every n iterations (and at the end)."""
    save_memories: bool = False
    """Include the reservoir memories in checkpoints."""
    tensorboard: bool = True
    """Write TensorBoard scalars to RUN_DIR/tb."""
    progress: bool = True
    """Progress: tqdm bars on a terminal, a plain line about every 30 s (DEEPCFR_PROGRESS_S) and at each phase's end elsewhere."""
    summary_note: str = ""
    """Lines printed at the end of the final summary (what the run is for, what to run next)."""


@dataclass
class Config:
    game: GameSection = field(default_factory=GameSection)
    traversal: TraverserConfig = field(default_factory=TraverserConfig)
    network: NetworkSection = field(default_factory=NetworkSection)
    train: TrainSection = field(default_factory=TrainSection)
    service: ServiceSection = field(default_factory=ServiceSection)
    eval: EvalSection = field(default_factory=EvalSection)
    run: RunSection = field(default_factory=RunSection)


class ConfigError(ValueError):
    pass


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _check_value(where, typ, value):
    """value converted to typ, or ConfigError naming `where`."""
    if typ is bool:
        if isinstance(value, bool):
            return value
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            return float(value)  # YAML 1.1 reads 3e-4 (no dot) as a string
    elif typ is str:
        if isinstance(value, str):
            return value
    elif typ in (list, tuple):
        if isinstance(value, (list, tuple)):
            return typ(value)
    elif typ is dict:
        if isinstance(value, dict):
            return dict(value)
    raise ConfigError(f"config {where}: expected {typ.__name__}, got {type(value).__name__} {value!r}")


# keys that are gone, and what replaced them
REMOVED = {"train.warm_start_procs": "the workers label the prior's games (trainer/label_stage.py); "
                                     "service.label_workers sets how many local ones"}


def _apply(obj, data, prefix, saved=False):
    """Set obj's fields from `data`; saved: a config a run saved (a
    checkpoint's, config.json), whose removed keys are dropped, not refused:
    what replaced them applies instead."""
    if not isinstance(data, dict):
        raise ConfigError(f"config {prefix or 'file'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in data.items():
        where = f"{prefix}.{key}" if prefix else str(key)
        if where in REMOVED:
            if saved:
                continue
            raise ConfigError(f"config {where}: removed; {REMOVED[where]}")
        if key not in names:
            raise ConfigError(f"config {where}: unknown key (known: {', '.join(sorted(names))})")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            _apply(current, value, where, saved)
        else:
            setattr(obj, key, _check_value(where, hints[key], value))


def config_from_dict(data):
    """The Config of a dict a run saved (config_to_dict: a checkpoint's or
    RUN/config.json); keys removed since it was saved are dropped."""
    cfg = Config()
    _apply(cfg, data or {}, "", saved=True)
    validate(cfg)
    return cfg


def load_config(path=None, overrides=()):
    """Config from a YAML file (or defaults) plus `section.key=value` overrides."""
    data = {}
    if path is not None:
        try:
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    cfg = Config()
    _apply(cfg, data, "")
    apply_overrides(cfg, overrides)
    validate(cfg)
    return cfg


def apply_overrides(cfg, overrides):
    """Apply `section.key=value` items (value parsed as YAML; a.b.c reaches
    into mapping fields such as game.params)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            raise ConfigError(f"--set {item!r}: expected section.key=value")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        parts = key.split(".")
        target, i = cfg, 0
        while i < len(parts) - 1 and dataclasses.is_dataclass(getattr(target, parts[i], None)):
            target = getattr(target, parts[i])
            i += 1
        if target is cfg:
            raise ConfigError(f"--set {item!r}: unknown section {parts[0]!r} "
                              f"(known: {', '.join(f.name for f in dataclasses.fields(cfg))})")
        field_name, rest = parts[i], parts[i + 1:]
        if rest:
            current = getattr(target, field_name, None)
            if not isinstance(current, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:i + 1])} is not a mapping")
            merged = dict(current)
            node = merged
            for part in rest[:-1]:
                node = node.setdefault(part, {})
            node[rest[-1]] = value
            value = merged
        _apply(target, {field_name: value}, ".".join(parts[:i]))


def validate(cfg):
    """Range checks that types alone do not catch: the game, each field's
    range (the first bad one named), then the rules between fields."""
    import engine
    try:
        engine.load_game(cfg.game.name, **cfg.game.params)
    except ValueError as e:
        raise ConfigError(f"config game: {e}") from None
    checks = _train_checks(cfg) + _service_checks(cfg) + _prior_checks(cfg) + _stage_checks(cfg) + _eval_checks(cfg)
    for name, ok in checks:
        if not ok:
            section, key = name.split(".")
            raise ConfigError(f"config {name}: bad value {getattr(getattr(cfg, section), key)!r}")
    _check_game_rules(cfg)
    _check_prior_rules(cfg)


# (key, ok) pairs: each field's range check, a section at a time, in the order validate reports them

def _train_checks(cfg):
    """The CFR loop's fields and the nets' sizes."""
    return [
        ("train.iterations", cfg.train.iterations >= 1),
        ("train.traversals", cfg.train.traversals >= 1),
        ("train.batch_size", cfg.train.batch_size >= 1),
        ("train.lr", cfg.train.lr > 0),
        ("train.adv_memory", cfg.train.adv_memory >= 1),
        ("train.strategy_memory", cfg.train.strategy_memory >= 1),
        ("train.adv_steps", cfg.train.adv_steps >= 0),
        ("train.strategy_steps", cfg.train.strategy_steps >= 0),
        ("train.strategy_every", cfg.train.strategy_every >= 0),
        ("train.adv_lr_after", cfg.train.adv_lr_after >= 0),
        ("train.average", cfg.train.average in ("network", "sdcfr")),
        ("train.device", cfg.train.device in ("auto", "cpu") or cfg.train.device.startswith("cuda")),
        ("network.hidden", _widths(cfg.network.hidden)),
        ("network.critic_hidden", _widths(cfg.network.critic_hidden)),
    ]


def _widths(widths):
    """Whether `widths` is a non-empty list of hidden layer widths, each an int >= 1."""
    return (isinstance(widths, list) and len(widths) >= 1
            and all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in widths))


def _service_checks(cfg):
    """The services: workers, batcher, jobs."""
    return [
        ("service.workers", cfg.service.workers >= 0),
        ("service.label_workers", cfg.service.label_workers >= 0),
        ("service.worker_threads", cfg.service.worker_threads >= 1),
        ("service.groups", cfg.service.groups >= 1),
        ("service.machines", cfg.service.machines >= 1),
        ("service.job_size", cfg.service.job_size >= 0),
        ("service.max_restarts", cfg.service.max_restarts >= 0),
        ("service.autocast", cfg.service.autocast in ("none", "bf16", "fp16")),
        ("service.batcher_transport", cfg.service.batcher_transport in ("ipc", "tcp")),
        ("service.adv_dtype", cfg.service.adv_dtype in ("float32", "float16")),
        ("service.selfplay_max_wait_us", 0 <= cfg.service.selfplay_max_wait_us <= 1_000_000),
    ]


def _prior_checks(cfg):
    """The warm start, the value net and expert iteration."""
    return [
        ("train.warm_start_games", cfg.train.warm_start_games >= 0),
        ("train.warm_start_weight", cfg.train.warm_start_weight > 0),
        ("train.warm_start_advantage", cfg.train.warm_start_advantage > 0),
        ("train.warm_start_steps", cfg.train.warm_start_steps >= 0),
        ("train.warm_start_share", 0.0 <= cfg.train.warm_start_share < 1.0),
        ("train.adv_prior_share", cfg.train.adv_prior_share == -1.0 or 0.0 <= cfg.train.adv_prior_share < 1.0),
        ("train.value_steps", cfg.train.value_steps >= 0),
        ("train.value_budget_s", math.isfinite(cfg.train.value_budget_s) and cfg.train.value_budget_s >= 0),
        ("train.value_labels", cfg.train.value_labels in ("outcome", "search", "both")),
        ("network.value_hidden", _widths(cfg.network.value_hidden)),
        ("train.warm_start_worlds", cfg.train.warm_start_worlds >= 0),
        ("train.exit_rounds", cfg.train.exit_rounds >= 0),
        ("train.exit_games", cfg.train.exit_games >= 1),
        ("train.exit_budget_s", math.isfinite(cfg.train.exit_budget_s) and cfg.train.exit_budget_s >= 0),
        ("train.exit_worlds", cfg.train.exit_worlds >= 1),
        ("train.exit_topk", cfg.train.exit_topk >= 0),
        ("train.warm_start_explore", 0.0 <= cfg.train.warm_start_explore < 1.0),
        ("train.warm_start_budget_s", math.isfinite(cfg.train.warm_start_budget_s) and cfg.train.warm_start_budget_s >= 0),
        ("train.warm_start_pretrain_budget_s", math.isfinite(cfg.train.warm_start_pretrain_budget_s)
         and cfg.train.warm_start_pretrain_budget_s >= 0),
    ]


def _stage_checks(cfg):
    """The time limit and the self-play stage."""
    return [
        ("train.time_limit_s", math.isfinite(cfg.train.time_limit_s) and cfg.train.time_limit_s >= 0),
        ("train.selfplay_budget_s", math.isfinite(cfg.train.selfplay_budget_s) and cfg.train.selfplay_budget_s >= 0),
        ("train.selfplay_lr", math.isfinite(cfg.train.selfplay_lr) and cfg.train.selfplay_lr > 0),
        ("train.selfplay_lr_hold_s", cfg.train.selfplay_lr_hold_s == -1
         or (math.isfinite(cfg.train.selfplay_lr_hold_s) and cfg.train.selfplay_lr_hold_s >= 0)),
        ("train.selfplay_games", cfg.train.selfplay_games >= 1),
        ("train.selfplay_threads", cfg.train.selfplay_threads >= 0),
        ("train.selfplay_checkpoint_s", math.isfinite(cfg.train.selfplay_checkpoint_s)
         and cfg.train.selfplay_checkpoint_s >= 0),
        ("train.selfplay_epochs", cfg.train.selfplay_epochs >= 1),
        ("train.selfplay_critic_epochs", 0 <= cfg.train.selfplay_critic_epochs <= cfg.train.selfplay_epochs),
        ("train.selfplay_entropy", math.isfinite(cfg.train.selfplay_entropy) and cfg.train.selfplay_entropy >= 0),
        ("train.selfplay_lam", 0 <= cfg.train.selfplay_lam <= 1),
        ("train.selfplay_autocast", cfg.train.selfplay_autocast in ("auto", "none", "bf16")),
    ]


def _eval_checks(cfg):
    """Evaluation, checkpoints and the traversal."""
    return [
        ("eval.every", cfg.eval.every >= 0),
        ("eval.lc_games", cfg.eval.lc_games >= 0),
        ("eval.opponents", all(o in ("random", "heuristic", "cautious") for o in cfg.eval.opponents)),
        ("eval.policies", len(cfg.eval.policies) >= 1 and all(_policy_kind_ok(k) for k in cfg.eval.policies)),
        ("eval.exploiter_games", cfg.eval.exploiter_games >= 0),
        ("eval.exploiter_every", cfg.eval.exploiter_every >= 0),
        ("eval.exploiter_worlds", cfg.eval.exploiter_worlds >= 1),
        ("run.checkpoint_every", cfg.run.checkpoint_every >= 0),
        ("traversal.algorithm", cfg.traversal.algorithm in ("external", "outcome")),
        ("traversal.fallback", cfg.traversal.fallback in ("argmax", "uniform")),
        ("traversal.epsilon", 0.0 <= cfg.traversal.epsilon <= 1.0),
    ]


def _check_game_rules(cfg):
    """Rules between fields: what the game allows, the warm-start budgets, the value cutoff."""
    if cfg.train.average == "sdcfr" and cfg.game.name not in ("kuhn_poker", "leduc_poker"):
        raise ConfigError(f"config train.average: sdcfr needs a game whose info states can be listed "
                          f"(kuhn_poker, leduc_poker), not {cfg.game.name}; use network")
    if cfg.train.warm_start_games > 0 and cfg.game.name != "lost_cities":
        raise ConfigError(f"config train.warm_start_games: {cfg.game.name} has no rule-based policy to "
                          "warm-start from (lost_cities has)")
    for key in ("warm_start_budget_s", "warm_start_pretrain_budget_s"):
        if getattr(cfg.train, key) > 0 and cfg.train.warm_start_games == 0:
            raise ConfigError(f"config train.{key}: a warm-start budget needs train.warm_start_games > 0 "
                              "(the most games to label)")
    cutoff = cfg.traversal.value_cutoff
    if not (isinstance(cutoff, float) and 0.0 <= cutoff <= 1.0):
        raise ConfigError(f"config traversal.value_cutoff: must be a number in [0, 1] (0: playouts, 1: the value "
                          f"net, between: their mix), got {cutoff!r}")
    if cutoff > 0 and (cfg.train.value_steps == 0 or cfg.train.warm_start_games == 0):
        raise ConfigError(f"config traversal.value_cutoff: {cutoff:g} values cutoffs with the value net, which "
                          f"needs train.value_steps > 0 (got {cfg.train.value_steps}) and warm-start games to "
                          f"train on (train.warm_start_games > 0, got {cfg.train.warm_start_games})")
    if cfg.train.value_steps > 0 and cfg.train.value_labels == "search" and cfg.train.warm_start_worlds == 0:
        raise ConfigError("config train.value_labels: search learns the lookahead teacher's values, which needs "
                          "train.warm_start_worlds > 0 (the heuristic teacher values no moves); or set "
                          "train.value_labels to outcome or both")


def _check_prior_rules(cfg):
    """Rules between fields: what expert iteration, a lasting prior, the value net and the self-play stage need."""
    if cfg.train.exit_rounds > 0 and (cfg.train.warm_start_games == 0 or cfg.train.warm_start_share == 0):
        raise ConfigError(f"config train.exit_rounds: expert iteration pools its labels with the warm start's in a "
                          f"lasting prior; it needs train.warm_start_games > 0 and train.warm_start_share > 0 "
                          f"(got {cfg.train.warm_start_games} and {cfg.train.warm_start_share:g})")
    if cfg.train.adv_prior_share != -1.0 and (cfg.train.warm_start_games == 0 or cfg.train.warm_start_share == 0):
        raise ConfigError(f"config train.adv_prior_share: {cfg.train.adv_prior_share:g} sets the share of a lasting "
                          f"prior in the advantage batches; it needs train.warm_start_games > 0 and "
                          f"train.warm_start_share > 0 (got {cfg.train.warm_start_games} and "
                          f"{cfg.train.warm_start_share:g}), or -1")
    if cfg.train.value_steps > 0 and cfg.train.warm_start_games == 0:
        raise ConfigError("config train.value_steps: the value net trains on the warm start's games; "
                          "it needs train.warm_start_games > 0")
    if cfg.train.selfplay_budget_s > 0 and cfg.game.name != "lost_cities":
        raise ConfigError(f"config train.selfplay_budget_s: self-play fine-tuning plays lost_cities deals; "
                          f"{cfg.game.name} is not supported")
    if 0 < cfg.train.time_limit_s <= cfg.train.selfplay_budget_s:
        raise ConfigError(f"config train.selfplay_budget_s: {cfg.train.selfplay_budget_s:g} s of self-play leaves "
                          f"nothing of train.time_limit_s ({cfg.train.time_limit_s:g} s) for the warm start and CFR")
    if cfg.game.name != "lost_cities" and any(str(k).startswith("symmetric") for k in cfg.eval.policies):
        raise ConfigError(f"config eval.policies: the symmetric read-out renames Lost Cities' colours; "
                          f"{cfg.game.name} has none")
    if cfg.train.augment_colours and cfg.game.name != "lost_cities":
        raise ConfigError(f"config train.augment_colours: colour renaming is a lost_cities symmetry; "
                          f"{cfg.game.name} has none")
    if cfg.service.workers == 0 and not cfg.service.batcher:
        raise ConfigError("config service.workers: 0 local workers needs service.batcher (workers started elsewhere)")


def config_to_dict(cfg):
    return dataclasses.asdict(cfg)


def _policy_kind_ok(kind):
    from agents.policy import parse_kind
    try:
        parse_kind(str(kind))
        return True
    except ValueError:
        return False
