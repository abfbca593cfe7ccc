"""Players built by name or from a picklable description, above the
matches (agents.matches) and the things they build: the exploiter
(agents.exploiter), the search player (agents.searcher) and checkpoint
read-outs (agents.checkpoint, agents.policy).

agents.matches plays bots it knows by name (engine.bots: "random",
"heuristic", "cautious"), players with `.step(state)` and factories
`f(game, agent, seed, worlds) -> bot`; its parallel matches rebuild the
agent in each worker process with a builder it is given. This module
supplies both for the rest of the package: `exploiter`, the factory that
the opponent name "exploiter" stands for (`opponent_of`), and
`agent_from_spec`, the builder for parallel_match(..., build=...).
"""
from agents.matches import BOTS, make_bot
from agents.policy import Policy, policy_from_checkpoint

OPPONENTS = BOTS + ("exploiter",)


def exploiter(game, agent, seed=0, worlds=16):
    """The local best response to `agent` (agents.exploiter), a factory as
    agents.matches plays it: a match builds it from the agent it plays, and
    a parallel match's worker from that process's own agent."""
    from agents.exploiter import LocalBestResponse
    if not isinstance(agent, Policy):
        raise ValueError("the exploiter searches against a policy's probabilities; "
                         f"{getattr(agent, 'name', type(agent).__name__)} has none")
    return LocalBestResponse(game, agent, worlds=worlds, seed=seed)


def opponent_of(kind):
    """What agents.matches plays for the opponent `kind`: the `exploiter`
    factory for "exploiter"; a bot's name, a player or a factory as it is."""
    return exploiter if isinstance(kind, str) and kind == "exploiter" else kind


def make_opponent(kind, game, agent, seed=0, worlds=16):
    """An opponent bot by name: "random", "heuristic", "cautious" (a second
    rule-based bot that training never uses, engine.bots.CautiousBot), or
    "exploiter" (a local best response to `agent`, agents.exploiter). Any
    other object with `.step(state)` is used as it is."""
    return make_bot(opponent_of(kind), game, agent, seed=seed, worlds=worlds)


def agent_from_spec(spec):
    """(game, policy or None, agent) from a picklable description, so that
    worker processes can rebuild the agent:
        {"checkpoint": PATH, "policy": KIND, "seed": S, "search": SETTINGS or None}
            a checkpoint's read-out (agents.policy), or the search player
            with it as its blueprint (SETTINGS: SearchPlayer's keywords);
        {"game": {"name": ..., **load_game keywords}, "search": SETTINGS}
            the search player without a net."""
    settings = spec.get("search")
    if "checkpoint" in spec:
        from agents.checkpoint import game_of, load_checkpoint
        ckpt = load_checkpoint(spec["checkpoint"])
        game = game_of(ckpt)
        policy = policy_from_checkpoint(ckpt, spec["policy"], seed=spec.get("seed", 0))
        if settings is None:
            return game, policy, policy
        from agents.searcher import SearchPlayer
        return game, policy, SearchPlayer(game, blueprint=policy, **settings)
    if "game" in spec and settings is not None:
        import engine
        from agents.searcher import SearchPlayer
        kwargs = dict(spec["game"])
        game = engine.load_game(kwargs.pop("name"), **kwargs)
        return game, None, SearchPlayer(game, **settings)
    raise ValueError(f"an agent spec names a checkpoint, or a game and search settings; got {spec!r}")
