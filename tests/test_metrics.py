import numpy as np
import pytest
import torch

from ladle.evaluation.metrics import accuracy, micro_f1, rocauc, score_logits


def test_accuracy_and_micro_f1_by_hand():
    assert accuracy(torch.tensor([[0], [1], [2], [2]]), torch.tensor([[0], [2], [2], [1]])) == 0.5
    y = torch.tensor([[1, 0, 1], [0, 1, 0]])
    p = torch.tensor([[1, 1, 0], [0, 1, 0]])
    # tp=2 (0,0) (1,1); fp=1 (0,1); fn=1 (0,2) -> 2*2 / (4 + 1 + 1)
    assert micro_f1(y, p) == pytest.approx(4 / 6)


def test_rocauc_matches_sklearn_with_ties():
    sklearn = pytest.importorskip("sklearn.metrics")
    gen = torch.Generator().manual_seed(0)
    y = (torch.rand(200, 6, generator=gen) > 0.6).long()
    y[:, 5] = 1  # one task with only positives: skipped, as OGB does
    scores = torch.randint(0, 7, (200, 6), generator=gen).double()  # many ties
    expected = np.mean([sklearn.roc_auc_score(y[:, t].numpy(), scores[:, t].numpy()) for t in range(5)])
    assert rocauc(y, scores) == pytest.approx(expected, abs=1e-12)


def test_rocauc_by_hand_and_undefined():
    assert rocauc(torch.tensor([0, 0, 1, 1]), torch.tensor([0.1, 0.4, 0.35, 0.8])) == 0.75
    with pytest.raises(ValueError):
        rocauc(torch.ones(4, 1), torch.rand(4, 1))


def test_score_logits_follows_the_metric():
    logits = torch.tensor([[2.0, -1.0], [-3.0, 0.5]])
    assert score_logits("acc", logits, torch.tensor([0, 1])) == 1.0
    assert score_logits("f1", logits, torch.tensor([[1.0, 0.0], [0.0, 1.0]])) == 1.0
