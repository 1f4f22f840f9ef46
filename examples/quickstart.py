"""Quick start: jit a function, look inside it, run it, check it against numpy."""
import numpy as np

import jitcore as jc


@jc.jit
def mlp_activation(x, w, b):
    """One dense layer with a bias and GELU, then a row softmax."""
    h = jc.gelu(x @ w + b)
    return jc.softmax(h, axis=-1)


rng = np.random.default_rng(0)
x = rng.standard_normal((64, 256), dtype=np.float32)
w = rng.standard_normal((256, 128), dtype=np.float32) / 16
b = rng.standard_normal(128, dtype=np.float32)

y = mlp_activation(x, w, b)

print(mlp_activation.graph(x, w, b))              # the traced tensor IR
for k in mlp_activation.kernels(x, w, b):         # the fused kernels
    print(f"{k.name:14s} vectorized={k.vectorized!s:5s} lanes={k.lanes:2d} {k.loop_nest}")
ir_text = mlp_activation.llvm_ir(x, w, b)
print("vector types in the IR:", sorted(set(t for t in ("<16 x float>", "<8 x float>",
                                                         "<4 x float>") if t in ir_text)))

# the same computation in numpy, float64
from math import erf, sqrt  # noqa: E402

h = x.astype(np.float64) @ w + b
h = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
e = np.exp(h - h.max(axis=-1, keepdims=True))
ref = e / e.sum(axis=-1, keepdims=True)
assert np.allclose(y, ref, rtol=1e-4, atol=1e-6), np.abs(y - ref).max()
print("matches numpy: max abs error", float(np.abs(y - ref).max()))
