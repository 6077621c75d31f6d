"""Causal language modelling with Hugging Face's Trainer, the way transformers' example
examples/pytorch/language-modeling/run_clm.py does it, written here for transformers 5.x (that example's copy
in the transformers repository targets 4.57 and still reads ``overwrite_output_dir``, which 5.x removed):

- the same command-line options for what it uses (``--model_type`` + ``--config_overrides`` to train from
  scratch, ``--tokenizer_name``, ``--train_file`` (.txt), ``--block_size``, and every TrainingArguments option),
  parsed by HfArgumentParser;
- the same resume: ``--resume_from_checkpoint DIR``, or else the last ``checkpoint-N`` in ``--output_dir``
  (transformers' get_last_checkpoint), passed to ``Trainer.train(resume_from_checkpoint=...)``: model,
  optimizer, scheduler, RNG states and the position in the data come back from it;
- the same data path: datasets' ``load_dataset("text", ...)``, tokenized, concatenated and cut into blocks of
  ``block_size`` tokens, under ``main_process_first`` so rank 0 writes the datasets cache first.

Nothing is fetched from a hub: the tokenizer and text are local (tests/clients/hf_clm/prepare.py writes them).
Run, e.g., on 2 CPU ranks:

    dlaunch run tests/clients/hf_clm/train_clm.py --ranks 2 -- --model_type gpt2 \\
        --config_overrides n_layer=2,n_head=2,n_embd=64,n_positions=64,vocab_size=512 \\
        --tokenizer_name DATA/tokenizer --train_file DATA/train.txt --block_size 64 --output_dir OUT \\
        --do_train --max_steps 200 --save_steps 20 --use_cpu --ddp_backend gloo --report_to none
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from itertools import chain

import datasets
import transformers
from datasets import load_dataset
from transformers import (
    CONFIG_MAPPING,
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_type: str = field(default="gpt2", metadata={"help": "model type to train from scratch"})
    config_overrides: str | None = field(default=None, metadata={"help": "e.g. n_layer=2,n_head=2,n_embd=64"})
    tokenizer_name: str = field(default="", metadata={"help": "a local tokenizer directory"})


@dataclass
class DataTrainingArguments:
    train_file: str = field(default="", metadata={"help": "the training text file (.txt)"})
    block_size: int = field(default=64, metadata={"help": "tokens per training sample"})
    keep_linebreaks: bool = field(default=True, metadata={"help": "keep line breaks of the text file"})
    max_train_samples: int | None = field(default=None, metadata={"help": "truncate the training set"})


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    if not model_args.tokenizer_name or not data_args.train_file:
        parser.error("need --tokenizer_name and --train_file")

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)])
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    logger.warning(f"Process rank: {training_args.process_index}, device: {training_args.device}, "
                   f"distributed training: {training_args.parallel_mode.value == 'distributed'}")

    # the last checkpoint in output_dir, as run_clm.py finds it
    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.do_train:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint is not None and training_args.resume_from_checkpoint is None:
            logger.info(f"Checkpoint detected, resuming training at {last_checkpoint}.")

    set_seed(training_args.seed)

    raw = load_dataset("text", data_files={"train": data_args.train_file}, keep_linebreaks=data_args.keep_linebreaks)
    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name)
    config = CONFIG_MAPPING[model_args.model_type]()
    if model_args.config_overrides:
        config.update_from_string(model_args.config_overrides)
    model = AutoModelForCausalLM.from_config(config)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    logger.info(f"Training new model from scratch: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M params")

    def tokenize(examples):
        return tokenizer(examples["text"])

    block_size = data_args.block_size

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total = (len(concatenated["input_ids"]) // block_size) * block_size
        result = {k: [t[i:i + block_size] for i in range(0, total, block_size)] for k, t in concatenated.items()}
        result["labels"] = result["input_ids"].copy()
        return result

    with training_args.main_process_first(desc="dataset map tokenization"):
        tokenized = raw.map(tokenize, batched=True, remove_columns=["text"], desc="Running tokenizer on dataset")
    with training_args.main_process_first(desc="grouping texts together"):
        lm_datasets = tokenized.map(group_texts, batched=True, desc=f"Grouping texts in chunks of {block_size}")
    train_dataset = lm_datasets["train"]
    if data_args.max_train_samples is not None:
        train_dataset = train_dataset.select(range(min(len(train_dataset), data_args.max_train_samples)))

    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset, processing_class=tokenizer,
                      data_collator=default_data_collator)
    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint or last_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()


if __name__ == "__main__":
    main()
