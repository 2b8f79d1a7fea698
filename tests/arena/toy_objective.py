"""A training objective written outside the project, as a newcomer adds one: label-smoothed SFT.

The whole objective is this module plus one :func:`arena.objectives.register` call (the test does it): the data
of ``sft`` (unguided successes in their sampling context) and a cross-entropy whose target is mixed with the
uniform distribution, ε = 0.1 (Szegedy et al. 2016, "Rethinking the Inception Architecture", arXiv 1512.00567;
``torch.nn.functional.cross_entropy(label_smoothing=ε)``). docs/architecture.md shows the code below it, whole
(tests/arena/test_objectives.py checks that the page and this file agree).
"""

from __future__ import annotations

import torch.nn.functional as F

from arena.distill.data import build_dataset, require_examples
from arena.distill.objectives.base import Encoded, LossParts, Objective
from arena.distill.trainer import completion_logits, encode_examples
from arena.objectives import ObjectiveSpec

SPEC = ObjectiveSpec("smoothed-sft", "sft with label smoothing 0.1", "supervised", "toy_objective:LabelSmoothedSFT",
                     "Szegedy et al. 2016 (arXiv 1512.00567)", kinds=("context", "guided", "sft"), uses_hints=False)


class LabelSmoothedSFT(Objective):
    def build_dataset(self, rollouts, ctx):
        return build_dataset(rollouts, self.name, ctx.success_threshold, lambda chat: chat, sampling_context=True,
                             guided="none")

    def require(self, data, ctx):
        require_examples(data, ctx.session, ctx.success_threshold)

    def encode(self, tokenizer, examples, cfg, eos_id):
        return Encoded(*encode_examples(tokenizer, examples, cfg.max_seq_len, eos_id))

    def micro_batch_loss(self, run, batch):
        tm = batch["target_mask"]
        targets = batch["input_ids"][:, 1:][tm]
        loss = F.cross_entropy(completion_logits(run.model, batch), targets, reduction="none", label_smoothing=0.1)
        return LossParts(loss.sum(), int(batch["attention_mask"].sum()), int(tm.sum()))
