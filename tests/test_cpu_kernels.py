"""ldptut.cpu_kernels: ``import ldptut`` pins torch's CPU kernels (ATen and oneDNN to AVX2, oneMKL to its COMPATIBLE
branch), so the book's numbers do not depend on whether the CPU has AVX512. Each check runs in a fresh Python
process, since the libraries read the variables once, at their first computation."""
import json
import os
import subprocess
import sys

import pytest

from ldptut.cpu_kernels import OPT_OUT, PINNED, cpu_has_avx2
from ldptut.provenance import kernels_of

needs_avx2 = pytest.mark.skipif(not cpu_has_avx2(), reason="the pin applies to x86-64 CPUs with AVX2 only")

# One computation per library: torch.randn (ATen's vectorised normal sampler), a matrix product (oneMKL's sgemm),
# a convolution (oneDNN). Prints a hash of each result's bits.
PROBE = """
import hashlib, json, torch
torch.set_num_threads(2)
h = lambda t: hashlib.sha1(t.contiguous().numpy().tobytes()).hexdigest()
g = torch.Generator().manual_seed(0)
x = torch.randn(300, 784, generator=g)
w = torch.randn(784, 100, generator=g)
c = torch.nn.functional.conv2d(torch.randn(4, 1, 28, 28, generator=g), torch.randn(8, 1, 5, 5, generator=g))
cap = torch.backends.cpu.get_cpu_capability()
print(json.dumps({"aten": h(x), "mkl": h(x @ w), "onednn": h(c), "capability": cap}))
"""
LOW = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PINNED and k != OPT_OUT}
    env.update(extra)
    return env


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def _probe(prefix: str, env: dict) -> dict:
    out = _python(prefix + PROBE, env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_avx2
def test_importing_ldptut_sets_the_pinned_variables_and_keeps_the_users_own():
    code = "import os, ldptut, json; print(json.dumps({k: os.environ.get(k) for k in %r}))" % list(PINNED)
    assert json.loads(_python(code, _clean_env()).stdout) == PINNED
    mine = json.loads(_python(code, _clean_env(MKL_CBWR="AUTO")).stdout)
    assert mine == {**PINNED, "MKL_CBWR": "AUTO"}
    assert json.loads(_python(code, _clean_env(**{OPT_OUT: "1"})).stdout) == {k: None for k in PINNED}


@needs_avx2
def test_a_variable_set_after_import_torch_but_before_computing_takes_effect_in_each_library():
    """What the pin relies on: setting os.environ inside Python, as ``import ldptut`` does, reaches ATen, oneMKL and
    oneDNN as an exported variable does. Shown with low settings, which change every library's bits on an AVX2 CPU
    (ATen's and oneDNN's AVX2 pin changes nothing there, so it could not show the effect)."""
    native = _probe("", _clean_env(**{OPT_OUT: "1"}))
    exported = _probe("", _clean_env(**LOW, **{OPT_OUT: "1"}))
    in_process = _probe(f"import os, torch\nos.environ.update({LOW!r})\n", _clean_env(**{OPT_OUT: "1"}))
    assert in_process == exported
    assert all(exported[k] != native[k] for k in ("aten", "mkl", "onednn")), (native, exported)


@needs_avx2
def test_the_pin_gives_the_same_bits_as_exporting_its_variables():
    pinned = _probe("import ldptut\n", _clean_env())
    exported = _probe("", _clean_env(**PINNED, **{OPT_OUT: "1"}))
    assert pinned["capability"] == "AVX2"
    assert pinned == exported


@needs_avx2
def test_the_pin_warns_when_torch_had_already_fixed_other_kernels():
    code = ("import os, warnings, torch\nos.environ['ATEN_CPU_CAPABILITY'] = 'default'\n"
            "torch.backends.cpu.get_cpu_capability()\ndel os.environ['ATEN_CPU_CAPABILITY']\n"
            "with warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n    import ldptut\n"
            "print([str(x.message) for x in w])")
    out = _python(code, _clean_env())
    assert "torch already uses DEFAULT" in out.stdout and "import ldptut first" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("device, kernels", [
    ("cpu: AMD EPYC, 2 cores, AVX2", "AVX2"), ("cpu: AMD EPYC, 2 cores, AVX2 (pinned)", "AVX2 (pinned)"),
    ("cpu: Intel(R) Xeon(R) Processor, 2 cores, AVX512", "AVX512"),
    ("cpu: x86_64, 2 cores (CPU model not recorded)", ""), ("cuda: NVIDIA H100 80GB HBM3", "")])
def test_kernels_of_reads_a_records_device_string(device, kernels):
    assert kernels_of(device) == kernels
