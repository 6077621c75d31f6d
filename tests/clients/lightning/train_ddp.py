"""A tiny Lightning DDP job (strategy="ddp", 2 CPU processes), written as a torchrun user writes one.

Lightning sees torchrun's variables (its TorchElasticEnvironment) and then starts no processes of its own, so
this script runs under any launcher that sets them. Each rank prints its final training loss; the checkpoint
and the CSV log go to ./lightning_logs of the launch directory.
"""

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    L.seed_everything(0)
    x = torch.randn(256, 8)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=3, logger=CSVLogger("."),
                        log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regression(), data)
    print(f"rank {trainer.global_rank} of {trainer.world_size}: final train_loss "
          f"{trainer.callback_metrics['train_loss'].item():.6f}")
    # PyTorch's documented shutdown: without it, gloo's worker threads may outlive the interpreter's teardown
    # and abort the process after training ("terminate called without an active exception", SIGABRT:
    # pytorch/pytorch#190489), under any launcher; seen once in this test's CI run
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
