from ladle.evaluation.evaluator import Evaluator, mix_states, split_scores
from ladle.evaluation.metrics import METRICS, accuracy, micro_f1, rocauc, score_logits

__all__ = ["METRICS", "Evaluator", "accuracy", "micro_f1", "mix_states", "rocauc", "score_logits", "split_scores"]
