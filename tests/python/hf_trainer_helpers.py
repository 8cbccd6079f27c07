"""Small transformers models, their data and a Trainer run, shared by test_hf_accelerate.py and
its 2-process worker (dist_workers/hf_accelerate.py). Dropout is off: tpu and CPU draw different
random numbers."""

import torch
import transformers

STEPS = 4
BATCH = 4  # the global batch: per device, divided by the number of processes
SEQUENCE = 16
VOCAB = 64


def gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQUENCE, n_embd=32, n_layer=2,
                                     n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def bert():
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=SEQUENCE, num_labels=3,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(config)


def causal_lm_data(count):
    ids = torch.randint(0, VOCAB, (count, SEQUENCE), generator=torch.Generator().manual_seed(1))
    return [{"input_ids": row, "labels": row} for row in ids]


def classification_data(count):
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(1, VOCAB, (count, SEQUENCE), generator=generator)
    lengths = torch.randint(SEQUENCE // 2, SEQUENCE + 1, (count,), generator=generator)
    mask = (torch.arange(SEQUENCE) < lengths[:, None]).long()
    labels = torch.randint(0, 3, (count,), generator=generator)
    return [{"input_ids": i * m, "attention_mask": m, "labels": label}
            for i, m, label in zip(ids, mask, labels)]


MODELS = {"gpt2": (gpt2, causal_lm_data), "bert": (bert, classification_data)}


def trainer_run(family, output_dir, *, cpu, processes=1, steps=STEPS, resume=None,
                save_steps=None, hook=None, **arguments):
    """Trainer.train() from seed 0 (identical weights on every device): the Trainer and each
    logged step's (loss, gradient norm). `hook(model)` may instrument the model first."""
    build, data = MODELS[family]
    torch.manual_seed(0)
    model = build()
    if hook is not None:
        hook(model)
    args = transformers.TrainingArguments(
        output_dir=str(output_dir), use_cpu=cpu, per_device_train_batch_size=BATCH // processes,
        max_steps=steps, learning_rate=1e-3, logging_steps=1, report_to=[], seed=0,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        disable_tqdm=True, dataloader_num_workers=0, **arguments)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data(steps * BATCH))
    trainer.train(resume_from_checkpoint=resume)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return trainer, {entry["step"]: (entry["loss"], entry["grad_norm"]) for entry in logs}


def as_tensor(history):
    """The (loss, gradient norm) rows of a history in step order."""
    return torch.tensor([history[step] for step in sorted(history)], dtype=torch.float64)
