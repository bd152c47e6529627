"""Logits reach the host safely whatever their device: the two causes of the CUDA traceback at load
(``../shared/gpu/README.md`` section 5), both checkable without a GPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from specwhisper.backend import to_host
from specwhisper.row_patterns import max_abs_diff


class _FakeCudaView:
    """Stands in for a CUDA StorageView: ``np.asarray`` on it does not fail, it gives an object array."""

    device = "cuda"

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.copied = False

    def __array__(self, dtype=None, copy=None):
        return np.array([object()], dtype=object)

    def to_device(self, _device):
        self.copied = True
        return self.data


def test_cuda_storage_is_copied_to_the_host_first():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = _FakeCudaView(data)
    out = to_host(view)
    assert view.copied and out.dtype == np.float32 and np.array_equal(out, data)
    assert to_host(data) is data  # arrays pass through


def test_equal_infinities_compare_equal_and_nan_is_far():
    a = np.array([-np.inf, 1.0, 2.0], np.float32)
    assert max_abs_diff(a, a.copy()) == 0.0  # CUDA logits hold -inf: equal rows must compare equal
    b = a.copy()
    b[2] = 2.5
    assert max_abs_diff(a, b) == 0.5
    c = a.copy()
    c[1] = np.nan
    assert max_abs_diff(a, c) == np.inf
    d = a.copy()
    d[0] = 0.0
    assert max_abs_diff(a, d) == np.inf  # -inf against a finite value


def test_cuda_without_a_device_is_a_clear_error(base_model_dir, capsys):
    import ctranslate2
    import pytest

    from specwhisper.cli import main

    if ctranslate2.get_cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device: the no-device error cannot be shown here")
    assert main(["transcribe", "--model", str(base_model_dir), "--device", "cuda",
                 str(base_model_dir / "config.json")]) == 2
    err = capsys.readouterr().err
    assert "CUDA" in err and "Traceback" not in err


def test_a_flat_cost_curve_is_kept_on_a_gpu_and_refused_on_the_cpu(base_engine, monkeypatch):
    """On a GPU a 17-row call costs what a 1-row call does (its calls are bound by launches, not
    rows): that curve is the device's and is used, where on the CPU the same curve can only mean a
    machine too busy to measure (seen as a "machine was busy" warning on a fresh H200)."""
    from specwhisper import backend

    lm = base_engine.lm
    flat = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.01, 17: 1.02}
    stored = []
    monkeypatch.setattr(lm, "_measure_call_costs", lambda: dict(flat))
    monkeypatch.setattr(backend, "cache_put", lambda key, value: stored.append(key))
    monkeypatch.setattr(backend, "measuring", lambda: None)
    monkeypatch.setattr(lm, "device", "cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lm.call_costs(use_cache=False) == flat
    assert len(stored) == 1 and "|cuda|" in stored[0]
    monkeypatch.setattr(lm, "device", "cpu")
    with pytest.warns(UserWarning, match="machine was busy"):
        assert lm.call_costs(use_cache=False) is None
    assert len(stored) == 1
