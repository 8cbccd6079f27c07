"""The LightningModule and data that tests/python/test_lightning.py and
dist_workers/lightning_ddp.py train on tpu and on CPU.

A small MLP regressor with AdamW and a StepLR schedule stepped every batch (so a checkpoint
carries optimizer and scheduler state that the resumed steps depend on), a validation loss, and
a record of what every training step saw. No dropout: tpu and CPU draw different random numbers.
"""

import lightning.pytorch as pl
import torch

SAMPLES = 32
FEATURES = 8


def dataset(seed=0):
    inputs = torch.randn(SAMPLES, FEATURES, generator=torch.Generator().manual_seed(seed))
    return torch.utils.data.TensorDataset(inputs, inputs.sum(1, keepdim=True).sin())


def loader(batch_size=4, seed=0):
    return torch.utils.data.DataLoader(dataset(seed), batch_size=batch_size)


def build_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.LayerNorm(16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 1))


def make_optimizer(parameters):
    optimizer = torch.optim.AdamW(parameters, lr=1e-2, weight_decay=0.01)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)


class Regressor(pl.LightningModule):
    def __init__(self, sync_dist=False):
        super().__init__()
        self.net = build_net()
        self.sync_dist = sync_dist
        self.losses = []  # per training step
        self.seen = set()  # (batch device, parameter device, autocast on, forward output dtype)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, index):
        x, y = batch
        out = self(x)
        self.seen.add((x.device, next(self.parameters()).device,
                       torch.is_autocast_enabled(x.device.type), out.dtype))
        loss = torch.nn.functional.mse_loss(out.float(), y)
        self.losses.append(loss.detach().item())
        self.log("train_loss", loss, sync_dist=self.sync_dist)
        return loss

    def validation_step(self, batch, index):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x).float(), y),
                 sync_dist=self.sync_dist)

    def configure_optimizers(self):
        optimizer, scheduler = make_optimizer(self.parameters())
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def trainer(accelerator, tmp_path=None, **options):
    """A quiet Trainer; with tmp_path, a ModelCheckpoint there keeps every epoch's and the last."""
    callbacks = []
    if tmp_path is not None:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True,
                                                      save_top_k=-1, monitor="val_loss"))
    return pl.Trainer(accelerator=accelerator, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=tmp_path is not None,
                      callbacks=callbacks, **options)
