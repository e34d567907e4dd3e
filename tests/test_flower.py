"""ldptut.flower (the optional extra 'flower'): the client Mod applies the book's privatizers as the engine does, with
the same random stream, and its reports follow the mechanism's law. Skipped when Flower is not installed."""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr")

from flwr.app import Context, Message, MessageType, Metadata, RecordDict  # noqa: E402
from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.compat.common import recorddict_compat as compat  # noqa: E402

from ldptut.accounting import Guarantee  # noqa: E402
from ldptut.fl import FixedRange, GlobalModelRange, LocalPerturbation  # noqa: E402
from ldptut.flower import PrivatizerMod, fit_config  # noqa: E402
from ldptut.mechanisms import TwoPoint  # noqa: E402

RECEIVED = [np.array([[0.1, -0.2, 0.3], [0.0, 0.05, -0.4]], dtype=np.float32), np.array([0.2, -0.1], dtype=np.float32)]
TRAINED = [a + np.float32(0.05) for a in RECEIVED]


def _engine_output(privatizer, mod: PrivatizerMod, *, round: int, client: int, send: str) -> np.ndarray:
    """What the round engine's privatizing step gives for this client: the same context, the same stream."""
    ctx = mod.context(round=round, client=client, received=RECEIVED, num_examples=10)
    vec = torch.cat([torch.as_tensor(a).reshape(-1) for a in TRAINED])
    payload = vec - ctx.global_vector if send == "updates" else vec
    out = privatizer(payload[None].clone(), context=ctx)[0]
    return (ctx.global_vector + out if send == "updates" else out).numpy()


@pytest.mark.parametrize("send, rule", [("weights", FixedRange(0.0, 0.5)), ("updates", FixedRange(0.0, 0.5)),
                                        ("weights", GlobalModelRange())])
def test_the_mod_reports_what_the_engine_would_with_the_same_stream(send, rule):
    priv = LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=rule)
    mod = PrivatizerMod(priv, seed=7, send=send)
    arrays, metrics = mod.privatize(TRAINED, RECEIVED, round=3, client=5, num_examples=10)
    got = np.concatenate([a.reshape(-1) for a in arrays])
    assert [a.shape for a in arrays] == [a.shape for a in RECEIVED] and all(a.dtype == np.float32 for a in arrays)
    np.testing.assert_array_equal(got, _engine_output(priv, mod, round=3, client=5, send=send))
    # the stream is the client's and the round's: another client or round reports otherwise
    other, _ = mod.privatize(TRAINED, RECEIVED, round=4, client=5, num_examples=10)
    assert not all(np.array_equal(a, b) for a, b in zip(arrays, other))
    assert metrics == {"epsilon_per_coordinate": 1.0, "epsilon_round": 8.0, "delta_round": 0.0,
                       "epsilon_unit": str(Guarantee(1.0).compose(d=8).unit)}


def test_the_mods_reports_follow_the_two_point_law():
    """Over 4,000 rounds the reports of one weight take the two values c ± r a with the closed-form probability
    (binomial, 5 standard errors) and are unbiased for the clipped weight."""
    eps, r = 1.0, 0.5
    priv = LocalPerturbation(mechanism=TwoPoint, epsilon=eps, range=FixedRange(0.0, r))
    mod = PrivatizerMod(priv, seed=1)
    n = 4000
    reports = np.stack([np.concatenate([a.reshape(-1) for a in mod.privatize(TRAINED, RECEIVED, round=t, client=0,
                                                                              num_examples=1)[0]]) for t in range(n)])
    mech = TwoPoint(epsilon=eps, radius=r)
    x = torch.as_tensor(np.concatenate([a.reshape(-1) for a in TRAINED]), dtype=torch.float64)
    values, probs = mech.output_distribution(x)
    assert np.allclose(np.unique(np.round(reports, 5)), np.unique(np.round(values.numpy(), 5)), atol=1e-5)
    upper = (reports > 0).mean(axis=0)
    p = probs[:, 1].numpy()
    assert np.all(np.abs(upper - p) <= 5 * np.sqrt(p * (1 - p) / n))
    se = np.sqrt(mech.variance(x).numpy() / n)
    assert np.all(np.abs(reports.mean(axis=0) - mech.clip(x).numpy()) <= 5 * se)


def _train_message(round: int | None) -> Message:
    config = {} if round is None else fit_config(round)
    content = compat.fitins_to_recorddict(FitIns(ndarrays_to_parameters(RECEIVED), config), keep_input=True)
    meta = Metadata(run_id=1, message_id="m1", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
                    created_at=0.0, ttl=60.0, message_type=MessageType.TRAIN)
    return Message(content=content, metadata=meta)


def _client_app(msg: Message, ctxt: Context) -> Message:
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(TRAINED), 10, {"loss": 0.5})
    return Message(content=compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)


def _context(node_config: dict) -> Context:
    return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})


def test_the_mod_rewrites_a_fit_reply_and_adds_the_epsilon_it_spent():
    priv = LocalPerturbation(mechanism=TwoPoint, epsilon=0.5, range=FixedRange(0.0, 0.5))
    mod = PrivatizerMod(priv, seed=3)
    out = mod(_train_message(2), _context({"partition-id": 4}), _client_app)
    res = compat.recorddict_to_fitres(out.content, keep_input=True)
    got = np.concatenate([a.reshape(-1) for a in parameters_to_ndarrays(res.parameters)])
    np.testing.assert_array_equal(got, _engine_output(priv, mod, round=2, client=4, send="weights"))
    assert res.metrics["loss"] == 0.5 and math.isclose(res.metrics["epsilon_round"], 4.0)
    assert res.metrics["client_id"] == 4
    assert res.num_examples == 10


def test_the_mod_names_what_is_missing():
    mod = PrivatizerMod(LocalPerturbation(mechanism=TwoPoint, epsilon=1.0), seed=0)
    with pytest.raises(ValueError, match="fit_config"):
        mod(_train_message(None), _context({"partition-id": 0}), _client_app)
    with pytest.raises(ValueError, match="partition-id"):
        mod(_train_message(1), _context({}), _client_app)
    with pytest.raises(ValueError, match="send"):
        PrivatizerMod(LocalPerturbation(mechanism=TwoPoint, epsilon=1.0), seed=0, send="gradients")
    with pytest.raises(ValueError, match="seed"):
        PrivatizerMod(LocalPerturbation(mechanism=TwoPoint, epsilon=1.0), seed=-1)
    with pytest.raises(ValueError, match="shapes"):
        mod.privatize(TRAINED[:1], RECEIVED, round=1, client=0, num_examples=1)


# ------------------------------------------------------------------------------ the server rules as a strategy
def _results(vectors: dict[int, np.ndarray]) -> list:
    """Fit results as a strategy receives them: (proxy, FitRes) with each client's id in its metrics (unordered)."""
    out = []
    for cid in sorted(vectors, reverse=True):
        v = vectors[cid]
        arrays = [v[:6].reshape(2, 3).astype(np.float32), v[6:].astype(np.float32)]
        out.append((None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 10 + cid, {"client_id": cid})))
    return out


@pytest.mark.parametrize("which, send", [("smoothed", "weights"), ("weighted", "weights"), ("weighted", "updates"),
                                         ("selection", "weights"), ("selection", "updates"), ("sign", "updates")])
def test_the_strategy_aggregates_as_the_engines_rule_on_fixed_inputs(which, send):
    from ldptut.fl import RoundContext, SignOf, SmoothedMean, mean_aggregator
    from ldptut.flower import ServerRule
    from ldptut.papers.personalized_ldp_fl import ProbabilitySelection, WeightedBySigma
    from ldptut.rng import round_generator

    sigmas = [1.0, 2.0, 4.0, 8.0]
    rule = {"smoothed": SmoothedMean(0.3), "weighted": WeightedBySigma(sigmas),
            "selection": ProbabilitySelection(sigmas, reading="max/client"),
            "sign": SignOf(mean_aggregator, step=0.01)}[which]
    strategy = ServerRule(rule, seed=5, send=send, initial_parameters=ndarrays_to_parameters(RECEIVED))
    strategy._current = RECEIVED
    rng = np.random.default_rng(0)
    vectors = {cid: rng.normal(size=8) for cid in (0, 2, 3)}
    params, metrics = strategy.aggregate_fit(4, _results(vectors), [])
    got = np.concatenate([a.reshape(-1) for a in parameters_to_ndarrays(params)])
    # the engine's call: rows by client id, the round's global model, the server's stream of round 4
    glob = torch.cat([torch.as_tensor(a).reshape(-1) for a in RECEIVED])
    payloads = torch.stack([torch.as_tensor(vectors[c], dtype=torch.float32) for c in (0, 2, 3)])
    if send == "updates":
        payloads = payloads - glob
    ctx = RoundContext(round=4, client_ids=torch.tensor([0, 2, 3]), layout=None, global_vector=glob, generators=[],
                       send=send, num_samples=torch.tensor([10.0, 12.0, 13.0]),
                       server_generator=round_generator(5, 4, "server"), seed=5)
    vec, want_metrics = rule(payloads, context=ctx)
    want = (glob + vec if send == "updates" else vec).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=0)
    assert metrics == want_metrics


def test_the_strategy_names_a_missing_client_id():
    from ldptut.fl import mean_aggregator
    from ldptut.flower import ServerRule

    strategy = ServerRule(mean_aggregator, seed=0)
    strategy._current = RECEIVED
    bad = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(TRAINED), 10, {}))]
    with pytest.raises(ValueError, match="client_id"):
        strategy.aggregate_fit(1, bad, [])
    with pytest.raises(ValueError, match="send"):
        ServerRule(mean_aggregator, seed=0, send="both")


# ------------------------------------------------------------------------------ correlated pairs through the fit config
def test_pairs_are_assigned_as_the_engine_pairs_its_rows_each_pair_with_its_own_seed():
    from ldptut.fl import PairedPerturbation, RoundContext
    from ldptut.flower import assign_pairs

    for n in (1, 2, 5, 8):
        roles = assign_pairs(n, seed=3, round=7)
        ctx = RoundContext(round=7, client_ids=torch.arange(n), layout=None, global_vector=torch.zeros(1),
                           generators=[], send="weights", num_samples=torch.ones(n), seed=3)
        leaders, followers, odd = PairedPerturbation.pairs(ctx)
        assert [roles[i][0] for i in leaders.tolist()] == ["leader"] * (n // 2)
        assert [roles[i][0] for i in followers.tolist()] == ["follower"] * (n // 2)
        assert (odd is None) == (n % 2 == 0) and (odd is None or roles[odd][0] == "alone")
        seeds = [roles[i][1] for i in leaders.tolist()]
        assert seeds == [roles[i][1] for i in followers.tolist()] and len(set(seeds)) == len(seeds)
    assert assign_pairs(6, seed=3, round=7) == assign_pairs(6, seed=3, round=7) != assign_pairs(6, seed=3, round=8)


class _Proxy(flwr.server.client_proxy.ClientProxy):
    """A client as the strategy sees it: its node id, and the id its PrivatizerMod reports when asked."""

    def __init__(self, cid: str, client_id=None):
        super().__init__(cid)
        self.client_id, self.asked = client_id, 0

    def get_properties(self, ins, timeout, group_id):
        self.asked += 1
        props = {} if self.client_id is None else {"client_id": self.client_id}
        return flwr.common.GetPropertiesRes(Status(Code.OK, ""), props)

    def get_parameters(self, *a, **k): ...
    def fit(self, *a, **k): ...
    def evaluate(self, *a, **k): ...
    def reconnect(self, *a, **k): ...


def test_the_paired_strategy_sends_each_client_its_role_and_its_pairs_seed():
    from flwr.server.client_manager import SimpleClientManager
    from ldptut.flower import PairedRule, assign_pairs

    manager = SimpleClientManager()
    proxies = [_Proxy(cid, client_id) for cid, client_id in (("912", 0), ("3", 4), ("40", 1), ("7", 3), ("55", 2))]
    for proxy in proxies:
        manager.register(proxy)
    strategy = PairedRule("mean", seed=2, on_fit_config_fn=fit_config, initial_parameters=None)
    pairs = strategy.configure_fit(4, ndarrays_to_parameters(RECEIVED), manager)
    assert [p.cid for p, _ in pairs] == ["912", "40", "55", "7", "3"]        # by the ids the clients report
    assert [(ins.config["pair_role"], ins.config["pair_seed"]) for _, ins in pairs] == assign_pairs(5, seed=2, round=4)
    assert all(ins.config["server_round"] == 4 for _, ins in pairs)
    assert len({id(ins.config) for _, ins in pairs}) == 5                    # one config per client
    strategy.configure_fit(5, ndarrays_to_parameters(RECEIVED), manager)
    assert all(p.asked == 1 for p in proxies)                                # asked once
    silent = SimpleClientManager()
    silent.register(_Proxy("1")), silent.register(_Proxy("2"))   # FedAvg waits for 2 clients at least
    with pytest.raises(ValueError, match="PrivatizerMod"):
        PairedRule(seed=0, on_fit_config_fn=fit_config).configure_fit(1, ndarrays_to_parameters(RECEIVED), silent)


def test_the_mod_answers_a_properties_query_with_the_client_id():
    from flwr.common import GetPropertiesIns, GetPropertiesRes
    from flwr.common.constant import MessageTypeLegacy

    mod = PrivatizerMod(LocalPerturbation(mechanism=TwoPoint, epsilon=1.0), seed=0)
    meta = Metadata(run_id=1, message_id="m2", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
                    created_at=0.0, ttl=60.0, message_type=MessageTypeLegacy.GET_PROPERTIES)
    msg = Message(content=compat.getpropertiesins_to_recorddict(GetPropertiesIns({})), metadata=meta)

    def app(m, ctxt):
        res = GetPropertiesRes(Status(Code.OK, ""), {"other": 1})
        return Message(content=compat.getpropertiesres_to_recorddict(res), reply_to=m)

    out = mod(msg, _context({"partition-id": 6}), app)
    assert compat.recorddict_to_getpropertiesres(out.content).properties == {"other": 1, "client_id": 6}


def _pair_reports(priv, n_rows: int, *, round: int, send: str = "weights"):
    """A leader's and a follower's reports drawn apart by two Mods (two machines), the pair's seed from the server."""
    from ldptut.flower import assign_pairs

    x_l = np.tile(np.array([-1.0, -0.4, 0.0, 0.3, 0.9], dtype=np.float32), (n_rows, 1))
    x_f = np.tile(np.array([1.0, -0.5, 0.0, 0.31, -0.8], dtype=np.float32), (n_rows, 1))
    received = [np.zeros_like(x_l)]
    (role_a, seed_a), (role_b, seed_b) = assign_pairs(2, seed=9, round=round)
    mod = PrivatizerMod(priv, seed=9, send=send)
    by_role = {}
    for cid, role, seed in ((0, role_a, seed_a), (1, role_b, seed_b)):
        arrays, metrics = mod.privatize([x_l if role == "leader" else x_f], received, round=round, client=cid,
                                        num_examples=1, pair=(role, seed))
        by_role[role] = (arrays[0], metrics)
    return x_l[0], x_f[0], by_role


def test_a_pair_drawn_by_two_mods_has_the_exact_joint_law_of_the_correlated_mechanism():
    from ldptut.fl import PairedPerturbation
    from ldptut.mechanisms import CorrelatedTwoPoint

    priv = PairedPerturbation(epsilon=1.0, range=FixedRange(0.0, 1.0), num_rand=5)
    n = 40_000
    x_l, x_f, by_role = _pair_reports(priv, n, round=3)
    ol, of = by_role["leader"][0] > 0, by_role["follower"][0] > 0
    _, probs = CorrelatedTwoPoint(epsilon=1.0, num_rand=5).joint_distribution(torch.as_tensor(x_l, dtype=torch.float64),
                                                                             torch.as_tensor(x_f, dtype=torch.float64))
    for i, a in enumerate((~ol, ol)):
        for j, b in enumerate((~of, of)):
            p = probs[:, i, j].numpy()
            assert np.all(np.abs((a & b).mean(axis=0) - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1.0 / n), (i, j)
    assert by_role["leader"][1]["epsilon_per_coordinate"] == 1.0


def test_the_mod_refuses_a_pair_privatizer_without_a_pair_and_a_pair_without_one():
    from ldptut.fl import PairedPerturbation

    paired = PrivatizerMod(PairedPerturbation(epsilon=1.0), seed=0)
    with pytest.raises(ValueError, match="PairedRule"):
        paired.privatize(TRAINED, RECEIVED, round=1, client=0, num_examples=1)
    plain = PrivatizerMod(LocalPerturbation(mechanism=TwoPoint, epsilon=1.0), seed=0)
    with pytest.raises(ValueError, match="does not draw correlated pairs"):
        plain.privatize(TRAINED, RECEIVED, round=1, client=0, num_examples=1, pair=("leader", 5))
    with pytest.raises(ValueError, match="role"):
        paired.privatize(TRAINED, RECEIVED, round=1, client=0, num_examples=1, pair=("partner", 5))


def test_the_mod_reads_the_pair_from_the_fit_config_and_reports_the_role():
    from ldptut.fl import PairedPerturbation

    mod = PrivatizerMod(PairedPerturbation(epsilon=1.0, range=FixedRange(0.0, 0.5)), seed=0)
    msg = _train_message(2)
    fit_ins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    fit_ins.config.update({"pair_role": "follower", "pair_seed": 123})
    msg.content = compat.fitins_to_recorddict(fit_ins, keep_input=True)
    out = mod(msg, _context({"partition-id": 1}), _client_app)
    res = compat.recorddict_to_fitres(out.content, keep_input=True)
    want, _ = mod.privatize(TRAINED, RECEIVED, round=2, client=1, num_examples=10, pair=("follower", 123))
    for a, b in zip(parameters_to_ndarrays(res.parameters), want):
        np.testing.assert_array_equal(a, b)
    assert res.metrics["pair_role"] == "follower" and res.metrics["client_id"] == 1


# ------------------------------------------------------------------------------ a Flower simulation beside the engine
def _tiny_setting(privatizer, seed: int, rounds: int = 3):
    from ldptut.fl import FLConfig, Run
    from ldptut.training import LocalSGD, OptimizerSpec

    g = torch.Generator().manual_seed(0)
    x = torch.randn(900, 10, generator=g)
    y = (x @ torch.randn(10, 3, generator=g)).argmax(1)
    parts = list(torch.randperm(600, generator=torch.Generator().manual_seed(seed)).chunk(6))
    config = FLConfig(rounds=rounds, trainer=LocalSGD(batch_size=20, optimizer=OptimizerSpec(lr=0.5)), progress=False)
    run = Run(partition=parts, seed=seed, privatizer=privatizer)
    torch.manual_seed(seed)
    return config, run, dict(model=torch.nn.Linear(10, 3), x_train=x[:600], y_train=y[:600], x_test=x[600:],
                             y_test=y[600:])


def _one_thread(fn, *a, **k):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # as each Flower client trains (one thread per Ray actor)
    try:
        return fn(*a, **k)
    finally:
        torch.set_num_threads(threads)


def test_a_flower_simulation_of_a_run_reproduces_the_engines_run_exactly():
    """The same run (its streams: batches, privatizing, server) in Flower's Ray simulation and in the engine: the
    same global model after every round, bit for bit, and the same ε per model per round and over the rounds."""
    from ldptut import fl, flower

    priv = LocalPerturbation(mechanism=TwoPoint, epsilon=2.0, range=FixedRange(0.0, 1.0))
    config, run, inputs = _tiny_setting(priv, seed=4)
    environ, path = dict(os.environ), list(sys.path)
    fed = flower.simulate(config, run, **inputs)
    # Ray's and Flower's settings for their workers do not stay in this process (a later subprocess would import
    # from the PYTHONPATH they set)
    assert dict(os.environ) == environ and sys.path == path
    eng = _one_thread(fl.simulate, config, [run], **inputs)
    assert torch.equal(fed.weights, eng.weights)
    cols = ["round", "accuracy", "loss", "epsilon_round", "epsilon_total"]
    np.testing.assert_array_equal(fed.history[cols].to_numpy(), eng.history[cols].to_numpy())
    assert fed.history["seconds"].gt(0).all() and len(fed.history) == config.rounds


def test_correlated_pairs_in_flower_agree_with_the_engines_within_the_seed_spread():
    """Pairs drawn apart (Flower: each client its own report from its pair's seed) and batched (the engine) have one
    law, not the same numbers: over seeds the final accuracies agree within the spread (3 standard errors of the
    difference of the means, plus one point), and the two are not the same draws."""
    from ldptut import fl, flower
    from ldptut.fl import PairedPerturbation

    priv = PairedPerturbation(epsilon=1.0, range=FixedRange(0.0, 1.0), num_rand=5)
    fed, eng, same = [], [], []
    for seed in (0, 1, 2):
        config, run, inputs = _tiny_setting(priv, seed=seed, rounds=4)
        f = flower.simulate(config, run, **inputs)
        e = _one_thread(fl.simulate, config, [run], **inputs)
        fed.append(f.final_accuracy), eng.append(e.final_accuracy), same.append(torch.equal(f.weights, e.weights))
    # the federation is reproducible: the pairs are formed over the clients' ids, not Flower's random node ids
    again = flower.simulate(config, run, **inputs)
    assert torch.equal(again.weights, f.weights)
    fed, eng = np.array(fed), np.array(eng)
    se = math.sqrt(fed.var(ddof=1) / len(fed) + eng.var(ddof=1) / len(eng))
    assert abs(fed.mean() - eng.mean()) <= 3 * se + 0.01, (fed, eng)
    assert not any(same)
    assert fed.mean() > 0.5   # the task is learnt at this ε (a constant classifier scores about 1/3)


def test_the_flower_simulation_names_what_it_cannot_do():
    from ldptut import flower
    from ldptut.fl import FLConfig

    config, run, inputs = _tiny_setting(None, seed=0)
    with pytest.raises(ValueError, match="client_fraction"):
        flower.simulate(FLConfig(rounds=1, client_fraction=0.5), run, **inputs)
    with pytest.raises(ValueError, match="device"):
        flower.simulate(FLConfig(rounds=1, device="cuda"), run, **inputs)
    bn = torch.nn.Sequential(torch.nn.Linear(10, 3), torch.nn.BatchNorm1d(3))
    with pytest.raises(ValueError, match="buffers"):
        flower.simulate(config, run, **{**inputs, "model": bn})
