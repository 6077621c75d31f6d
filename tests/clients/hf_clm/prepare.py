"""Writes the HF Trainer client's inputs into a directory, offline: ``train.txt``, a seeded pseudo-English text
(``--lines`` lines of words drawn from a fixed list), and ``tokenizer/``, a byte-level BPE tokenizer trained on
it with the ``tokenizers`` library (``--vocab`` entries) and saved as a fast tokenizer that
``AutoTokenizer.from_pretrained(DIR)`` loads. The same arguments write the same files.

    python tests/clients/hf_clm/prepare.py OUTDIR [--lines 4000] [--vocab 512] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

WORDS = ("the a of to and in is it that was for on with as his he at by be this had not are but from or have an "
         "they which one you were her all she there would their we him been has when who will more no if out so "
         "said what up its about into than them can only other new some could time these two may then do first "
         "any my now such like our over man me even most made after also did many before must through back years "
         "where much your way well down should because each just those people how too little state good very make "
         "world still own see men work long get here between both life being under never day same another know "
         "while last might us great old year off come since against go came right used take three").split()


def write_text(path: Path, lines: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as out:
        for _ in range(lines):
            words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
            out.write(" ".join(words).capitalize() + ".\n")


def write_tokenizer(text: Path, directory: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([str(text)], trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024, "bos_token": "<|endoftext|>",
              "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir")
    parser.add_argument("--lines", type=int, default=4000)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "train.txt", args.lines, args.seed)
    write_tokenizer(out / "train.txt", out / "tokenizer", args.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
