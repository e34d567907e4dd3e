"""The CUDA path (skipped without a GPU; CI has none): mechanisms on CUDA against the same closed forms as on the
CPU, CUDA determinism, and the vectorised (vmap) local training against the sequential one on CUDA.

CPU and CUDA draw different random streams, so their reports differ element by element: they are compared as
statistics (mean within 4 standard errors, variance within 10 % of the closed form), never element-wise."""
import pytest
import torch

from ldptut import fl, models
from ldptut.mechanisms import Hybrid, Laplace, Piecewise, TwoPoint
from ldptut.rng import generator
from ldptut.training import LocalSGD, OptimizerSpec

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

N = 200_000
GRID = torch.tensor([-1.7, -1.0, -0.5, 0.0, 0.3, 1.0, 2.5])


@pytest.mark.parametrize("cls", [TwoPoint, Laplace, Piecewise, Hybrid])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_mechanism_matches_its_closed_form_on_both_devices(cls, device):
    mech = cls(epsilon=1.0)
    x = GRID.to(device).expand(N, -1).contiguous()
    y = mech.privatize(x, generator(0, cls.__name__, "gpu-check", device=device))
    assert y.device.type == device and y.dtype == x.dtype and y.shape == x.shape
    mean, var = mech.mean(GRID).double(), mech.variance(GRID).double()
    y = y.double().cpu()
    z = (y.mean(0) - mean) / (var / N).sqrt()
    assert (z.abs() <= 4).all(), f"{device}: mean off, z = {z}"
    rel = y.var(0) / var - 1
    assert (rel.abs() <= 0.10).all(), f"{device}: variance off, rel = {rel}"


@pytest.mark.parametrize("cls", [TwoPoint, Laplace, Piecewise, Hybrid])
def test_cuda_is_deterministic_for_a_seed(cls):
    mech = cls(epsilon=2.0)
    x = torch.rand(10_000, device="cuda") * 2 - 1
    a = mech.privatize(x, generator(3, "det", device="cuda"))
    b = mech.privatize(x, generator(3, "det", device="cuda"))
    assert torch.equal(a, b)


def test_vmap_and_sequential_local_training_agree_on_cuda():
    """With cuDNN's TF32 convolutions off, the two paths agree to float32 rounding (1.5e-8 on an H200, 2026-11-27).
    With torch's default (``torch.backends.cudnn.allow_tf32`` True) they differ by up to 3.5e-4 after these two
    rounds, as TF32 rounds the convolutions' inputs to 10 mantissa bits in each path's own way: what the CUDA run
    records of the LDP-FL chapter were trained with (their provenance names the GPU and torch version)."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(300, 1, 8, 8, generator=g)
    y = (x.flatten(1).sum(1) > 32).long()
    part = [torch.arange(i, 300, 3) for i in range(3)]
    model = models.build_model("cnn_pool", input_shape=(1, 8, 8), num_classes=2, seed=0)
    out = {}
    for vec in (True, False):
        trainer = LocalSGD(batch_size=10, optimizer=OptimizerSpec(name="sgd", lr=0.05), vectorize=vec)
        cfg = fl.FLConfig(rounds=2, trainer=trainer, device="cuda", progress=False)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            out[vec] = fl.simulate(cfg, [fl.Run(seed=0, partition=part)], model=model, x_train=x, y_train=y,
                                   x_test=x, y_test=y).weights
    assert torch.allclose(out[True], out[False], atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("cls", [TwoPoint])
def test_cuda_privatize_takes_the_fused_kernel_and_the_torch_path_keeps_the_law(cls, monkeypatch):
    """On CUDA privatize() is the fused kernel (its reports equal kernels.privatize with a seed from the same
    generator); with LDPTUT_FUSED=0 it is the torch path, other numbers, the same law."""
    from ldptut import kernels

    mech = cls(epsilon=1.0)
    x = GRID.to("cuda").expand(N, -1).contiguous()
    fused = mech.privatize(x, generator(5, "fused", device="cuda"))
    assert torch.equal(fused, kernels.privatize(mech, x, generator(5, "fused", device="cuda")))
    monkeypatch.setenv("LDPTUT_FUSED", "0")
    plain = mech.privatize(x, generator(5, "fused", device="cuda"))
    assert not torch.equal(fused, plain)
    mean, var = mech.mean(GRID).double(), mech.variance(GRID).double()
    for y in (fused, plain):
        z = (y.double().cpu().mean(0) - mean) / (var / N).sqrt()
        assert (z.abs() <= 4).all(), z


@pytest.mark.parametrize("cls", [Laplace, Piecewise, Hybrid])
def test_grid_mechanisms_realise_the_same_law_on_cuda_and_cpu(cls):
    """The grid sampler (ldptut.fpsafe) runs the same float64 arithmetic on CUDA: the same uniforms give the same
    reports on both devices."""
    from ldptut import fpsafe

    mech = cls(epsilon=2.0)
    x = torch.linspace(-1.2, 1.2, 100_000, dtype=torch.float64)
    u = fpsafe.uniforms(x.shape, torch.Generator().manual_seed(0), "cpu")
    cpu = mech._sample(mech._clipped_input(x), u)
    cuda = mech._sample(mech._clipped_input(x.cuda()), u.cuda()).cpu()
    assert torch.equal(cpu, cuda)


def test_local_perturbation_perturbs_all_clients_in_one_call_on_cuda():
    """The batched (clients x d) kernel gives each client the reports that its own privatize() call would."""
    from ldptut.fl import FixedRange, LocalPerturbation, RoundContext

    payloads = torch.randn(6, 10_000, device="cuda")
    ctx = RoundContext(round=0, client_ids=torch.arange(6), layout=None, global_vector=torch.zeros(10_000, device="cuda"),
                       generators=[generator(0, "lp", i, device="cuda") for i in range(6)], send="weights",
                       num_samples=torch.ones(6))
    out = LocalPerturbation(mechanism=TwoPoint, epsilon=2.0, range=FixedRange(0.0, 0.5))(payloads, context=ctx)
    mech = TwoPoint(epsilon=2.0, center=0.0, radius=0.5)
    for i in range(6):
        assert torch.equal(out[i], mech.privatize(payloads[i], generator(0, "lp", i, device="cuda")))
