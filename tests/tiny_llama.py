"""Tiny random Llama checkpoints with SmolLM2's tokenizer, for tests of the local backend and of training.

Two layers of width 64 (by default), so loading, sampling and a few training steps take seconds on
CPU. Both builders need the tokenizer of the embedded model: ``ARENA_TEST_TOKENIZER_DIR`` points at
one, otherwise the embedded model is converted once (``agents.backends.local.ensure_converted``).
Importable as ``tiny_llama`` (tests/ is on ``sys.path`` through tests/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path


def tokenizer_dir() -> Path:
    """The directory holding SmolLM2's tokenizer files (``ARENA_TEST_TOKENIZER_DIR``, else the converted model)."""
    env = os.environ.get("ARENA_TEST_TOKENIZER_DIR")
    if env:
        return Path(env)
    from agents.backends.local import converted_model_dir, ensure_converted

    ensure_converted()
    return converted_model_dir()


def make_tiny(out: Path, seed: int = 0, hidden: int = 64) -> Path:
    """Save a tiny random Llama (2 layers, width ``hidden``, default init) and the tokenizer under ``out``.

    Args:
        out: the directory to write (created by ``save_pretrained``).
        seed: ``torch.manual_seed`` before the weights are drawn (same seed, same weights).
        hidden: hidden size; the MLP is twice as wide.

    Returns:
        ``out``.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir())
    tok.save_pretrained(out)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def make_sharp_tiny(out: Path) -> Path:
    """Save a tiny random Llama whose weights are drawn with a large init scale (0.5), and the tokenizer.

    The large scale keeps greedy argmaxes well separated, so exact token comparisons between
    batched and one-at-a-time decoding do not flip on rounding noise (a near-uniform random model
    would tie). Seed 0, 2 layers of width 64.

    Returns:
        ``out``.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir())
    tok.save_pretrained(out)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True, initializer_range=0.5,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out
