# changed: nothing.
# From pytorch/examples (https://github.com/pytorch/examples) at 77f55b9, distributed/ddp-tutorial-series/datautils.py.
# BSD 3-Clause License, Copyright (c) 2017, Pytorch contributors; full text in tests/clients/LICENSE.pytorch-examples.
import torch
from torch.utils.data import Dataset

class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size
    
    def __getitem__(self, index):
        return self.data[index]