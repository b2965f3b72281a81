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


def test_same_numbers_as_ogb_evaluator():
    nodeprop = pytest.importorskip("ogb.nodeproppred")
    from ladle.evaluation.metrics import evaluate

    gen = torch.Generator().manual_seed(1)
    y_true = torch.randint(0, 40, (300, 1), generator=gen)
    y_pred = torch.randint(0, 40, (300, 1), generator=gen)
    y_pred[:100] = y_true[:100]
    ours = evaluate("acc", {"y_true": y_true, "y_pred": y_pred})
    assert ours == pytest.approx(nodeprop.Evaluator("ogbn-arxiv").eval({"y_true": y_true, "y_pred": y_pred}))
    labels = (torch.rand(300, 112, generator=gen) > 0.7).long()
    scores = torch.rand(300, 112, generator=gen)
    ours = evaluate("rocauc", {"y_true": labels, "y_pred": scores})
    theirs = nodeprop.Evaluator("ogbn-proteins").eval({"y_true": labels, "y_pred": scores})
    assert ours["rocauc"] == pytest.approx(theirs["rocauc"], abs=1e-10)
