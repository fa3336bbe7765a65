"""The training step's forward: the causal LM's logits at the target positions only, with the embedding space's
noise where the data lists it (Algorithm 1 with T on embeddings; docs/method.md §1)."""

from __future__ import annotations

import torch

from workflow_lib.perturb.strategies import get as get_strategy


def target_logits(model, batch: dict[str, torch.Tensor], embedding: dict | None = None) -> torch.Tensor:
    """Logits [N, V] at the target positions only: base-model hidden states, gathered, through the head. With an
    embedding-space perturbation that lists its positions (`embedding`, `batch["noise_mask"]`), the model reads
    its input embeddings with noise added there (perturb/embedding.py), drawn from torch's generator."""
    inputs = {"input_ids": batch["input_ids"]}
    where = batch.get("noise_mask")
    if embedding is not None and where is not None and not get_strategy(embedding["strategy"]).hooked:
        from workflow_lib.perturb.embedding import noised_embeddings, random_noise

        dim = model.get_input_embeddings().weight.shape[1]
        noise = random_noise((int(where.sum()), dim), embedding["noise"], where.device)
        inputs = {"inputs_embeds": noised_embeddings(model, batch["input_ids"], where, noise, embedding)}
    hidden = model.base_model(**inputs, attention_mask=batch["attention_mask"]).last_hidden_state
    return model.get_output_embeddings()(hidden[batch["target_row"], batch["target_pos"]])


class TargetLogits(torch.nn.Module):
    """The causal LM with a forward that returns the logits at the target positions only.

    The step calls this module's forward as accelerate prepared it, never the LM's parts directly: with several
    processes the prepared module is DistributedDataParallel, whose forward arms the gradient all-reduce, and
    with mixed precision the prepared forward is the one that runs under autocast."""

    def __init__(self, lm, embedding: dict | None = None):
        super().__init__()
        self.lm, self.embedding = lm, embedding

    def forward(self, input_ids, attention_mask, target_row, target_pos, noise_mask=None):
        """The noise of an embedding-space perturbation is added in training mode only (validation reads the
        unperturbed text, as NEFTune's hook does)."""
        return target_logits(
            self.lm,
            {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "target_row": target_row,
                "target_pos": target_pos,
                "noise_mask": noise_mask,
            },
            self.embedding if self.training else None,
        )
