"""ldptut.flower (the optional extra 'flower'): the client Mod applies the book's privatizers as the engine does, with
the same random stream, and its reports follow the mechanism's law. Skipped when Flower is not installed."""
from __future__ import annotations

import math

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
