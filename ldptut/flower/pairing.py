"""CoQ-FL / CorBin-FL's correlated pairs in Flower: the server pairs the round's clients and sends each pair a seed."""
from __future__ import annotations

from typing import Any

from flwr.common import FitIns, GetPropertiesIns, Parameters

from ..fl.privatizers import pair_rows
from ..rng import derive_seed
from .mod import PAIR_ROLE, PAIR_SEED
from .strategy import CLIENT_ID, ServerRule


def assign_pairs(n: int, *, seed: int, round: int) -> list[tuple[str, int]]:
    """(role, the pair's seed) for each of the round's n clients, in the order given: paired as the engine pairs its
    rows (:func:`ldptut.fl.privatizers.pair_rows`), the first
    of each pair the leader, the second the follower, an odd client out "alone"; pair k's seed is
    ``derive_seed(seed, "round", round, "pair-seed", k)``, so the two clients of a pair draw the same shared index
    (:meth:`ldptut.mechanisms.CorrelatedTwoPoint.privatize_as`) and different pairs independent ones."""
    leaders, followers, _ = pair_rows(n, seed=seed, round=round)
    out: list[tuple[str, int]] = [("alone", 0)] * n
    for k, (a, b) in enumerate(zip(leaders.tolist(), followers.tolist())):
        s = derive_seed(seed, "round", round, "pair-seed", k)
        out[a], out[b] = ("leader", s), ("follower", s)
    return out


class PairedRule(ServerRule):
    """A :class:`~ldptut.flower.ServerRule` (mean by default) that also pairs the round's clients for correlated
    reports (CoQ-FL / CorBin-FL, Algorithm 1): each sampled client's fit config gains ``pair_role`` ("leader",
    "follower" or "alone") and ``pair_seed`` (:func:`assign_pairs` over the clients in the order of their ids, as the
    engine orders its rows: the same pairs as :class:`ldptut.fl.PairedPerturbation` forms), which
    :class:`~ldptut.flower.PrivatizerMod` hands to :class:`ldptut.fl.PairedPerturbation`.

    **The server chooses the seeds here, so it knows every pair's shared index K.** With K and the leader's report it
    sees at least what a colluding partner sees, which is not ε-LDP for the leader (the CoQ-FL chapter computes that
    loss; it grows to ∞ with NumRand); the federation reproduces the simulation's law, not a deployment's trust model.
    A deployment would need the two clients to agree on the seed without the server (an authenticated key agreement
    relayed by the server, as secure aggregation's pairwise masks are) -- and even then the server's view of both
    reports of a pair is not ε-LDP for either client (the chapter's joint-view finding): each client's guarantee covers
    its own report only."""

    def __init__(self, rule: Any = "mean", **kwargs: Any):
        super().__init__(rule, **kwargs)
        self._ids: dict[str, int] = {}   # node id -> the client's id, asked once per node

    def client_id(self, proxy: Any, server_round: int) -> int:
        """The client's id (what the engine numbers its clients by), asked once with a properties query, which
        :class:`~ldptut.flower.PrivatizerMod` answers from the node config. Flower's node ids are random in a
        simulation: ordering the clients by them would pair them differently in every run."""
        if proxy.cid not in self._ids:
            res = proxy.get_properties(GetPropertiesIns(config={}), timeout=None, group_id=server_round)
            if CLIENT_ID not in res.properties:
                raise ValueError(f"client {proxy.cid} does not report its {CLIENT_ID!r} property: put "
                                 "ldptut.flower.PrivatizerMod on the clients (it answers the query)")
            self._ids[proxy.cid] = int(res.properties[CLIENT_ID])
        return self._ids[proxy.cid]

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any) -> list:
        clients = super().configure_fit(server_round, parameters, client_manager)
        clients = sorted(clients, key=lambda c: self.client_id(c[0], server_round))
        roles = assign_pairs(len(clients), seed=self.seed, round=server_round)
        out = []
        for (proxy, ins), (role, pair_seed) in zip(clients, roles):
            config = dict(ins.config)   # FedAvg hands every client the same FitIns: one config per client here
            config.update({PAIR_ROLE: role, PAIR_SEED: int(pair_seed)})
            out.append((proxy, FitIns(ins.parameters, config)))
        return out

    def __repr__(self) -> str:
        return "Paired" + super().__repr__()
