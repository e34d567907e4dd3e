"""Benchmark (not a test): the time of a round in a Flower federation (Flower's Ray simulation engine) next to the
round engine, on the same run, measured in one run.

The Flower appendix's setting (the mechanism comparison's MNIST benchmark: its small CNN, d = 26,698; --clients
clients, --images training images split IID, 1 local epoch, batch 32), FedAvg without privacy and with the two-point
mechanism at ε = 4 per weight per round in the client's PrivatizerMod:

(a) the engine, one torch thread (as each Flower client; the two give the same global models);
(b) the engine at this process's torch threads;
(c) the Flower federation, --cpus Ray workers, one client per worker at a time, one torch thread each.

A round is timed from the clients' training to the test-set evaluation (Flower: between two evaluations on the
server); the first round is left out of the median (Flower's includes starting Ray and its workers, shown apart).
Every run's final global model is compared between (a) and (c) first. Needs the `flower` extra.

Usage: python benchmarks/bench_flower.py [--clients 10] [--images 3000] [--rounds 6] [--cpus 2]
"""
from __future__ import annotations

import argparse
import os

import flwr
import ray
import torch

from ldptut import data, fl, flower
from ldptut.papers import comparison as C
from ldptut.provenance import machine_summary


def median_round(res: fl.FLResult) -> float:
    return float(res.history.loc[res.history["round"] > 1, "seconds"].median())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (the first round is timed apart)")
    ds = data.load_mnist()
    threads = torch.get_num_threads()
    print(f"{machine_summary()}; {threads} torch threads; flwr {flwr.__version__}, ray {ray.__version__}; "
          f"{args.clients} clients x {args.images // args.clients} images, {args.rounds} rounds")
    print("| run | (a) engine, 1 thread s/round | (b) engine, "
          f"{threads} threads s/round | (c) Flower, {args.cpus} workers s/round | (c) round 1 s | (c)/(a) | (c)/(b) |")
    print("|---|---|---|---|---|---|---|")
    for method in ("fedavg", "two_point"):
        base = C.base_config("mnist", rounds=args.rounds, n_clients=args.clients).replace(n_train=args.images)
        cfg = base if method == "fedavg" else C.method_config(method, base=base, task="mnist", epsilon=4.0)
        config, run, inputs = cfg.engine_call(ds, progress=False)
        torch.set_num_threads(1)
        one = fl.simulate(config, [run], **inputs)
        torch.set_num_threads(threads)
        many = fl.simulate(config, [run], **inputs)
        fed = flower.simulate(config, run, **inputs, num_cpus=args.cpus)
        if not torch.equal(one.weights, fed.weights):
            raise SystemExit(f"{method}: the federation's final model differs from the engine's at one thread")
        a, b, c = median_round(one), median_round(many), median_round(fed)
        first = float(fed.history.loc[fed.history["round"] == 1, "seconds"].iloc[0])
        print(f"| {C.METHODS[method][0]} | {a:.3f} | {b:.3f} | {c:.3f} | {first:.1f} | {c / a:.2f} | {c / b:.2f} |")


if __name__ == "__main__":
    main()
