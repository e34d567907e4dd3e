"""Benchmark (not a test): what one run of each LDP-FL paper setting costs on this machine, measured in one run.

For each of LDP-FL's settings (Sun et al. 2021, Section 5: MNIST cnn2 n = 100, FMNIST cnn2 n = 200,
CIFAR-10 small VGG n = 500), one FedAvg round with the two-point mechanism is run on the first
``--clients`` clients of the paper's IID partition (each with its full shard: 60,000/n or 50,000/n
samples), timed (best of ``--repeats``), and extrapolated linearly to all n clients and the paper's
number of rounds. Clients are trained one after the other (the sequential path, which
``run_fedavg(vectorize="auto")`` takes for convolutions on CPU), so the cost of a round is the sum of
the clients' costs: the linear extrapolation is what the simulator would spend, apart from one test
evaluation per round (10,000 images, timed separately and added).

Prints a table of seconds and the ratio to the MNIST setting. Usage:
    python benchmarks/bench_paper_cost.py [--clients 10] [--repeats 2] [--batch 32]
"""
from __future__ import annotations

import argparse
import platform

import torch

from bench_fl import best_of  # same folder: the scripts are run as python benchmarks/<name>.py
from ldptut import fl, models
from ldptut.data import load_dataset
from ldptut.mechanisms import TwoPoint
from ldptut.partition import iid

# (dataset, model, clients n, rounds, learning rate, range rule): LDP-FL Section 5.
SETTINGS = [
    ("mnist", "cnn2", 100, 10, 0.03, fl.FixedRange(0.0, 0.075)),
    ("fashion_mnist", "cnn2", 200, 10, 0.03, fl.FixedRange(0.0, 0.015)),
    ("cifar10", "small_vgg", 500, 15, 0.015, fl.GlobalModelRange()),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=10, help="clients actually trained per setting")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}")
    print(f"one round = {args.clients} clients timed (best of {args.repeats}), extrapolated to n; batch {args.batch}, "
          "1 local epoch, two-point at eps = 1 per weight per round")
    header = f"{'setting':<40}{'d':>11}{'s/client':>10}{'s/eval':>8}{'s/round':>9}{'h/run':>7}{'ratio':>7}"
    print(header)
    base = None
    for name, model_name, n, rounds, lr, rule in SETTINGS:
        ds = load_dataset(name)
        parts = iid(ds.y_train, n, seed=0)[: args.clients]
        model = models.build_model(model_name, input_shape=ds.input_shape, num_classes=ds.num_classes, seed=0)
        priv = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=1.0, range=rule)

        def one_round():
            fl.run_fedavg(model, x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test[:1], y_test=ds.y_test[:1],
                          partition=parts, rounds=1, local_epochs=1, batch_size=args.batch, lr=lr,
                          send="weights", aggregator="mean", privatizer=priv, progress=False)

        one_round()  # warm-up
        per_client = best_of(one_round, args.repeats) / args.clients
        t_eval = best_of(lambda: fl.evaluate(model, ds.x_test, ds.y_test), args.repeats)
        per_round = per_client * n + t_eval
        base = base or per_round
        label = f"{name} {model_name} n={n} ({rounds} rounds)"
        print(f"{label:<40}{models.count_parameters(model):>11,}{per_client:>10.3f}{t_eval:>8.2f}{per_round:>9.1f}"
              f"{per_round * rounds / 3600:>7.2f}{per_round / base:>7.2f}")


if __name__ == "__main__":
    main()
