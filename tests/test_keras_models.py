"""The hand-built Keras pieces match their torchvision counterparts.

torch and TensorFlow crash when imported into one process here (triton's
native module), so each side runs in its own interpreter.
"""

import json
import subprocess
import sys

import numpy as np

from infra.helpers import ROOT

SIZES = [1, 2, 5, 6, 7, 13]

TORCH_SIDE = """
import json, sys, numpy as np, torch, torchvision
out = {}
for n in %(sizes)s:
    x = np.random.default_rng(n).random((2, n, n, 3), dtype=np.float32)
    y = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x).permute(0, 3, 1, 2), (6, 6))
    out[n] = y.permute(0, 2, 3, 1).numpy().tolist()
out["alexnet"] = sum(p.numel() for p in torchvision.models.alexnet(weights=None).parameters())
json.dump(out, sys.stdout)
"""

KERAS_SIDE = """
import json, sys, numpy as np
from benchmarks.frameworks import keras_models
out = {}
for n in %(sizes)s:
    x = np.random.default_rng(n).random((2, n, n, 3), dtype=np.float32)
    out[n] = np.asarray(keras_models.AdaptiveAveragePooling((6, 6))(x)).tolist()
out["alexnet"] = keras_models.alexnet((224, 224, 3), 1000).count_params()
json.dump(out, sys.stdout)
"""


def _run(code: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code % {"sizes": SIZES}],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_adaptive_pooling_and_alexnet_match_torchvision():
    expected, got = _run(TORCH_SIDE), _run(KERAS_SIDE)
    for n in SIZES:
        np.testing.assert_allclose(np.array(got[str(n)]), np.array(expected[str(n)]), atol=1e-6, err_msg=f"{n}x{n}")
    assert got["alexnet"] == expected["alexnet"] == 61_100_840
