"""Benchmark (not a test): cost of simulating FL relative to centralised training, measured in one run.

(b) one FedAvg round on MNIST (100 IID clients, MLP 784-200-10, 1 local epoch, batch B) next to
    centralised training of the same model over the same 60,000 samples with the same batch size;
(c) the vectorised (torch.func vmap) client path next to the sequential torch.optim path;
(d) the sequential path for the CNN with image batches in channels-last memory layout (the default) next to
    the plain contiguous layout.
Prints a table of seconds and ratios. Usage: python benchmarks/bench_fl.py [--batch 32] [--repeats 3] [--device cpu|cuda|auto]
On CUDA the data sit on the GPU and every timed call ends with torch.cuda.synchronize(); (d) is CPU only.
"""
from __future__ import annotations

import argparse
import platform
import time

import torch

from ldptut import fl, models, training
from ldptut.data import load_dataset
from ldptut.devices import resolve_device
from ldptut.provenance import device_name
from ldptut.partition import iid


SYNC = lambda: None  # noqa: E731 - torch.cuda.synchronize on CUDA


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        SYNC()
        t0 = time.perf_counter()
        fn()
        SYNC()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--conv-clients", type=int, default=5,
                    help="clients for the vectorised-vs-sequential row with the CNN (cnn2); 0 skips it")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (CUDA when present)")
    args = ap.parse_args()
    global SYNC
    try:
        dev = resolve_device(args.device)
    except ValueError as e:
        ap.error(str(e))
    on_cuda = torch.device(dev).type == "cuda"
    if on_cuda:
        SYNC = torch.cuda.synchronize

    ds = load_dataset("mnist", device=dev)
    parts = iid(ds.y_train.shape[0], args.clients, seed=0)
    model = models.build_model(args.model, input_shape=ds.input_shape, num_classes=ds.num_classes, seed=0)
    common = dict(x_train=ds.x_train, y_train=ds.y_train, partition=parts, x_test=ds.x_test[:1],
                  y_test=ds.y_test[:1], rounds=1, local_epochs=1, batch_size=args.batch, lr=0.05, progress=False,
                  device=dev)
    used = torch.cat(parts)

    def fed(vectorize: bool):
        return lambda: fl.run_fedavg(model, vectorize=vectorize, **common)

    def central():
        fl.train_centralised(model, x_train=ds.x_train[used], y_train=ds.y_train[used], epochs=1,
                             batch_size=args.batch, lr=0.05, device=dev)

    fed(True)()  # warm-up (vmap tracing, allocator)
    central()
    t_central = best_of(central, args.repeats)
    t_vec = best_of(fed(True), args.repeats)
    t_seq = best_of(fed(False), args.repeats)
    print(f"machine: {platform.machine()}, {device_name(dev)}, {torch.get_num_threads()} torch threads, "
          f"torch {torch.__version__}")
    print(f"MNIST, {args.clients} IID clients x {len(parts[0])} samples, model {args.model} "
          f"(d = {models.count_parameters(model):,}), 1 local epoch, batch {args.batch}, best of {args.repeats}")
    print(f"{'what':<48}{'seconds':>10}{'ratio':>10}")
    print(f"{'centralised training, same samples, 1 epoch':<48}{t_central:>10.3f}{1.0:>10.2f}")
    print(f"{'(b) one FL round, vectorised clients':<48}{t_vec:>10.3f}{t_vec / t_central:>10.2f}")
    print(f"{'(c) one FL round, sequential clients':<48}{t_seq:>10.3f}{t_seq / t_central:>10.2f}")
    print(f"{'(c) vectorised speed-up over sequential':<48}{'':>10}{t_seq / t_vec:>10.2f}")
    if args.conv_clients:
        cnn = models.build_model("cnn2", input_shape=ds.input_shape, num_classes=ds.num_classes, seed=0)
        conv = dict(common, partition=parts[:args.conv_clients])
        t_cv = best_of(lambda: fl.run_fedavg(cnn, vectorize=True, **conv), 1)
        t_cs = best_of(lambda: fl.run_fedavg(cnn, vectorize=False, **conv), 1)
        label = f"(c) cnn2, {args.conv_clients} clients: vectorised / sequential"
        print(f"{label:<48}{t_cv:>10.3f}{t_cv / t_cs:>10.2f}   (sequential {t_cs:.3f} s; 'auto' picks "
              f"{'vectorised' if on_cuda else 'sequential'} on {dev})")
    if args.conv_clients and not on_cuda:     # (d): the CPU's memory layouts
        cnn = models.build_model("cnn2", input_shape=ds.input_shape, num_classes=ds.num_classes, seed=0)
        layout = fl.ParamLayout.from_model(cnn)
        gp = {k: v.detach() for k, v in cnn.named_parameters()}
        ids = list(range(args.conv_clients))
        scheds = [training.batch_schedule(len(parts[i]), epochs=1, batch_size=args.batch, generator=torch.Generator().manual_seed(i))
                  for i in ids]
        spec = training.OptimizerSpec(name="sgd", lr=0.05)

        def local(cl: bool):
            return lambda: training._train_sequential(cnn, gp, ds.x_train, ds.y_train, scheds, [parts[i] for i in ids], spec,
                                                layout, channels_last=cl)
        local(True)()
        t_cl = best_of(local(True), args.repeats)
        t_cf = best_of(local(False), args.repeats)
        label = "(d) cnn2 local training, channels-last / plain"
        print(f"{label:<48}{t_cl:>10.3f}{t_cl / t_cf:>10.2f}   (plain {t_cf:.3f} s)")


if __name__ == "__main__":
    main()
