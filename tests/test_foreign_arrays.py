"""torch tensors and JAX arrays as inputs: read in place (the kernels see the tensor's own
memory, strided views through their strides), written in place through out=, every
supported dtype, and clear errors for what cannot be read in place."""
import numpy as np
import pytest

import jitcore as jc
from jitcore.call import foreign
from jitcore.call.signature import to_array

torch = pytest.importorskip("torch")

TORCH_DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8,
                torch.bool]


def affine(a, b):
    return a * b + b


def affine_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a * b + b


@pytest.fixture
def seen(monkeypatch):
    """Data pointers of the arrays that foreign.view handed to the call path."""
    pointers = []
    real = foreign.view

    def view(x, label):
        arr = real(x, label)
        pointers.append((arr.ctypes.data, arr.strides))
        return arr
    monkeypatch.setattr(foreign, "view", view)
    return pointers


def _tensor(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=dtype)
    hi = 2 if dtype == torch.uint8 else 50       # uint8: small enough not to wrap a*b+b
    return torch.randint(0, hi + 1, shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "transposed", "scalar"])
def test_torch_inputs_read_in_place(dtype, layout, seen):
    base_a, base_b = _tensor(dtype, (6, 10), 1), _tensor(dtype, (6, 10), 2)
    if layout == "sliced":
        a, b = base_a[1:, ::3], base_b[:-1, 1:9:2]
    elif layout == "transposed":
        a, b = base_a.t(), base_b.t()
    elif layout == "scalar":
        a, b = base_a[2, 3], base_b[1, 1]
    else:
        a, b = base_a, base_b
    f = jc.jit(affine)
    op = (lambda x, y: x & y | y) if dtype == torch.bool else affine_reference
    fb = jc.jit(lambda x, y: x & y | y) if dtype == torch.bool else f
    got = fb(a, b)
    want = op(a.numpy(), b.numpy())
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    # the kernels read the tensors' own memory, through their strides
    itemsize = a.element_size()
    assert (a.data_ptr(), tuple(s * itemsize for s in a.stride())) in seen
    assert (b.data_ptr(), tuple(s * itemsize for s in b.stride())) in seen


def test_in_place_changes_are_seen_by_the_cached_plan():
    a, b = torch.arange(1024, dtype=torch.float32), torch.full((1024,), 2.0)
    f = jc.jit(affine)
    np.testing.assert_array_equal(f(a, b), affine_reference(a.numpy(), b.numpy()))
    for step in range(3):
        a.mul_(-1.5).add_(step)                  # the same tensor, changed in place
        np.testing.assert_array_equal(f(a, b), affine_reference(a.numpy(), b.numpy()))


def test_steady_torch_calls_take_the_foreign_fast_path():
    """After one call with torch tensors, the next ones view them first (no detour through
    the numpy-only native check and the slow path), and everything else still works."""
    a, b = torch.linspace(-1, 1, 64), torch.full((64,), 2.0)
    f = jc.jit(affine)
    for _ in range(3):
        np.testing.assert_array_equal(f(a, b), affine_reference(a.numpy(), b.numpy()))
    assert f._fast.__name__ == "foreign_fast"
    a2 = torch.linspace(0, 1, 10)                       # another shape: a new plan
    np.testing.assert_array_equal(f(a2, a2), affine_reference(a2.numpy(), a2.numpy()))
    np.testing.assert_array_equal(f(a.numpy(), b), affine_reference(a.numpy(), b.numpy()))
    with pytest.raises(TypeError, match=r"argument 0 \(a\).*detach"):
        f(torch.ones(64, requires_grad=True), b)
    p = torch.nn.Parameter(torch.ones(64), requires_grad=False)      # a subclass
    np.testing.assert_array_equal(f(p, b), affine_reference(p.numpy(), b.numpy()))


def test_view_shares_memory():
    t = torch.randn(4, 9)[:, 1::2]
    arr = to_array(t, 0, "t")
    assert arr.ctypes.data == t.data_ptr()
    assert arr.strides == tuple(s * 4 for s in t.stride())
    t.add_(1.0)
    np.testing.assert_array_equal(arr, t.numpy())


def test_mixed_numpy_and_torch():
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    b = torch.linspace(0, 2, 12).reshape(3, 4)
    f = jc.jit(affine)
    np.testing.assert_allclose(f(a, b), affine_reference(a, b.numpy()), rtol=1e-6)
    np.testing.assert_allclose(f(b, a), affine_reference(b.numpy(), a), rtol=1e-6)


@pytest.mark.parametrize("target", ["contiguous", "strided view", "tuple"])
def test_out_torch_tensor_is_written_in_place(target):
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    f = jc.jit(affine)
    want = affine_reference(a.numpy(), b.numpy())
    if target == "strided view":
        holder = torch.zeros(5, 16)
        out = holder[:, ::2]
        result = f(a, b, out=out)
        assert result is out
        np.testing.assert_allclose(holder[:, ::2].numpy(), want, rtol=1e-6)
        assert not holder[:, 1::2].any()         # nothing written between the elements
        return
    out = torch.zeros(5, 8)
    pointer = out.data_ptr()
    result = f(a, b, out=(out,) if target == "tuple" else out)
    if target == "tuple":
        assert isinstance(result, tuple) and result[0] is out
    else:
        assert result is out
    assert out.data_ptr() == pointer
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    out.zero_()                                  # again: the fast path with a known plan
    f(a, b, out=out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_out_overlapping_an_input_tensor():
    a = torch.arange(10, dtype=torch.float32)
    want = affine_reference(a.numpy(), a.numpy())
    jc.jit(affine)(a, a, out=a)                  # in place: a goes through a temporary
    np.testing.assert_array_equal(a.numpy(), want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.complex64, torch.int8, torch.int16],
                         ids=str)
def test_unsupported_torch_dtypes(dtype):
    t = torch.zeros(4, dtype=dtype)
    with pytest.raises(jc.DTypeError, match=r"argument 0 \(a\).*(float16|complex64"
                                            r"|int8|int16).*supported"):
        jc.jit(affine)(t, t)


def test_bfloat16_tensors_read_and_written_in_place(seen):
    """torch.bfloat16 tensors are viewed (their int16 bits as ml_dtypes.bfloat16), in and
    out= alike (tests/test_bfloat16.py checks the values)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    b = torch.ones(3, 4, dtype=torch.bfloat16)
    f = jc.jit(affine)
    want = affine_reference(a.float().numpy(), b.float().numpy())
    for _ in range(3):                           # the slow path, then the steady one
        got = f(a, b)
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(got.astype(np.float32), want)
    assert seen and seen[0][0] == a.data_ptr()    # the first call's view: a's own memory
    assert foreign.steady_type((a, b))[1](a).ctypes.data == a.data_ptr()
    out = torch.empty(3, 4, dtype=torch.bfloat16)
    pointer = out.data_ptr()
    assert f(a, b, out=out) is out and out.data_ptr() == pointer
    np.testing.assert_array_equal(out.float().numpy(), got.astype(np.float32))


def test_tensor_requiring_grad():
    t = torch.ones(4, requires_grad=True)
    with pytest.raises(TypeError, match=r"argument 0 \(a\).*detach"):
        jc.jit(affine)(t, torch.ones(4))


def test_tensor_on_another_device():
    t = torch.empty(4, device="meta")
    with pytest.raises(TypeError, match=r"argument 1 \(b\).*device meta.*CPU"):
        jc.jit(affine)(torch.ones(4), t)
    with pytest.raises(TypeError, match=r"out\[0\].*device meta"):
        jc.jit(affine)(torch.ones(4), torch.ones(4), out=t)


class FakeGpuArray:
    """A DLPack producer that lives on a CUDA device (DLPack device type 2)."""
    dtype = "float32"
    device = "cuda:0"

    def __dlpack_device__(self):
        return 2, 0

    def __dlpack__(self, *args, **kwargs):
        raise BufferError("cannot export device memory to the CPU")


def test_gpu_array_error_is_clear():
    with pytest.raises(TypeError, match=r"argument 0 \(a\): a FakeGpuArray on device cuda:0"):
        jc.jit(affine)(FakeGpuArray(), np.ones(4, np.float32))


def test_jax_arrays_read_in_place(seen):
    jnp = pytest.importorskip("jax.numpy")
    f = jc.jit(affine)
    for dtype in (jnp.float32, jnp.int32, jnp.bool_, jnp.uint8):
        a = (jnp.arange(24) % 3).astype(dtype).reshape(4, 6)
        b = (jnp.arange(24) % 2).astype(dtype).reshape(4, 6)
        fn = jc.jit(lambda x, y: x & y | y) if dtype == jnp.bool_ else f
        ref = (lambda x, y: x & y | y) if dtype == jnp.bool_ else affine_reference
        got, want = fn(a, b), ref(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
        assert any(p == a.unsafe_buffer_pointer() for p, _ in seen)
        seen.clear()


def test_jax_bfloat16_arrays():
    jnp = pytest.importorskip("jax.numpy")
    a = jnp.arange(8, dtype=jnp.bfloat16)
    got = jc.jit(affine)(a, jnp.ones(8, jnp.bfloat16))
    assert got.dtype == np.asarray(a).dtype     # ml_dtypes' bfloat16, which JAX uses
    np.testing.assert_array_equal(got.astype(np.float32),
                                  affine_reference(np.arange(8.0), np.ones(8)))


def test_jax_errors():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(ValueError, match="read-only"):    # JAX arrays are immutable
        jc.jit(affine)(np.ones(4, np.float32), np.ones(4, np.float32),
                       out=jnp.zeros(4, jnp.float32))
