"""Speculative decoding in the inference model against published measured speed-ups.

The figures below were written down from the papers before the model was run on them
(the commit that adds them has no model call). Every row gives what the paper measured
and what the model is given: the acceptance (``alpha`` per drafted token, or the mean
accepted length ``tau`` for a tree draft), the draft's shape and the hardware. The draft's
cost is never given as a ratio: the model times the draft from its shape.

EAGLE (Li, Wei, Zhang, Zhang, "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty", ICML 2024, arXiv 2401.15077v3):

* Target LLaMA2-Chat 70B in FP16 on 4 A100 (40G) (section 4.4: "constrained by 4 A100
  (40G) GPUs totaling 160G of CUDA memory"; "All evaluations were conducted at FP16
  precision"), Hugging Face implementation with the layers split over the GPUs.
* Draft: "an FC layer and a decoder layer" (the Autoregression Head, 0.99 B trainable
  parameters for 70B, section 4) plus the target's own LM head, 5 forward passes per step
  (Appendix A.1); the tree of Figure 9 has 25 draft tokens (EAGLE repository,
  eagle/model/choices.py ``mc_sim_7b_63``: 4 + 8 + 8 + 3 + 2 nodes), verified in one
  target pass with the root: 26 tokens per sequence.
* MT-bench, temperature 0, tau = 3.81 (Table 2); speed-up over vanilla decoding at batch
  size 1, 2, 3, 4: 3.01x, 2.81x, 2.50x, 2.40x (Table 7).
* Batch 1 (Table 1 / Table 8), speed-up and tau: HumanEval T=0 3.52x / 4.42, GSM8K T=0
  3.03x / 3.93, Alpaca T=0 2.97x / 3.77, HumanEval T=1 2.92x / 3.76, GSM8K T=1 2.74x /
  3.58, Alpaca T=1 2.65x / 3.47.
* Vicuna 7B on one RTX 3090 (Table 7: 2.90x, 2.87x, 2.65x, 2.76x at batch 1-4, tau 3.94)
  is written down but not modelled: netio has no RTX 3090 system.

Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023 (arXiv 2211.17192), Table 2: target T5-XXL (11B), drafts T5-small (77M), T5-base
(250M), T5-large (800M), one TPU-v4, batch 1, walltime speed-up over the T5X
implementation, (task, draft, temperature, gamma, alpha, speed-up):

* EnDe: small T=0 7 0.75 3.4x; base T=0 7 0.80 2.8x; large T=0 7 0.82 1.7x; small T=1 7
  0.62 2.6x; base T=1 5 0.68 2.4x; large T=1 3 0.71 1.4x.
* CNN/DM: small T=0 5 0.65 3.1x; base T=0 5 0.73 3.0x; large T=0 3 0.74 2.2x; small T=1
  5 0.53 2.3x; base T=1 3 0.55 2.2x; large T=1 3 0.56 1.7x.
"""

from __future__ import annotations

# EAGLE, LLaMA2-Chat 70B, MT-bench T=0: (batch size, measured speed-up), Table 7; tau from
# Table 2.
EAGLE_70B_MT_BENCH_TAU = 3.81
EAGLE_70B_MT_BENCH_BY_BATCH = [(1, 3.01), (2, 2.81), (3, 2.50), (4, 2.40)]
# EAGLE, LLaMA2-Chat 70B, batch 1: (dataset and temperature, tau, measured speed-up),
# Table 1 (= Table 8 for T=0).
EAGLE_70B_BATCH1 = [
    ("HumanEval T=0", 4.42, 3.52),
    ("GSM8K T=0", 3.93, 3.03),
    ("Alpaca T=0", 3.77, 2.97),
    ("HumanEval T=1", 3.76, 2.92),
    ("GSM8K T=1", 3.58, 2.74),
    ("Alpaca T=1", 3.47, 2.65),
]
# Tree of EAGLE's Figure 9 (choices.py mc_sim_7b_63): nodes per depth; 5 draft passes.
EAGLE_TREE_NODES_BY_DEPTH = (4, 8, 8, 3, 2)

# Leviathan et al. Table 2: (task, draft, temperature, gamma, alpha, measured speed-up).
LEVIATHAN_T5XXL = [
    ("EnDe", "t5-small", 0, 7, 0.75, 3.4),
    ("EnDe", "t5-base", 0, 7, 0.80, 2.8),
    ("EnDe", "t5-large", 0, 7, 0.82, 1.7),
    ("EnDe", "t5-small", 1, 7, 0.62, 2.6),
    ("EnDe", "t5-base", 1, 5, 0.68, 2.4),
    ("EnDe", "t5-large", 1, 3, 0.71, 1.4),
    ("CNNDM", "t5-small", 0, 5, 0.65, 3.1),
    ("CNNDM", "t5-base", 0, 5, 0.73, 3.0),
    ("CNNDM", "t5-large", 0, 3, 0.74, 2.2),
    ("CNNDM", "t5-small", 1, 5, 0.53, 2.3),
    ("CNNDM", "t5-base", 1, 3, 0.55, 2.2),
    ("CNNDM", "t5-large", 1, 3, 0.56, 1.7),
]
