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
