"""The nli-encoder variant with a pretrained-style encoder from Hugging Face `transformers`: a BERT-style sequence
classifier (a tiny config, random weights from a fixed seed: nothing is downloaded) traced with torchscript=True,
fine-tuned by bellows on the example's sentence pairs (config-hf.yaml: model.name torchscript), then loaded back
into the `transformers` class, whose logits must equal what `bellows predict` computes.

    hf_encoder.py prepare OUT_DIR [--vocab 512] [--hidden 64] [--layers 2]
        writes OUT_DIR/hf.pt (the traced model) and OUT_DIR/probe.npz (token ids, mask, segments of a few
        random sentence pairs, for the comparison)
    hf_encoder.py compare OUT_DIR WEIGHTS PRED.npy
        loads bellows' trained weights (model.safetensors) into BertForSequenceClassification (every parameter
        by name; the buffers TorchScript keeps and Python's state_dict does not are listed) and prints the
        largest difference between its class probabilities on probe.npz and bellows predict's (PRED.npy)

Exit status 3 when `transformers` cannot be imported (the caller skips the variant and says so).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

try:
    import transformers
    from transformers import BertConfig, BertForSequenceClassification
except ImportError as e:  # a test dependency from PyPI; where it cannot be installed the variant is skipped
    print(f"hf_encoder: transformers is not installed ({e})", file=sys.stderr)
    sys.exit(3)


def config(args):
    return BertConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                      num_attention_heads=4, intermediate_size=2 * args.hidden, max_position_embeddings=256,
                      num_labels=3, attn_implementation="eager", torchscript=True,
                      # A traced graph keeps the training flag it was traced with (docs/models.md "Scripting or
                      # tracing"): with dropout it would drop in bellows predict too. This variant fine-tunes without.
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def probe(vocab, rows=8, length=24, seed=1):
    """Random sentence pairs as bellows' text_pairs source batches them: [CLS] a [SEP] b [SEP], padded."""
    rng = np.random.default_rng(seed)
    x = np.zeros((rows, length), np.int64)
    seg = np.zeros((rows, length), np.int64)
    mask = np.zeros((rows, length), bool)
    for i in range(rows):
        n = int(rng.integers(8, length + 1))
        x[i, :n] = rng.integers(5, vocab, size=n)
        cut = n // 2
        seg[i, cut:n] = 1
        mask[i, :n] = True
    return x, mask, seg


def prepare(args):
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config(args))
    model.train()
    x, mask, seg = probe(args.vocab)
    example = (torch.from_numpy(x[:2]), torch.from_numpy(mask[:2]), torch.from_numpy(seg[:2]))
    traced = torch.jit.trace(model, example, check_trace=False)
    traced.save(os.path.join(args.dir, "hf.pt"))
    np.savez(os.path.join(args.dir, "probe.npz"), x=x, x_mask=mask, segments=seg)
    print(f"hf_encoder: transformers {transformers.__version__}, {sum(p.numel() for p in model.parameters())} parameters; "
          f"wrote {args.dir}/hf.pt (traced) and probe.npz")


def compare(args):
    from safetensors.torch import load_file
    torch.manual_seed(0)
    model = BertForSequenceClassification(config(args))
    state = load_file(args.weights)
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys:
        sys.exit(f"hf_encoder: parameters missing from {args.weights}: {result.missing_keys}")
    model.eval()
    probe_data = np.load(os.path.join(args.dir, "probe.npz"))
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(probe_data["x"]), attention_mask=torch.from_numpy(probe_data["x_mask"]),
                       token_type_ids=torch.from_numpy(probe_data["segments"]))[0]
    ours = np.load(args.predictions)
    diff = float(np.abs(ours - logits.softmax(-1).numpy()).max())
    print(json.dumps({"tensors": len(state), "unexpected": sorted(result.unexpected_keys), "max_abs_diff": diff}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("prepare", "compare"):
        s = sub.add_parser(name)
        s.add_argument("dir")
        if name == "compare":
            s.add_argument("weights")
            s.add_argument("predictions")
        s.add_argument("--vocab", type=int, default=512)
        s.add_argument("--hidden", type=int, default=64)
        s.add_argument("--layers", type=int, default=2)
    args = p.parse_args()
    prepare(args) if args.command == "prepare" else compare(args)


if __name__ == "__main__":
    main()
