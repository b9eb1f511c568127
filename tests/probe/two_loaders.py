"""A plain script with a training and a validation DataLoader and no Stoker in it: the zero-code
probe must watch both and name each by the line that iterates it."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

train = DataLoader(TensorDataset(torch.arange(96.0).reshape(48, 2), torch.arange(48)), batch_size=8, shuffle=True)
val = DataLoader(TensorDataset(torch.zeros(20, 2), torch.zeros(20)), batch_size=5)
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
for epoch in range(epochs):
    steps = 0
    for x, y in train:
        steps += 1
    for x, y in val:
        pass
    print(f"epoch {epoch} train_steps {steps}", flush=True)
