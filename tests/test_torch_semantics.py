"""jitcore.torch follows torch's semantics inside torch modules where they differ from numpy's
(issue 27): negative embedding ids raise, integer arithmetic wraps, float -> uint8 converts
as torch does. The numpy API keeps numpy's rules (tests/test_tracing_numpy.py)."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import jitcore.torch as jt                  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)


def eager(module, *args):
    with torch.inference_mode():
        return module.eval()(*args)


@pytest.fixture
def dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("via", ["compile", "backend"])
def test_embedding_ids_out_of_range_raise_as_nn_embedding_does(via, dynamo):
    """jc.take counts negative indices from the end (numpy); nn.Embedding raises."""
    m = torch.nn.Embedding(10, 4).eval()
    ids = torch.tensor([[1, 2, 3]])
    c = jt.compile(m, ids) if via == "compile" else torch.compile(m, backend="jitcore")
    assert torch.equal(c(ids), eager(m, ids))
    for bad in (-1, -10, -11, 10):
        with pytest.raises(IndexError):
            eager(m, torch.tensor([[1, bad, 3]]))
        with pytest.raises(IndexError):
            c(torch.tensor([[1, bad, 3]]))
    assert torch.equal(c(torch.tensor([[9, 0, 9]])), eager(m, torch.tensor([[9, 0, 9]])))


class IntegerWrap(torch.nn.Module):
    """Python ints out of an integer tensor's range, and float -> uint8 of negative values:
    torch keeps the low bits where numpy raises OverflowError (and jitcore saturates)."""

    def forward(self, u, i, f):
        return (u + 300, u * 300, u - 300, u < 300, u == 300, u // 300, u % 300, u & 300,
                i + 2 ** 40, i * -(2 ** 33 + 3), f.to(torch.uint8), (f * 0.5).to(torch.uint8),
                u / 300)


def test_integer_scalars_and_float_to_uint8_wrap_as_torch_does():
    u = torch.tensor([1, 200, 255], dtype=torch.uint8)
    i = torch.tensor([1, -7, 2 ** 30], dtype=torch.int32)
    f = torch.tensor([-1.0, -3.7, 300.0, 0.0, 255.9, -255.5])
    m = IntegerWrap()
    c = jt.compile(m, u, i, f)
    assert c.fallbacks == []
    for k, (got, want) in enumerate(zip(c(u, i, f), eager(m, u, i, f))):
        assert got.dtype == want.dtype and torch.equal(got, want), (k, got, want)


class CountCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x * 2


class ScaleInPlace(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


@pytest.mark.parametrize("make,what", [(CountCalls, "updates its buffer 'calls'"),
                                       (ScaleInPlace, "writes its input 'x' in place")])
def test_state_mutation_in_forward_gets_advice_that_applies(make, what, dynamo):
    """The module is in eval form already: the message says what is written and what to do
    (it said "compile it in eval form"); the backend runs such a graph in torch."""
    m = make().eval()
    with pytest.raises(TypeError) as info:
        jt.compile(m, torch.ones(3))
    message = str(info.value)
    assert what in message and "out of place" in message and 'backend="jitcore"' in message
    assert "compile it in eval form" not in message
    x, ref = torch.ones(3), torch.ones(3)
    got, want = torch.compile(make().eval(), backend="jitcore")(x), make().eval()(ref)
    assert torch.equal(got, want) and torch.equal(x, ref)        # the write happened too


class Dropout(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.inner(x))


def test_compile_leaves_every_submodule_in_the_mode_it_had():
    """jt.compile exports the eval form, then restores each training flag (it left the
    module in eval form): compiling must not change the user's module."""
    m = Dropout()
    m.head.eval()                                   # a mixed state, kept as it was
    before = [(name, mod.training) for name, mod in m.named_modules()]
    x = torch.randn(3, 4)
    c = jt.compile(m, x)
    assert [(name, mod.training) for name, mod in m.named_modules()] == before
    torch.testing.assert_close(c(x), eager(m, x))             # the eval form: no dropout
